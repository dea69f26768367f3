//! `inrun plugin new`: a project in each language builds with its own `build.sh` and
//! renders its sample CR out of the box, and all four render the same thing.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

fn inrun(dir: &Path, args: &[&str], cache: &Path) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_inrun"))
        .args(args)
        .current_dir(dir)
        .env("INRUN_CACHE_DIR", cache)
        .env(
            "INRUN_SDK_ROOT",
            Path::new(env!("CARGO_MANIFEST_DIR")).join(".."),
        )
        .output()
        .expect("run inrun");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_new_plugin_in_each_language_builds_and_renders_its_sample_cr() {
    let work = tempfile::tempdir().expect("tempdir");
    let cache = work.path().join("cache");
    let mut rendered = Vec::new();
    for lang in ["rust", "python", "js", "c"] {
        let name = format!("hello-{lang}");
        let (ok, _, err) = inrun(
            work.path(),
            &["plugin", "new", "--lang", lang, &name],
            &cache,
        );
        assert!(ok, "plugin new --lang {lang}: {err}");
        let project = work.path().join(&name);
        let build = Command::new(project.join("build.sh"))
            .current_dir(&project)
            .env_remove("CARGO_TARGET_DIR")
            .output()
            .expect("run build.sh");
        assert!(
            build.status.success(),
            "{lang} build.sh failed:\n{}\n{}",
            String::from_utf8_lossy(&build.stdout),
            String::from_utf8_lossy(&build.stderr)
        );
        let (ok, out, err) = inrun(
            &project,
            &[
                "render",
                "-b",
                "blueprint.yaml",
                "-f",
                "cr.yaml",
                "-o",
                "json",
            ],
            &cache,
        );
        assert!(ok, "{lang} render failed: {err}");
        let out: Value = serde_json::from_str(&out).expect("json");
        assert_eq!(out["reconciler"], "constructor");
        assert_eq!(out["resources"][0]["kind"], "ConfigMap", "{lang}: {out}");
        assert_eq!(
            out["resources"][0]["data"]["message"],
            format!("hello from {name}"),
            "{lang}"
        );
        assert_eq!(
            out["status"]["message"],
            format!("hello from {name}"),
            "{lang}"
        );
        rendered.push((lang, out["resources"][0]["metadata"].clone()));
    }
    for (lang, meta) in &rendered[1..] {
        assert_eq!(meta, &rendered[0].1, "{lang} differs from rust");
    }
}

#[test]
fn a_bad_name_or_an_existing_directory_is_refused_with_one_clear_line() {
    let work = tempfile::tempdir().expect("tempdir");
    let cache = work.path().join("cache");
    let (ok, _, err) = inrun(work.path(), &["plugin", "new", "Bad_Name"], &cache);
    assert!(!ok);
    assert!(err.contains("plugin name \"Bad_Name\""), "{err}");
    assert!(inrun(work.path(), &["plugin", "new", "twice"], &cache).0);
    let (ok, _, err) = inrun(work.path(), &["plugin", "new", "twice"], &cache);
    assert!(!ok);
    assert!(err.contains("already exists"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}
