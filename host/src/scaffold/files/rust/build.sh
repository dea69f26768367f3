#!/usr/bin/env bash
# Builds @NAME@.wasm (Rust, wasm32-wasip2). `cargo test` runs the unit tests natively.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
rustup target list --installed 2>/dev/null | grep -q wasm32-wasip2 || rustup target add wasm32-wasip2
cargo build --release --target wasm32-wasip2 -q </dev/null
cp "${CARGO_TARGET_DIR:-target}/wasm32-wasip2/release/@CRATE@.wasm" @NAME@.wasm
echo "built @NAME@.wasm"
