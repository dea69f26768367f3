//! `inrun plugin new`: a project made outside the repository (a scratch directory) with
//! `--sdk dist/sdk` (the packages `make sdk` writes) builds as written, taking the SDK from
//! its copy of those packages and from no registry (C and Go: from the copy `inrun` wrote),
//! and its own tests pass: the unit test of its reconcile function and its golden case
//! under `inrun test`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

fn repo() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    here.canonicalize().unwrap_or(here)
}

/// The SDK packages `make sdk` writes.
fn dist_sdk() -> PathBuf {
    let dist = repo().join("dist/sdk");
    assert!(dist.is_dir(), "{}: run `make sdk`", dist.display());
    dist
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

/// `inrun plugin new --lang lang --sdk dist/sdk name` in `work`, which warns of nothing;
/// the project directory. No generated or copied file names the checkout `inrun` was built
/// from.
fn new_project(work: &Path, lang: &str, name: &str) -> PathBuf {
    let out = inrun(work, &work.join("cache"))
        .args(["plugin", "new", "--lang", lang, "--sdk"])
        .arg(dist_sdk())
        .arg(name)
        .output()
        .expect("run inrun plugin new");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && stderr.is_empty(), "{stderr}");
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
    // Both crates came from .sdk/ (path packages have no `source` in the lock), none from
    // a registry.
    let lock = std::fs::read_to_string(project.join("Cargo.lock")).expect("Cargo.lock");
    for name in ["inrun-sdk", "inrun-contract"] {
        let entry = lock
            .split("[[package]]")
            .find(|e| e.contains(&format!("name = \"{name}\"\n")))
            .unwrap_or_else(|| panic!("{name} not in Cargo.lock:\n{lock}"));
        assert!(
            !entry.contains("source ="),
            "{name} from a registry:{entry}"
        );
    }
    golden_case_passes(&project, &work.path().join("cache"), "hello-rust");
    eprintln!("rust scaffold: {:.1?}", started.elapsed());
}

#[test]
fn a_new_python_plugin_builds_with_the_wheel_and_passes_its_tests() {
    let started = Instant::now();
    let work = tempfile::tempdir().expect("tempdir");
    let project = new_project(work.path(), "python", "hello-python");
    let venv = project.join(".venv");
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
    // The SDK in the venv is this repository's (from the copied wheel).
    let installed = run(
        Command::new(venv.join("bin/python"))
            .args(["-c", "import inrun_sdk; print(inrun_sdk.__file__)"])
            .current_dir(&project),
        "locate inrun_sdk",
    );
    assert_eq!(
        std::fs::read_to_string(installed.trim()).expect("installed SDK"),
        std::fs::read_to_string(repo().join("sdk/python/inrun_sdk.py")).expect("SDK source")
    );
    golden_case_passes(&project, &work.path().join("cache"), "hello-python");
    eprintln!("python scaffold: {:.1?}", started.elapsed());
}

#[test]
fn a_new_javascript_plugin_builds_with_the_npm_tarball_and_passes_its_tests() {
    let started = Instant::now();
    let work = tempfile::tempdir().expect("tempdir");
    let project = new_project(work.path(), "js", "hello-js");
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
    // npm took the copied tarball, which holds this repository's SDK.
    let lock: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(project.join("package-lock.json")).expect("package-lock.json"),
    )
    .expect("lock is JSON");
    let resolved = &lock["packages"]["node_modules/inrun-sdk"]["resolved"];
    assert_eq!(
        resolved.as_str(),
        Some(format!("file:.sdk/inrun-sdk-{}.tgz", env!("CARGO_PKG_VERSION")).as_str()),
        "{lock}"
    );
    assert_eq!(
        std::fs::read_to_string(project.join("node_modules/inrun-sdk/inrun-sdk.js"))
            .expect("installed SDK"),
        std::fs::read_to_string(repo().join("sdk/js/inrun-sdk.js")).expect("SDK source")
    );
    golden_case_passes(&project, &work.path().join("cache"), "hello-js");
    eprintln!("js scaffold: {:.1?}", started.elapsed());
}

#[test]
fn a_new_typescript_plugin_builds_with_the_npm_tarball_and_passes_its_tests() {
    let started = Instant::now();
    let work = tempfile::tempdir().expect("tempdir");
    let project = new_project(work.path(), "typescript", "hello-ts");
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
    // npm took the copied tarball, which holds this repository's SDK and its declarations,
    // and every path its package.json exports.
    let lock: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(project.join("package-lock.json")).expect("package-lock.json"),
    )
    .expect("lock is JSON");
    let resolved = &lock["packages"]["node_modules/inrun-sdk"]["resolved"];
    assert_eq!(
        resolved.as_str(),
        Some(format!("file:.sdk/inrun-sdk-{}.tgz", env!("CARGO_PKG_VERSION")).as_str()),
        "{lock}"
    );
    let installed = project.join("node_modules/inrun-sdk");
    for file in [
        "inrun-sdk.js",
        "inrun-sdk.d.ts",
        "inrun-package.d.ts",
        "inrun-wit.d.ts",
    ] {
        assert_eq!(
            std::fs::read_to_string(installed.join(file)).expect("installed SDK"),
            std::fs::read_to_string(repo().join("sdk/js").join(file)).expect("SDK source"),
            "{file}"
        );
    }
    let manifest: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(installed.join("package.json")).expect("package.json"),
    )
    .expect("package.json is JSON");
    let mut exported = Vec::new();
    for target in manifest["exports"].as_object().expect("exports").values() {
        match target {
            serde_json::Value::String(path) => exported.push(path.clone()),
            serde_json::Value::Object(conditions) => {
                exported.extend(
                    conditions
                        .values()
                        .filter_map(|p| p.as_str().map(String::from)),
                );
            }
            other => panic!("export {other}"),
        }
    }
    for path in exported.iter().filter(|p| !p.contains('*')) {
        assert!(installed.join(path).is_file(), "the tarball lacks {path}");
    }
    golden_case_passes(&project, &work.path().join("cache"), "hello-ts");

    // A call the SDK's declarations refuse stops the build at tsc, before componentize-js.
    let app = project.join("src/app.ts");
    let source = std::fs::read_to_string(&app).expect("app.ts");
    let wrong = source.replace(
        ".status('message', message);",
        ".status('message', message).requeueAfter('soon');",
    );
    assert_ne!(wrong, source, "the template changed");
    std::fs::write(&app, wrong).expect("write app.ts");
    let out = Command::new(project.join("build.sh"))
        .current_dir(&project)
        .output()
        .expect("run build.sh");
    let said = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("src/app.ts(") && said.contains("error TS2345"),
        "{said}"
    );
    assert!(!said.contains("built hello-ts.wasm"), "{said}");
    eprintln!("typescript scaffold: {:.1?}", started.elapsed());
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
fn a_new_go_plugin_builds_with_its_copied_sdk_and_passes_its_tests() {
    let started = Instant::now();
    let work = tempfile::tempdir().expect("tempdir");
    let project = new_project(work.path(), "go", "hello-go");
    // The SDK in the project is this repository's.
    for file in ["inrun/request.go", "_glue/reconciler.go", "component.sh"] {
        assert_eq!(
            std::fs::read_to_string(project.join("inrun-sdk").join(file)).expect("copied SDK"),
            std::fs::read_to_string(repo().join("sdk/go").join(file)).expect("SDK source"),
            "{file}"
        );
    }
    run(
        Command::new(project.join("build.sh")).current_dir(&project),
        "build.sh",
    );
    let tested = run(
        Command::new("go")
            .args(["test", "-count=1", "-v", "./..."])
            .current_dir(&project),
        "go test",
    );
    assert_eq!(tested.matches("--- PASS").count(), 2, "{tested}");
    assert!(tested.contains("ok  \thello-go"), "{tested}");
    golden_case_passes(&project, &work.path().join("cache"), "hello-go");
    eprintln!("go scaffold: {:.1?}", started.elapsed());
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

#[test]
fn without_sdk_plugin_new_warns_that_the_packages_are_unpublished_and_how_to_pass_them() {
    let work = tempfile::tempdir().expect("tempdir");
    let cache = work.path().join("cache");
    let out = inrun(work.path(), &cache)
        .args(["plugin", "new", "--lang", "python", "bare"])
        .output()
        .expect("run inrun");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.starts_with(
            "warning: the inrun-sdk packages are not published on public registries yet"
        ),
        "{err}"
    );
    assert!(
        err.contains("`inrun plugin new --sdk DIR` (or INRUN_SDK_DIR=DIR)"),
        "{err}"
    );
    // C and Go carry their SDK: no warning.
    for lang in ["c", "go"] {
        let out = inrun(work.path(), &cache)
            .args(["plugin", "new", "--lang", lang, &format!("bare-{lang}")])
            .output()
            .expect("run inrun");
        assert!(out.status.success() && out.stderr.is_empty(), "{lang}");
    }
    // The variable works as the flag does.
    let out = inrun(work.path(), &cache)
        .args(["plugin", "new", "--lang", "js", "from-env"])
        .env("INRUN_SDK_DIR", dist_sdk())
        .output()
        .expect("run inrun");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && err.is_empty(), "{err}");
    assert!(
        work.path()
            .join(format!(
                "from-env/.sdk/inrun-sdk-{}.tgz",
                env!("CARGO_PKG_VERSION")
            ))
            .is_file()
    );
    // A directory without the packages: one line naming what is missing; nothing made.
    let out = inrun(work.path(), &cache)
        .args([
            "plugin", "new", "--lang", "rust", "--sdk", "nowhere", "none",
        ])
        .output()
        .expect("run inrun");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains(&format!(
            "nowhere: no crates/inrun-sdk-{}; --sdk names the directory `make sdk` writes",
            env!("CARGO_PKG_VERSION")
        )),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(!work.path().join("none").exists());
}
