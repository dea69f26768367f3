//! The files of a new plugin project, per language.

use super::Lang;

/// What the templates fill in.
pub struct Vars {
    /// The plugin's name (`hello-world`).
    pub name: String,
    /// The CR kind (`HelloWorld`).
    pub kind: String,
    /// The name as a Rust crate / file stem (`hello_world`).
    pub crate_name: String,
    /// The checkout with `sdk/`, `wit/` and `plugins/`.
    pub root: String,
}

fn fill(text: &str, v: &Vars) -> String {
    text.replace("@NAME@", &v.name)
        .replace("@KIND@", &v.kind)
        .replace("@CRATE@", &v.crate_name)
        .replace("@ROOT@", &v.root)
}

const BLUEPRINT: &str = r#"# A Blueprint with one CRD reconciled by this plugin.
apiVersion: inrun.dev/v1alpha1
kind: Blueprint
metadata:
  name: @NAME@
spec:
  crds:
    - group: example.inrun.dev
      version: v1alpha1
      kind: @KIND@
      reconcile:
        default: false
        constructor:
          location: @NAME@.wasm
        managedResources:
          - { apiVersion: v1, kind: ConfigMap }
"#;

const CR: &str = r#"apiVersion: example.inrun.dev/v1alpha1
kind: @KIND@
metadata:
  name: sample
  namespace: default
spec:
  message: hello from @NAME@
"#;

const README: &str = r#"# @NAME@

An Inrun reconciler: a `@KIND@` CR becomes a ConfigMap holding `spec.message`, and the
message is copied to the CR's status.

```sh
./build.sh                                            # builds @NAME@.wasm
inrun render --blueprint blueprint.yaml --object cr.yaml
```

Edit the reconcile function, rebuild, render again. `blueprint.yaml` is ready for
`inrun run --install-crds` too.
"#;

const RUST_CARGO: &str = r#"[package]
name = "@NAME@"
version = "0.1.0"
edition = "2024"
rust-version = "1.95"
publish = false

[lib]
crate-type = ["cdylib", "rlib"]

[dependencies]
inrun-sdk = { path = "@ROOT@/sdk/rust" }

[profile.release]
opt-level = "s"
lto = true
codegen-units = 1
strip = true
panic = "abort"

# A project of its own, not part of any enclosing workspace.
[workspace]
"#;

const RUST_LIB: &str = r#"//! The @KIND@ reconciler: a ConfigMap with `spec.message`, and the message in status.

use inrun_sdk::{Outcome, Request, json};

/// What the CR should become.
///
/// # Errors
/// When `spec.message` is not a string.
pub fn reconcile(req: &Request) -> Result<Outcome, String> {
    if req.finalizing {
        return Ok(Outcome::new());
    }
    let message = match req.spec().get("message") {
        None => "hello".to_string(),
        Some(m) => m.as_str().ok_or("spec.message must be a string")?.to_string(),
    };
    Ok(Outcome::new()
        .resource(json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": req.name(), "namespace": req.namespace()},
            "data": {"message": message},
        }))
        .status("message", message))
}

#[cfg(target_arch = "wasm32")]
mod component {
    struct Plugin;

    impl inrun_sdk::Reconciler for Plugin {
        fn reconcile(req: inrun_sdk::Request) -> Result<inrun_sdk::Outcome, String> {
            super::reconcile(&req)
        }
    }

    inrun_sdk::export_reconciler!(Plugin);
}
"#;

const RUST_BUILD: &str = r#"#!/usr/bin/env bash
# Builds @NAME@.wasm (Rust, wasm32-wasip2).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
rustup target list --installed 2>/dev/null | grep -q wasm32-wasip2 || rustup target add wasm32-wasip2
cargo build --release --target wasm32-wasip2 -q </dev/null
cp target/wasm32-wasip2/release/@CRATE@.wasm @NAME@.wasm
echo "built @NAME@.wasm"
"#;

const PYTHON_APP: &str = r#""""The @KIND@ reconciler: a ConfigMap with ``spec.message``, and the message in status."""

from inrun_sdk import Err, Outcome, Request, export_reconciler


def reconcile(req: Request) -> Outcome:
    if req.finalizing:
        return Outcome()
    spec = req.spec or {}
    message = spec.get("message", "hello")
    if not isinstance(message, str):
        raise Err("spec.message must be a string")
    return (
        Outcome()
        .resource({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": req.name, "namespace": req.namespace},
            "data": {"message": message},
        })
        .status("message", message)
    )


WitWorld = export_reconciler(reconcile)
"#;

const PYTHON_BUILD: &str = r#"#!/usr/bin/env bash
# Builds @NAME@.wasm with componentize-py (installed by @ROOT@/plugins/python/build.sh).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="@ROOT@"
"$root/plugins/python/build.sh" >/dev/null   # installs the pinned toolchain if missing
cache="${INRUN_PYTHON_GUEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/inrun/python-guest}"
tool="$(ls -d "$cache"/componentize-py-*/bin/componentize-py | sort | tail -n 1)"
cd "$here"
env -u VIRTUAL_ENV "$tool" -q -d "$root/wit" -w reconciler componentize app \
  -p "$here" -p "$root/sdk/python" -o "@NAME@.wasm" </dev/null
echo "built @NAME@.wasm"
"#;

const JS_APP: &str = r#"// The @KIND@ reconciler: a ConfigMap with `spec.message`, and the message in status.
import { reconciler, Outcome, InrunError } from './inrun-sdk.js';

export const reconcile = reconciler((req) => {
  if (req.finalizing) return new Outcome();
  const spec = req.spec ?? {};
  const message = spec.message ?? 'hello';
  if (typeof message !== 'string') throw new InrunError('spec.message must be a string');
  return new Outcome()
    .resource({
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: { name: req.name, namespace: req.namespace },
      data: { message },
    })
    .status('message', message);
});
"#;

const JS_BUILD: &str = r#"#!/usr/bin/env bash
# Builds @NAME@.wasm with componentize-js (installed by @ROOT@/plugins/js/build.sh).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="@ROOT@"
"$root/plugins/js/build.sh" >/dev/null   # installs the pinned toolchain if missing
digest="$(cat "$root/plugins/js/package.json" "$root/plugins/js/package-lock.json" | sha256sum | cut -c1-16)"
toolchain="${INRUN_JS_TOOLCHAIN:-${XDG_CACHE_HOME:-$HOME/.cache}/inrun/js-guest/$digest}"
cp "$root/sdk/js/inrun-sdk.js" "$here/inrun-sdk.js"
cd "$here"
node "$toolchain/node_modules/@bytecodealliance/componentize-js/src/cli.js" app.js \
  --wit "$root/wit" --world-name reconciler --disable http fetch-event --out "@NAME@.wasm" </dev/null
echo "built @NAME@.wasm"
"#;

const C_APP: &str = r#"/* The @KIND@ reconciler: a ConfigMap with spec.message, and the message in status. */
#include "inrun.h"

const char *inrun_reconcile(const inrun_request *req, inrun_outcome *out) {
    if (req->finalizing) return NULL;
    const char *message = "hello";
    inrun_json *m = inrun_json_get(inrun_request_spec(req), "message");
    if (!inrun_json_is_null(m)) {
        if (!inrun_json_is_string(m)) return "spec.message must be a string";
        message = inrun_json_as_string(m);
    }
    inrun_json *meta = inrun_json_object();
    inrun_json_set_string(meta, "name", inrun_request_name(req));
    const char *ns = inrun_request_namespace(req);
    if (ns) inrun_json_set_string(meta, "namespace", ns);
    inrun_json *data = inrun_json_object();
    inrun_json_set_string(data, "message", message);
    inrun_json *cm = inrun_json_object();
    inrun_json_set_string(cm, "apiVersion", "v1");
    inrun_json_set_string(cm, "kind", "ConfigMap");
    inrun_json_set(cm, "metadata", meta);
    inrun_json_set(cm, "data", data);
    inrun_outcome_resource(out, cm);
    inrun_outcome_status_string(out, "message", message);
    return NULL;
}
"#;

const C_BUILD: &str = r#"#!/usr/bin/env bash
# Builds @NAME@.wasm with clang, wit-bindgen c and wasm-tools (installed by
# @ROOT@/plugins/c/build.sh).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="@ROOT@"
"$root/plugins/c/build.sh" >/dev/null   # installs the pinned toolchain if missing
tools="${INRUN_C_TOOLS:-$HOME/.cache/inrun/c-guest}"
sdk="$root/sdk/c"
gen="$here/.build/gen"
rm -rf "$gen" && mkdir -p "$gen"
"$tools/bin/wit-bindgen" c "$root/wit" --world reconciler --out-dir "$gen" >/dev/null
clang --target=wasm32-wasi -Os -Wall -Wextra -Werror -std=c11 -mexec-model=reactor \
  -ffunction-sections -fdata-sections -DINRUN_WORLD_RECONCILER -I"$sdk" -I"$gen" \
  "$here/app.c" "$sdk/inrun.c" "$sdk/inrun_json.c" "$gen/reconciler.c" \
  "$gen/reconciler_component_type.o" -Wl,--gc-sections -Wl,--strip-all \
  -Wl,-z,stack-size=1048576 -o "$here/.build/core.wasm"
"$tools/bin/wasm-tools" component new "$here/.build/core.wasm" -o "$here/@NAME@.wasm"
echo "built @NAME@.wasm"
"#;

/// The project's files: (path, text, executable).
pub fn files(lang: Lang, v: &Vars) -> Vec<(&'static str, String, bool)> {
    let mut out = vec![
        ("blueprint.yaml", fill(BLUEPRINT, v), false),
        ("cr.yaml", fill(CR, v), false),
        ("README.md", fill(README, v), false),
    ];
    match lang {
        Lang::Rust => {
            out.push(("Cargo.toml", fill(RUST_CARGO, v), false));
            out.push(("src/lib.rs", fill(RUST_LIB, v), false));
            out.push(("build.sh", fill(RUST_BUILD, v), true));
        }
        Lang::Python => {
            out.push(("app.py", fill(PYTHON_APP, v), false));
            out.push(("build.sh", fill(PYTHON_BUILD, v), true));
        }
        Lang::Js => {
            out.push(("app.js", fill(JS_APP, v), false));
            out.push(("build.sh", fill(JS_BUILD, v), true));
        }
        Lang::C => {
            out.push(("app.c", fill(C_APP, v), false));
            out.push(("build.sh", fill(C_BUILD, v), true));
        }
    }
    out
}
