//! The files of a new plugin project, per language, compiled into the binary (with the WIT
//! and the C and Go SDKs), so a project depends on nothing of the checkout `inrun` was built
//! from.

use super::{Lang, SDK_DIR, SDK_VERSION};

/// componentize-py, pinned in a Python project's requirements.txt (as plugins/python does).
pub const COMPONENTIZE_PY: &str = "0.25.1";
/// componentize-js and the preview2 shim it needs, pinned in a JavaScript project's
/// package.json (as plugins/js/package.json does).
pub const COMPONENTIZE_JS: &str = "0.23.0";
const PREVIEW2_SHIM: &str = "0.25.0";
/// The TypeScript compiler and Node.js's types, pinned in a TypeScript project's
/// package.json (as plugins/js/package.json does).
pub const TYPESCRIPT: &str = "7.0.2";
const TYPES_NODE: &str = "20.19.43";
/// The C toolchain's cargo-installed tools (as plugins/c/build.sh pins them).
const WIT_BINDGEN: &str = "0.63.0";
const WASM_TOOLS: &str = "1.263.0";

/// What the templates fill in.
pub struct Vars {
    /// The plugin's name (`hello-world`).
    pub name: String,
    /// The CR kind (`HelloWorld`).
    pub kind: String,
    /// The name as a Rust crate / file stem (`hello_world`).
    pub crate_name: String,
    /// The SDK packages are in the project's `.sdk/` (`--sdk`), to be taken from there only.
    pub local_sdk: bool,
}

/// `0.1.0` → `0.1`: the SDK versions a project accepts.
fn minor(version: &str) -> String {
    version
        .rsplit_once('.')
        .map_or(version, |(m, _)| m)
        .to_string()
}

/// The JavaScript (or TypeScript) project's `inrun-sdk` dependency: the tarball in `.sdk/`, or the
/// published-style range.
fn npm_sdk(v: &Vars) -> String {
    if v.local_sdk {
        format!("file:{SDK_DIR}/inrun-sdk-{SDK_VERSION}.tgz")
    } else {
        format!("^{SDK_VERSION}")
    }
}

/// The Python project's requirements.txt head and SDK line: with `.sdk/`, build.sh
/// installs the SDK from there and the file names only what comes from the index.
fn python_requirements(v: &Vars) -> String {
    if v.local_sdk {
        format!(
            "# What build.sh installs into .venv from the package index: the pinned compiler.\n# The SDK (its WIT included) comes from {SDK_DIR}/ only (see build.sh).\n"
        )
    } else {
        format!(
            "# What build.sh installs into .venv: the SDK (its WIT included) and the pinned compiler.\ninrun-sdk=={}.*\n",
            minor(SDK_VERSION)
        )
    }
}

/// The Python build's step that installs the SDK from `.sdk/` and no index.
fn python_sdk_install(v: &Vars) -> String {
    if v.local_sdk {
        format!(
            "  # inrun-sdk from {SDK_DIR}/ and nowhere else: it is not on a public registry yet.\n  \"$venv/bin/pip\" install --quiet --disable-pip-version-check --no-index --find-links {SDK_DIR} \"inrun-sdk=={SDK_VERSION}\" </dev/null\n"
        )
    } else {
        String::new()
    }
}

fn fill(text: &str, v: &Vars) -> String {
    text.replace("@PY_REQUIREMENTS@\n", &python_requirements(v))
        .replace("@PY_SDK_INSTALL@\n", &python_sdk_install(v))
        .replace("@SDK_NPM@", &npm_sdk(v))
        .replace("@NAME@", &v.name)
        .replace("@KIND@", &v.kind)
        .replace("@PLURAL@", &format!("{}s", v.kind.to_lowercase()))
        .replace("@CRATE@", &v.crate_name)
        .replace("@SDK_VERSION@", SDK_VERSION)
        .replace("@SDK_MINOR@", &minor(SDK_VERSION))
        .replace("@COMPONENTIZE_PY@", COMPONENTIZE_PY)
        .replace("@COMPONENTIZE_JS@", COMPONENTIZE_JS)
        .replace("@PREVIEW2_SHIM@", PREVIEW2_SHIM)
        .replace("@TYPESCRIPT@", TYPESCRIPT)
        .replace("@TYPES_NODE@", TYPES_NODE)
        .replace("@WIT_BINDGEN@", WIT_BINDGEN)
        .replace("@WASM_TOOLS@", WASM_TOOLS)
}

const BLUEPRINT: &str = include_str!("files/common/blueprint.yaml");
const CR: &str = include_str!("files/common/cr.yaml");
const EXPECTED: &str = include_str!("files/common/expected.yaml");
const GITIGNORE: &str = include_str!("files/common/gitignore");
const README: &str = include_str!("files/common/README.md");

const RUST_CARGO: &str = include_str!("files/rust/Cargo.toml");
const RUST_LIB: &str = include_str!("files/rust/lib.rs");
const RUST_BUILD: &str = include_str!("files/rust/build.sh");
const RUST_CARGO_CONFIG: &str = include_str!("files/rust/cargo-config.toml");

const PYTHON_APP: &str = include_str!("files/python/app.py");
const PYTHON_TEST: &str = include_str!("files/python/test_app.py");
const PYTHON_REQUIREMENTS: &str = include_str!("files/python/requirements.txt");
const PYTHON_BUILD: &str = include_str!("files/python/build.sh");

const JS_APP: &str = include_str!("files/js/app.js");
const JS_TEST: &str = include_str!("files/js/app.test.mjs");
const JS_PACKAGE: &str = include_str!("files/js/package.json");
const JS_BUILD: &str = include_str!("files/js/build.sh");

const TS_APP: &str = include_str!("files/ts/app.ts");
const TS_TEST: &str = include_str!("files/ts/app.test.ts");
const TS_CONFIG: &str = include_str!("files/ts/tsconfig.json");
const TS_CONFIG_TEST: &str = include_str!("files/ts/tsconfig.test.json");
const TS_PACKAGE: &str = include_str!("files/ts/package.json");
const TS_BUILD: &str = include_str!("files/ts/build.sh");

const C_APP: &str = include_str!("files/c/app.c");
const C_BUILD: &str = include_str!("files/c/build.sh");

const GO_APP: &str = include_str!("files/go/app.go");
const GO_TEST: &str = include_str!("files/go/app_test.go");
const GO_MOD: &str = include_str!("files/go/go.mod");
const GO_BUILD: &str = include_str!("files/go/build.sh");

/// The C SDK and the 0.1.0 WIT, copied into a C project (C has no package manager to
/// fetch them from).
const C_FILES: [(&str, &str); 5] = [
    ("inrun/inrun.h", include_str!("../../../sdk/c/inrun.h")),
    (
        "inrun/inrun_internal.h",
        include_str!("../../../sdk/c/inrun_internal.h"),
    ),
    ("inrun/inrun.c", include_str!("../../../sdk/c/inrun.c")),
    (
        "inrun/inrun_json.c",
        include_str!("../../../sdk/c/inrun_json.c"),
    ),
    (
        "wit/reconciler.wit",
        include_str!("../../../wit/reconciler.wit"),
    ),
];

/// The Go SDK (its non-test files, the scripts that install the toolchain and build a
/// component) and the WIT of both contracts, copied into a Go project: (path, text,
/// executable). `sdk/go`'s module is `inrun.dev/sdk`; the project's go.mod replaces it with
/// `inrun-sdk/`.
pub const GO_FILES: [(&str, &str, bool); 21] = [
    (
        "inrun-sdk/go.mod",
        include_str!("../../../sdk/go/go.mod"),
        false,
    ),
    (
        "inrun-sdk/README.md",
        include_str!("../../../sdk/go/README.md"),
        false,
    ),
    (
        "inrun-sdk/toolchain.sh",
        include_str!("../../../sdk/go/toolchain.sh"),
        true,
    ),
    (
        "inrun-sdk/component.sh",
        include_str!("../../../sdk/go/component.sh"),
        true,
    ),
    (
        "inrun-sdk/inrun/doc.go",
        include_str!("../../../sdk/go/inrun/doc.go"),
        false,
    ),
    (
        "inrun-sdk/inrun/json.go",
        include_str!("../../../sdk/go/inrun/json.go"),
        false,
    ),
    (
        "inrun-sdk/inrun/decode.go",
        include_str!("../../../sdk/go/inrun/decode.go"),
        false,
    ),
    (
        "inrun-sdk/inrun/request.go",
        include_str!("../../../sdk/go/inrun/request.go"),
        false,
    ),
    (
        "inrun-sdk/inrun/outcome.go",
        include_str!("../../../sdk/go/inrun/outcome.go"),
        false,
    ),
    (
        "inrun-sdk/inrun/host.go",
        include_str!("../../../sdk/go/inrun/host.go"),
        false,
    ),
    (
        "inrun-sdk/inrun/export.go",
        include_str!("../../../sdk/go/inrun/export.go"),
        false,
    ),
    (
        "inrun-sdk/infra/infra.go",
        include_str!("../../../sdk/go/infra/infra.go"),
        false,
    ),
    (
        "inrun-sdk/_glue/imports.go",
        include_str!("../../../sdk/go/_glue/imports.go"),
        false,
    ),
    (
        "inrun-sdk/_glue/request.go",
        include_str!("../../../sdk/go/_glue/request.go"),
        false,
    ),
    (
        "inrun-sdk/_glue/outcome-0.1.0.go",
        include_str!("../../../sdk/go/_glue/outcome-0.1.0.go"),
        false,
    ),
    (
        "inrun-sdk/_glue/outcome-0.2.0.go",
        include_str!("../../../sdk/go/_glue/outcome-0.2.0.go"),
        false,
    ),
    (
        "inrun-sdk/_glue/reconciler.go",
        include_str!("../../../sdk/go/_glue/reconciler.go"),
        false,
    ),
    (
        "inrun-sdk/_glue/hooks.go",
        include_str!("../../../sdk/go/_glue/hooks.go"),
        false,
    ),
    (
        "inrun-sdk/_glue/package.go",
        include_str!("../../../sdk/go/_glue/package.go"),
        false,
    ),
    (
        "wit/reconciler.wit",
        include_str!("../../../wit/reconciler.wit"),
        false,
    ),
    (
        "wit/0.2.0/reconciler.wit",
        include_str!("../../../wit/0.2.0/reconciler.wit"),
        false,
    ),
];

/// The rest of the 0.2.0 contract, beside [`GO_FILES`].
const GO_WIT_020: [(&str, &str); 2] = [
    (
        "wit/0.2.0/package.wit",
        include_str!("../../../wit/0.2.0/package.wit"),
    ),
    (
        "wit/0.2.0/deps/reconciler-0.1.0.wit",
        include_str!("../../../wit/0.2.0/deps/reconciler-0.1.0.wit"),
    ),
];

/// How each language's README says to run the unit tests, and what the project depends on.
fn readme(lang: Lang, v: &Vars) -> String {
    let (unit, deps) = match (lang, v.local_sdk) {
        (Lang::Rust, false) => (
            "cargo test                                            # unit tests, natively",
            "It depends on the `inrun-sdk` crate (which carries the WIT) and needs the\n`wasm32-wasip2` target, which build.sh adds with rustup.",
        ),
        (Lang::Rust, true) => (
            "cargo test                                            # unit tests, natively",
            "It depends on the `inrun-sdk` crate (which carries the WIT), which\n`.cargo/config.toml` takes from `.sdk/` (`[patch.crates-io]` for `inrun-sdk` and\n`inrun-contract`), and needs the `wasm32-wasip2` target, which build.sh adds with rustup.\nOnce the crates are published, delete `.cargo/config.toml` and `.sdk/`.",
        ),
        (Lang::Python, false) => (
            ".venv/bin/python -m unittest                          # unit tests, natively",
            "build.sh makes `.venv` and installs requirements.txt into it: the `inrun-sdk`\npackage (whose WIT the component is built against, `python -m inrun_wit`) and the\npinned componentize-py.",
        ),
        (Lang::Python, true) => (
            ".venv/bin/python -m unittest                          # unit tests, natively",
            "build.sh makes `.venv`, installs the `inrun-sdk` wheel into it from `.sdk/` with\n`pip install --no-index --find-links .sdk` (no index is asked for it; the component is\nbuilt against its WIT, `python -m inrun_wit`), then requirements.txt from the package\nindex: the pinned componentize-py.",
        ),
        (Lang::Js, false) => (
            "npm test                                              # unit tests, under Node.js",
            "build.sh runs `npm install`: the `inrun-sdk` package (which carries the WIT) and the\npinned componentize-js.",
        ),
        (Lang::Js, true) => (
            "npm test                                              # unit tests, under Node.js",
            "build.sh runs `npm install`: the `inrun-sdk` package from `.sdk/` (a `file:`\ndependency on its tarball; it carries the WIT) and the pinned componentize-js.",
        ),
        (Lang::Ts, false) => (
            "npm test                                              # unit tests, compiled by tsc, under Node.js",
            "build.sh runs `npm install`: the `inrun-sdk` package (which carries the WIT and the\nSDK's TypeScript declarations), the pinned typescript and componentize-js. tsc checks\n`src/` under `strict` (a type error stops the build) and writes `dist/`.",
        ),
        (Lang::Ts, true) => (
            "npm test                                              # unit tests, compiled by tsc, under Node.js",
            "build.sh runs `npm install`: the `inrun-sdk` package from `.sdk/` (a `file:`\ndependency on its tarball; it carries the WIT and the SDK's TypeScript declarations),\nthe pinned typescript and componentize-js. tsc checks `src/` under `strict` (a type\nerror stops the build) and writes `dist/`.",
        ),
        (Lang::C, _) => (
            "",
            "`inrun/` holds the C SDK and `wit/` the contract, copied by `inrun plugin new`;\nbuild.sh installs clang, wasi-libc, wit-bindgen and wasm-tools when missing.",
        ),
        (Lang::Go, _) => (
            "go test ./...                                         # unit tests, natively",
            "`inrun-sdk/` holds the Go SDK (the module `inrun.dev/sdk`, which go.mod replaces with\nthat directory; its README documents it) and `wit/` the contract, copied by `inrun plugin\nnew`; the project needs no other Go module. build.sh needs the go command (Go 1.21 or\nnewer; 1.25 or newer needs no download) and cargo, and installs wit-bindgen and\nwasm-tools when missing.",
        ),
    };
    let note = match (lang, v.local_sdk) {
        (Lang::C | Lang::Go, _) => String::new(),
        (_, true) => "The `inrun-sdk` packages are not published on public registries yet, so this project\ntakes them from `.sdk/` and nowhere else: `inrun plugin new --sdk` copied them there\nfrom the packages `make sdk` built. Keep `.sdk/` with the project (commit it).\n\n".to_string(),
        (_, false) => format!(
            "> {}\n\n",
            wrap(&format!("**Warning**: {}", super::UNPUBLISHED), "> ")
        ),
    };
    let text = README
        .replace("@DEPENDENCIES@", deps)
        .replace("@SDK_NOTE@\n\n", &note);
    let text = if unit.is_empty() {
        text.replace("@UNIT_TEST@\n", "")
    } else {
        text.replace("@UNIT_TEST@", unit)
    };
    fill(&text, v)
}

/// `text` as lines of at most 88 characters (words kept whole) that each start with
/// `prefix`, the first one's prefix left to the caller.
fn wrap(text: &str, prefix: &str) -> String {
    let mut out = String::new();
    let mut line = prefix.len();
    for word in text.split(' ') {
        if line > prefix.len() && line + 1 + word.len() > 88 {
            out.push('\n');
            out.push_str(prefix);
            line = prefix.len();
        } else if line > prefix.len() {
            out.push(' ');
            line += 1;
        }
        out.push_str(word);
        line += word.len();
    }
    out
}

/// The project's files: (path, text, executable).
pub fn files(lang: Lang, v: &Vars) -> Vec<(&'static str, String, bool)> {
    let mut out = vec![
        ("blueprint.yaml", fill(BLUEPRINT, v), false),
        ("cr.yaml", fill(CR, v), false),
        ("tests/sample/cr.yaml", fill(CR, v), false),
        ("tests/sample/expected.yaml", fill(EXPECTED, v), false),
        (".gitignore", fill(GITIGNORE, v), false),
        ("README.md", readme(lang, v), false),
    ];
    match lang {
        Lang::Rust => {
            out.push(("Cargo.toml", fill(RUST_CARGO, v), false));
            if v.local_sdk {
                out.push((".cargo/config.toml", fill(RUST_CARGO_CONFIG, v), false));
            }
            out.push(("src/lib.rs", fill(RUST_LIB, v), false));
            out.push(("build.sh", fill(RUST_BUILD, v), true));
        }
        Lang::Python => {
            out.push(("app.py", fill(PYTHON_APP, v), false));
            out.push(("test_app.py", fill(PYTHON_TEST, v), false));
            out.push(("requirements.txt", fill(PYTHON_REQUIREMENTS, v), false));
            out.push(("build.sh", fill(PYTHON_BUILD, v), true));
        }
        Lang::Js => {
            out.push(("app.js", fill(JS_APP, v), false));
            out.push(("app.test.mjs", fill(JS_TEST, v), false));
            out.push(("package.json", fill(JS_PACKAGE, v), false));
            out.push(("build.sh", fill(JS_BUILD, v), true));
        }
        Lang::Ts => {
            out.push(("src/app.ts", fill(TS_APP, v), false));
            out.push(("src/app.test.ts", fill(TS_TEST, v), false));
            out.push(("tsconfig.json", fill(TS_CONFIG, v), false));
            out.push(("tsconfig.test.json", fill(TS_CONFIG_TEST, v), false));
            out.push(("package.json", fill(TS_PACKAGE, v), false));
            out.push(("build.sh", fill(TS_BUILD, v), true));
        }
        Lang::C => {
            out.push(("app.c", fill(C_APP, v), false));
            out.push(("build.sh", fill(C_BUILD, v), true));
            for (path, text) in C_FILES {
                out.push((path, text.to_string(), false));
            }
        }
        Lang::Go => {
            out.push(("go.mod", fill(GO_MOD, v), false));
            out.push(("app.go", fill(GO_APP, v), false));
            out.push(("app_test.go", fill(GO_TEST, v), false));
            out.push(("build.sh", fill(GO_BUILD, v), true));
            for (path, text, executable) in GO_FILES {
                out.push((path, text.to_string(), executable));
            }
            for (path, text) in GO_WIT_020 {
                out.push((path, text.to_string(), false));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every file of sdk/go but its tests and its generated or build outputs is copied
    /// into a Go project: a file added to the SDK cannot be forgotten here.
    #[test]
    fn a_go_project_gets_every_file_of_the_go_sdk() {
        let sdk = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../sdk/go");
        let mut pending = vec![sdk.clone()];
        let mut files = Vec::new();
        while let Some(dir) = pending.pop() {
            for entry in std::fs::read_dir(&dir).expect("read sdk/go").flatten() {
                let path = entry.path();
                if path.is_dir() {
                    pending.push(path);
                } else if !path.to_string_lossy().ends_with("_test.go") {
                    let relative = path.strip_prefix(&sdk).expect("under sdk/go");
                    files.push(format!("inrun-sdk/{}", relative.display()));
                }
            }
        }
        files.sort();
        let mut copied: Vec<String> = GO_FILES
            .iter()
            .filter(|(path, _, _)| path.starts_with("inrun-sdk/"))
            .map(|(path, _, _)| (*path).to_string())
            .collect();
        copied.sort();
        assert_eq!(copied, files);
    }

    #[test]
    fn the_sdk_range_is_the_minor_version() {
        assert_eq!(minor("0.1.0"), "0.1");
        assert_eq!(minor("2"), "2");
    }
}
