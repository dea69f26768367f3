//! TypeScript guests (`plugins/js/*-ts`, compiled by tsc, then built by componentize-js like
//! any JavaScript guest; `plugins/js/build.sh`): the TypeScript WebApp constructor renders
//! the same bytes as the Rust one for the same CRs, its errors included; and the SDK's
//! declarations (`sdk/js/*.d.ts`) describe what its JavaScript does: a TypeScript file
//! that uses every export compiles under `strict` and its tests pass against the modules.
//!
//! A TypeScript component is a JavaScript one (~12 MB, seconds to compile in a debug
//! build), so the renders share one compile cache under `CARGO_TARGET_TMPDIR`.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};
use support::plugin;

const RUST_WEBAPP: &str = "inrun_plugin_webapp";
const TS_WEBAPP: &str = "inrun_plugin_webapp_ts";

fn repo() -> PathBuf {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    here.canonicalize().unwrap_or(here)
}

/// One compile cache for every render in this test binary, kept between runs (keyed by
/// digest, so a rebuilt component compiles again).
fn cache_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("lang_ts-wasm-cache");
    std::fs::create_dir_all(&dir).expect("cache dir");
    dir
}

// ------------------------------------------------------------------ inrun render

/// `inrun render -o json` of `cr` through a Blueprint whose WebApp constructor is the
/// plugin `name`: the JSON, or the guest's own message of a failure (after the plugin's
/// name and digest).
fn render(dir: &Path, name: &str, cr: &str) -> Result<Value, String> {
    let bp = dir.join(format!("{name}.yaml"));
    let object = dir.join("cr.yaml");
    std::fs::write(&bp, constructor_blueprint(&plugin(name))).expect("blueprint");
    std::fs::write(&object, cr).expect("cr");
    let out = Command::new(env!("CARGO_BIN_EXE_inrun"))
        .args(["render", "-o", "json", "-b"])
        .arg(&bp)
        .arg("-f")
        .arg(&object)
        .env("INRUN_CACHE_DIR", cache_dir())
        .env_remove("INRUN_LOG")
        .output()
        .expect("run inrun");
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.success() {
        Ok(serde_json::from_slice(&out.stdout).expect("render prints JSON"))
    } else {
        assert!(
            stderr.contains(name) && stderr.trim().lines().count() == 1,
            "one clear line naming the plugin: {stderr}"
        );
        Err(stderr
            .split_once(" returned an error: ")
            .map_or(stderr.trim(), |(_, message)| message.trim())
            .to_owned())
    }
}

fn constructor_blueprint(location: &str) -> String {
    format!(
        r#"apiVersion: inrun.dev/v1alpha1
kind: Blueprint
metadata: {{name: lang-ts}}
spec:
  crds:
    - group: demo.inrun.dev
      version: v1alpha1
      kind: WebApp
      reconcile:
        default: false
        constructor: {{location: "{location}", limits: {{deadline: 10s, memory: 64Mi}}}}
        managedResources:
          - {{apiVersion: apps/v1, kind: Deployment}}
          - {{apiVersion: v1, kind: Service}}
"#
    )
}

/// The WebApp CRs both languages render: the first four succeed, the rest fail with the
/// Rust plugin's messages (serde's, for a field of the wrong type).
const WEBAPPS: &[&str] = &[
    "metadata: {name: shop, namespace: prod}\nspec: {image: 'nginx:1.27'}",
    "metadata: {name: shop, namespace: default, labels: {team: payments}}\nspec: {image: 'nginx:1.27', replicas: 3, port: 9000}",
    "metadata: {name: api, namespace: team-a}\nspec:\n  image: \"registry.example.com/acme/api:2 \\\"quoted\\\" \\u00e9\\u2603\"\n  replicas: 0\n  port: 65535\n  env: {ZED: last, A: '1', B: \"line\\nbreak\", EMPTY: '', mid: 'x y'}\n  extra: ignored",
    "metadata: {name: empty-env, namespace: default}\nspec: {image: x, env: {}}",
    "metadata: {name: e1, namespace: default}\nspec: {replicas: 2}",
    "metadata: {name: e2, namespace: default}\nspec: {image: ''}",
    "metadata: {name: e3, namespace: default}",
    "metadata: {name: e4, namespace: default}\nspec: {image: x, replicas: many}",
    "metadata: {name: e5, namespace: default}\nspec: {image: x, port: 70000}",
    "metadata: {name: e6, namespace: default}\nspec: {image: x, replicas: -1}",
    "metadata: {name: e7, namespace: default}\nspec: {image: x, replicas: 2.5}",
    "metadata: {name: e8, namespace: default}\nspec: {image: x, env: {A: 1}}",
    "metadata: {name: e9, namespace: default}\nspec: {image: 5}",
    "metadata: {name: e10, namespace: default}\nspec: {image: x, env: null}",
    "metadata: {name: e11, namespace: default}\nspec: just-a-string",
];

/// `cr` rendered through the Rust and the TypeScript WebApp.
fn render_both(cr: &str) -> (Result<Value, String>, Result<Value, String>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let cr = format!("apiVersion: demo.inrun.dev/v1alpha1\nkind: WebApp\n{cr}\n");
    (
        render(dir.path(), RUST_WEBAPP, &cr),
        render(dir.path(), TS_WEBAPP, &cr),
    )
}

#[test]
fn the_ts_webapp_renders_exactly_what_the_rust_webapp_renders() {
    let mut rendered = 0;
    for cr in WEBAPPS {
        let (rust, ts) = render_both(cr);
        assert_eq!(ts, rust, "for {cr}");
        rendered += usize::from(rust.is_ok());
    }
    assert_eq!(rendered, 4, "the first four CRs render, the rest fail");

    // And the output is the WebApp answer, not two equal mistakes.
    let (_, ts) = render_both(WEBAPPS[2]);
    let ts = ts.expect("renders");
    assert_eq!(ts["reconciler"], "constructor");
    assert_eq!(ts["resources"][0]["kind"], "Deployment");
    assert_eq!(ts["resources"][0]["spec"]["replicas"], 0);
    assert_eq!(
        ts["resources"][0]["spec"]["template"]["spec"]["containers"][0]["env"],
        json!([
            {"name": "A", "value": "1"},
            {"name": "B", "value": "line\nbreak"},
            {"name": "EMPTY", "value": ""},
            {"name": "ZED", "value": "last"},
            {"name": "mid", "value": "x y"},
        ])
    );
    assert_eq!(ts["resources"][1]["spec"]["ports"][0]["targetPort"], 65535);
    assert_eq!(ts["status"]["url"], "http://api.team-a.svc:80");
    assert_eq!(ts["labels"]["demo.inrun.dev/tier"], "web");
    let (_, ts) = render_both(WEBAPPS[4]);
    assert_eq!(ts.unwrap_err(), "spec.image is required");
    let (_, ts) = render_both(WEBAPPS[8]);
    assert_eq!(
        ts.unwrap_err(),
        "spec: invalid value: integer `70000`, expected u16"
    );
}

// ------------------------------------------------------------------ the SDK's types

/// Runs `cmd`, failing the test with its output when it fails; its standard output.
fn run(cmd: &mut Command, what: &str) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Copies the files of `from` (not its subdirectories) whose names end in `suffix` to `to`.
fn copy_files(from: &Path, to: &Path, suffix: &str) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("list").flatten() {
        let name = entry.file_name();
        if entry.path().is_file() && name.to_string_lossy().ends_with(suffix) {
            std::fs::copy(entry.path(), to.join(&name)).expect("copy");
        }
    }
}

/// sdk/js/test/types.test.ts, compiled by the pinned tsc (plugins/js/toolchain.sh) under
/// sdk/js/test/tsconfig.json into a copy of sdk/js/, then run there under Node.js: the
/// declarations accept every use the test makes (and refuse the `@ts-expect-error` ones),
/// and what they declare is what the JavaScript does.
#[test]
fn the_sdk_declarations_describe_what_the_javascript_does() {
    let toolchain = run(
        &mut Command::new(repo().join("plugins/js/toolchain.sh")),
        "plugins/js/toolchain.sh",
    );
    let modules = PathBuf::from(toolchain.trim()).join("node_modules");
    let work = tempfile::tempdir().expect("tempdir");
    let sdk = work.path().join("sdk");
    run(
        Command::new("node")
            .arg(modules.join("typescript/bin/tsc"))
            .args(["-p", "sdk/js/test/tsconfig.json", "--outDir"])
            .arg(&sdk)
            .arg("--typeRoots")
            .arg(modules.join("@types"))
            .current_dir(repo()),
        "tsc -p sdk/js/test/tsconfig.json",
    );
    copy_files(&repo().join("sdk/js"), &sdk, ".js");
    copy_files(&repo().join("sdk/js/testing"), &sdk.join("testing"), ".mjs");
    let out = run(
        Command::new("node")
            .args(["--import", "./testing/register.mjs", "--test", "test/"])
            .current_dir(&sdk)
            .env("INRUN_TEST_QUIET", "1"),
        "node --test (types.test.js)",
    );
    assert!(out.contains("\n# fail 0\n"), "{out}");
    let passed: usize = out
        .lines()
        .find_map(|l| l.strip_prefix("# pass "))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(passed >= 8, "{out}");
}

/// A declaration that no longer matches the JavaScript fails the compile: here `Outcome`'s
/// `requeueAfterMs` in the WIT record declared as a number, which componentize-js needs as
/// a BigInt (a `u64`).
#[test]
fn a_declaration_that_drifts_fails_the_compile() {
    let toolchain = run(
        &mut Command::new(repo().join("plugins/js/toolchain.sh")),
        "plugins/js/toolchain.sh",
    );
    let modules = PathBuf::from(toolchain.trim()).join("node_modules");
    let work = tempfile::tempdir().expect("tempdir");
    let sdk = work.path().join("js");
    copy_files(&repo().join("sdk/js"), &sdk, ".ts");
    copy_files(&repo().join("sdk/js/testing"), &sdk.join("testing"), ".mts");
    copy_files(&repo().join("sdk/js/test"), &sdk.join("test"), "");
    let declarations = sdk.join("inrun-sdk.d.ts");
    let text = std::fs::read_to_string(&declarations).expect("read");
    let drifted = text.replace(
        "  requeueAfterMs: bigint | undefined;",
        "  requeueAfterMs: number | undefined;",
    );
    assert_ne!(drifted, text, "the declaration moved");
    std::fs::write(&declarations, drifted).expect("write");
    let out = Command::new("node")
        .arg(modules.join("typescript/bin/tsc"))
        .args(["-p", "test/tsconfig.json", "--noEmit", "--typeRoots"])
        .arg(modules.join("@types"))
        .current_dir(&sdk)
        .output()
        .expect("run tsc");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "tsc accepted the drift:\n{stdout}");
    assert!(
        stdout.contains("error TS2322: Type 'bigint' is not assignable to type 'number'."),
        "{stdout}"
    );
}
