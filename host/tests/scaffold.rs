//! `inrun plugin new`: a project made outside the repository (a scratch directory) builds
//! with the SDK packages `make sdk` put in `dist/sdk/`, and its own tests pass: the unit
//! test of its reconcile function and its golden case under `inrun test`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

fn repo() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    here.canonicalize().unwrap_or(here)
}

/// The package in `dist/sdk/` whose name starts with `prefix` and ends with `suffix`.
fn package(prefix: &str, suffix: &str) -> PathBuf {
    let dist = repo().join("dist/sdk");
    std::fs::read_dir(&dist)
        .unwrap_or_else(|e| panic!("{}: {e}; run `make sdk`", dist.display()))
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            let name = p.file_name().unwrap_or_default().to_string_lossy();
            name.starts_with(prefix) && name.ends_with(suffix)
        })
        .unwrap_or_else(|| panic!("no {prefix}*{suffix} in {}; run `make sdk`", dist.display()))
}

/// Runs `cmd`, failing the test with its output when it fails; its standard output.
fn run(cmd: &mut Command, what: &str) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    assert!(
        out.status.success(),
        "{what} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn inrun(dir: &Path, cache: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_inrun"));
    cmd.current_dir(dir).env("INRUN_CACHE_DIR", cache);
    cmd
}

/// `inrun plugin new --lang lang name` in `work`; the project directory. No generated
/// file names the checkout `inrun` was built from.
fn new_project(work: &Path, lang: &str, name: &str) -> PathBuf {
    run(
        inrun(work, &work.join("cache")).args(["plugin", "new", "--lang", lang, name]),
        "inrun plugin new",
    );
    let project = work.join(name);
    let root = repo().display().to_string();
    let mut pending = vec![project.clone()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).expect("list project").flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else {
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                assert!(
                    !text.contains(&root),
                    "{} names the build checkout {root}",
                    path.display()
                );
            }
        }
    }
    project
}

/// The project's golden case passes under `inrun test`, and its sample CR renders.
fn golden_case_passes(project: &Path, cache: &Path, name: &str) {
    let out = run(inrun(project, cache).arg("test"), "inrun test");
    assert!(out.contains("ok sample\n1 passed, 0 failed\n"), "{out}");
    let out = run(
        inrun(project, cache).args([
            "render",
            "-b",
            "blueprint.yaml",
            "-f",
            "cr.yaml",
            "-o",
            "json",
        ]),
        "inrun render",
    );
    let out: serde_json::Value = serde_json::from_str(&out).expect("render prints JSON");
    assert_eq!(
        out["resources"][0]["data"]["message"],
        format!("hello from {name}")
    );
}

#[test]
fn the_rust_sdks_wit_is_the_repositorys() {
    for file in ["package.wit", "reconciler.wit", "deps/reconciler-0.1.0.wit"] {
        let copy = std::fs::read_to_string(repo().join("sdk/rust/wit").join(file)).expect("copy");
        let original = std::fs::read_to_string(repo().join("wit/0.2.0").join(file)).expect("wit");
        assert!(
            copy == original,
            "sdk/rust/wit/{file} differs from wit/0.2.0/{file}: copy it again"
        );
    }
}

#[test]
fn a_new_rust_plugin_builds_with_the_packaged_crates_and_passes_its_tests() {
    let started = Instant::now();
    let work = tempfile::tempdir().expect("tempdir");
    let project = new_project(work.path(), "rust", "hello-rust");
    // The .crate files as a registry would serve them, patched in for crates.io.
    let crates = work.path().join("crates");
    std::fs::create_dir_all(&crates).expect("mkdir");
    for name in ["inrun-sdk-", "inrun-contract-"] {
        run(
            Command::new("tar")
                .arg("xzf")
                .arg(package(name, ".crate"))
                .arg("-C")
                .arg(&crates),
            "unpacking a .crate",
        );
    }
    let unpacked = |prefix: &str| {
        std::fs::read_dir(&crates)
            .expect("list")
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                p.file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .starts_with(prefix)
            })
            .expect("unpacked crate")
    };
    std::fs::create_dir_all(project.join(".cargo")).expect("mkdir");
    std::fs::write(
        project.join(".cargo/config.toml"),
        format!(
            "[patch.crates-io]\ninrun-sdk = {{ path = {:?} }}\ninrun-contract = {{ path = {:?} }}\n",
            unpacked("inrun-sdk-"),
            unpacked("inrun-contract-")
        ),
    )
    .expect("write cargo config");
    // The plugins workspace's target directory: its release dependencies (wit-bindgen,
    // serde) are built already with the same profile.
    let target = repo().join("plugins/target");
    run(
        Command::new(project.join("build.sh"))
            .current_dir(&project)
            .env("CARGO_TARGET_DIR", &target),
        "build.sh",
    );
    let tested = run(
        Command::new("cargo")
            .args(["test", "-q"])
            .current_dir(&project)
            .env("CARGO_TARGET_DIR", &target),
        "cargo test",
    );
    assert!(tested.contains("2 passed"), "{tested}");
    golden_case_passes(&project, &work.path().join("cache"), "hello-rust");
    eprintln!("rust scaffold: {:.1?}", started.elapsed());
}

#[test]
fn a_new_python_plugin_builds_with_the_wheel_and_passes_its_tests() {
    let started = Instant::now();
    let work = tempfile::tempdir().expect("tempdir");
    let project = new_project(work.path(), "python", "hello-python");
    // The wheel in the project's venv first; build.sh finds inrun-sdk there and installs
    // only componentize-py.
    let venv = project.join(".venv");
    run(
        Command::new("python3").args(["-m", "venv"]).arg(&venv),
        "python3 -m venv",
    );
    run(
        Command::new(venv.join("bin/pip"))
            .args(["install", "--quiet", "--disable-pip-version-check"])
            .arg(package("inrun_sdk-", ".whl")),
        "pip install the wheel",
    );
    run(
        Command::new(project.join("build.sh")).current_dir(&project),
        "build.sh",
    );
    let out = Command::new(venv.join("bin/python"))
        .args(["-m", "unittest", "-v"])
        .current_dir(&project)
        .output()
        .expect("run unittest");
    let report = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{report}");
    assert!(report.contains("Ran 2 tests"), "{report}");
    golden_case_passes(&project, &work.path().join("cache"), "hello-python");
    eprintln!("python scaffold: {:.1?}", started.elapsed());
}

#[test]
fn a_new_javascript_plugin_builds_with_the_npm_tarball_and_passes_its_tests() {
    let started = Instant::now();
    let work = tempfile::tempdir().expect("tempdir");
    let project = new_project(work.path(), "js", "hello-js");
    run(
        Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--loglevel=error"])
            .arg(package("inrun-sdk-", ".tgz"))
            .current_dir(&project),
        "npm install the tarball",
    );
    run(
        Command::new(project.join("build.sh")).current_dir(&project),
        "build.sh",
    );
    let out = run(
        Command::new("npm")
            .args(["test", "--silent"])
            .current_dir(&project),
        "npm test",
    );
    assert!(out.contains("# pass 2"), "{out}");
    golden_case_passes(&project, &work.path().join("cache"), "hello-js");
    eprintln!("js scaffold: {:.1?}", started.elapsed());
}

#[test]
fn a_new_c_plugin_builds_with_its_copied_sdk_and_passes_its_golden_case() {
    let started = Instant::now();
    let work = tempfile::tempdir().expect("tempdir");
    let project = new_project(work.path(), "c", "hello-c");
    run(
        Command::new(project.join("build.sh")).current_dir(&project),
        "build.sh",
    );
    golden_case_passes(&project, &work.path().join("cache"), "hello-c");
    eprintln!("c scaffold: {:.1?}", started.elapsed());
}

#[test]
fn a_bad_name_or_an_existing_directory_is_refused_with_one_clear_line() {
    let work = tempfile::tempdir().expect("tempdir");
    let cache = work.path().join("cache");
    let out = inrun(work.path(), &cache)
        .args(["plugin", "new", "Bad_Name"])
        .output()
        .expect("run inrun");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("plugin name \"Bad_Name\""), "{err}");
    run(
        inrun(work.path(), &cache).args(["plugin", "new", "twice"]),
        "plugin new",
    );
    let out = inrun(work.path(), &cache)
        .args(["plugin", "new", "twice"])
        .output()
        .expect("run inrun");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("already exists"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}
