#!/usr/bin/env bash
# Builds @NAME@.wasm from the Go module here with the Go SDK in inrun-sdk/ and the WIT in
# wit/ (both written by `inrun plugin new`). inrun-sdk/component.sh first installs what is
# missing, pinned (inrun-sdk/toolchain.sh): wit-bindgen-cli and wasm-tools (cargo install,
# a few minutes once) into ${INRUN_C_TOOLS:-~/.cache/inrun/c-guest}, the Go runtime package
# and the WASI adapter (two crates.io packages) into ${INRUN_GO_CACHE:-~/.cache/inrun/go-guest},
# and, when the go command is older than Go 1.25, a newer Go through the Go module proxy.
# World reconciler of the 0.1.0 contract; for hooks say `hooks`, and for conditions and
# events (or the package world) build against wit/0.2.0.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
"$here/inrun-sdk/component.sh" reconciler "$here/wit" "$here" "$here/@NAME@.wasm"
echo "built @NAME@.wasm"
