//! What every `make bench` target shares: where plugins are and how a section of
//! BENCHMARKS.md is written.
#![allow(dead_code)]

use std::path::PathBuf;

/// The directory `make plugins` builds components into (`INRUN_PLUGIN_DIR` overrides it).
pub fn plugin_dir() -> PathBuf {
    std::env::var_os("INRUN_PLUGIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../plugins/target/wasm32-wasip2/release")
        })
}

/// Replaces (or appends) the section between `<!-- bench:NAME -->` markers in BENCHMARKS.md.
pub fn write_section(name: &str, body: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../BENCHMARKS.md");
    let begin = format!("<!-- bench:{name} -->");
    let end = format!("<!-- /bench:{name} -->");
    let old = std::fs::read_to_string(&path).unwrap_or_else(|_| {
        "# Benchmarks\n\nWritten by `make bench`; every table compares against a baseline measured in the same run.\n\n".to_string()
    });
    let block = format!("{begin}\n{body}{end}\n");
    let new = match (old.find(&begin), old.find(&end)) {
        (Some(a), Some(b)) if b > a => format!(
            "{}{}{}",
            &old[..a],
            block,
            &old[b + end.len()..].trim_start_matches('\n')
        ),
        _ => format!("{old}{block}"),
    };
    std::fs::write(&path, new).expect("write BENCHMARKS.md");
}
