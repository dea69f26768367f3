//! Logging setup: a filter, text or JSON lines, and wasmtime/cranelift kept quiet.

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber. `filter` uses `RUST_LOG` syntax; wasmtime and
/// cranelift are held at `warn` unless the filter names them.
///
/// # Errors
/// A filter that is not valid, with why: the command refuses to run rather than log less
/// than it was asked to.
pub fn init(filter: &str, json: bool) -> Result<(), BadFilter> {
    let mut spec = filter.to_string();
    for noisy in ["cranelift", "wasmtime"] {
        if !spec.contains(noisy) {
            spec.push_str(&format!(",{noisy}=warn"));
        }
    }
    let filter = EnvFilter::try_new(&spec).map_err(|source| BadFilter {
        filter: filter.to_string(),
        source,
    })?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
    Ok(())
}

/// A log filter (`--log`, `INRUN_LOG` or `RUST_LOG`) that is not valid.
#[derive(Debug, thiserror::Error)]
#[error("log filter {filter:?} (--log, INRUN_LOG or RUST_LOG) is not valid")]
pub struct BadFilter {
    filter: String,
    #[source]
    source: tracing_subscriber::filter::ParseError,
}
