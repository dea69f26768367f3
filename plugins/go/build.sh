#!/usr/bin/env bash
# Builds the Go example and test plugins as WebAssembly components (called by
# `make plugins`) with the standard Go toolchain, one plugin at a time through
# sdk/go/component.sh: `wit-bindgen go`, GOOS=wasip1 -buildmode=c-shared, then wasm-tools
# component embed + new with the WASI preview 1 reactor adapter. sdk/go/toolchain.sh
# installs what that needs first when missing, pinned, into caches outside the repo: Go
# 1.25 or newer (an older go command fetches the pinned one through the Go module proxy),
# wit-bindgen-cli (generators c and go, shared with the C build) and wasm-tools
# (~/.cache/inrun/c-guest), the Go runtime package the bindings import and the reactor
# adapter, both from crates.io packages (~/.cache/inrun/go-guest).
# Outputs, next to the Rust plugins:
#   plugins/target/wasm32-wasip2/release/inrun_plugin_webapp_go.wasm
#   plugins/target/wasm32-wasip2/release/inrun_plugin_hooks_go.wasm
#   plugins/target/wasm32-wasip2/release/inrun_test_spin_go.wasm
#   plugins/target/wasm32-wasip2/release/inrun_test_panic_go.wasm
#   plugins/target/wasm32-wasip2/release/inrun_test_reporter_go.wasm (contract 0.2.0)
#   plugins/target/wasm32-wasip2/release/inrun_test_infra_go.wasm (an infrastructure package)
# Nothing is rebuilt when every output is newer than every source. Needs no stdin.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="$root/plugins/target/wasm32-wasip2/release"
work="$root/plugins/target/go"
sdk="$root/sdk/go"
wit="$root/wit"

# name:world:source-dir[:contract] (contract 0.2.0: the worlds of wit/0.2.0, whose outcome
# carries conditions and events; default 0.1.0, wit/)
PLUGINS=(
  "inrun_plugin_webapp_go:reconciler:webapp"
  "inrun_plugin_hooks_go:hooks:hooks"
  "inrun_test_spin_go:reconciler:spin"
  "inrun_test_panic_go:reconciler:panic"
  "inrun_test_reporter_go:reconciler:reporter:0.2.0"
  "inrun_test_infra_go:package:infra:0.2.0"
)

log() { echo "plugins/go: $*" >&2; }

# --- Up to date? --------------------------------------------------------------------
shopt -s nullglob
sources=("$here/build.sh" "$sdk/go.mod" "$sdk"/*.sh "$sdk"/*/*.go "$sdk"/_glue/*.go "$wit"/*.wit "$wit"/0.2.0/*.wit)
for p in "${PLUGINS[@]}"; do
  IFS=: read -r _ _ dir _ <<<"$p"
  sources+=("$here/$dir"/*.go "$here/$dir/go.mod")
done
up_to_date=1
for p in "${PLUGINS[@]}"; do
  target="$out/${p%%:*}.wasm"
  if [[ ! -f "$target" ]]; then up_to_date=0; break; fi
  for s in "${sources[@]}"; do
    if [[ "$s" -nt "$target" ]]; then up_to_date=0; break 2; fi
  done
done
if [[ $up_to_date == 1 ]]; then
  exit 0
fi

# --- Build --------------------------------------------------------------------------
# sdk/go/component.sh installs the toolchain when missing (sdk/go/toolchain.sh) and builds
# one component.
mkdir -p "$out" "$work"
for p in "${PLUGINS[@]}"; do
  IFS=: read -r name world dir contract <<<"$p"
  wit_dir="$wit"
  [[ ${contract:-0.1.0} == 0.2.0 ]] && wit_dir="$wit/0.2.0"
  "$sdk/component.sh" "$world" "$wit_dir" "$here/$dir" "$out/$name.wasm" "$work/$name"
  log "built $name.wasm ($(stat -c %s "$out/$name.wasm") bytes)"
done
