#!/usr/bin/env bash
# Builds the Go example and test plugins as WebAssembly components (called by
# `make plugins`) with the standard Go toolchain: GOOS=wasip1 -buildmode=c-shared, then
# wasm-tools component embed + new with the WASI preview 1 reactor adapter. toolchain.sh
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
sources=("$here/build.sh" "$sdk/go.mod" "$sdk"/*/*.go "$sdk"/_glue/*.go "$wit"/*.wit "$wit"/0.2.0/*.wit)
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

# --- Toolchain ----------------------------------------------------------------------
toolchain="$("$here/toolchain.sh")"
eval "$toolchain"   # GO_PKG, GO_ADAPTER, WIT_BINDGEN, WASM_TOOLS (and GOTOOLCHAIN)
go_version="$(cd / && go env GOVERSION)"   # e.g. go1.26.8, for the workspace's go line

# --- Build --------------------------------------------------------------------------
# The glue files of each world (sdk/go/_glue): what the generated exports call.
glue_files() { # world contract
  case "$1" in
    reconciler) echo "imports.go request.go outcome-$2.go reconciler.go" ;;
    hooks) echo "imports.go request.go outcome-$2.go hooks.go" ;;
    package) echo "imports.go package.go" ;;
  esac
}

mkdir -p "$out" "$work"
for p in "${PLUGINS[@]}"; do
  IFS=: read -r name world dir contract <<<"$p"
  contract="${contract:-0.1.0}"
  wit_dir="$wit"
  [[ $contract == 0.2.0 ]] && wit_dir="$wit/0.2.0"
  # The package world exists only in the 0.2.0 contract (`%package`: a WIT keyword).
  spec="$world"
  [[ $world == package ]] && spec="%package"
  module="$(sed -n 's/^module[[:space:]]*//p' "$here/$dir/go.mod" | head -n1)"
  gen="$work/$name"
  rm -rf "$gen"
  if ! msg=$("$WIT_BINDGEN" go --include-versions -w "$spec" "$wit_dir" --out-dir "$gen" 2>&1); then
    echo "$msg" >&2
    exit 1
  fi
  mkdir -p "$gen/export_wit_world"
  for f in $(glue_files "$world" "$contract"); do
    cp "$sdk/_glue/$f" "$gen/export_wit_world/"
  done
  printf 'package main\n\nimport _ "%s"\n' "$module" >"$gen/plugin.go"
  # One workspace: the generated module (package main), the SDK, the plugin and the Go
  # runtime package, each from its directory: nothing is downloaded.
  printf 'go %s\n\nuse (\n\t.\n\t%s\n\t%s\n\t%s\n)\n' \
    "${go_version#go}" "$sdk" "$here/$dir" "$GO_PKG" >"$gen/go.work"
  (
    cd "$gen"
    GOWORK="$gen/go.work" GOOS=wasip1 GOARCH=wasm \
      go build -buildmode=c-shared -trimpath -ldflags='-checklinkname=0 -s -w' -o core.wasm .
  )
  "$WASM_TOOLS" component embed "$wit_dir" --world "$spec" "$gen/core.wasm" -o "$gen/embedded.wasm"
  "$WASM_TOOLS" component new "$gen/embedded.wasm" \
    --adapt "wasi_snapshot_preview1=$GO_ADAPTER" -o "$out/$name.wasm.tmp"
  "$WASM_TOOLS" validate "$out/$name.wasm.tmp"
  mv "$out/$name.wasm.tmp" "$out/$name.wasm"
  log "built $name.wasm ($(stat -c %s "$out/$name.wasm") bytes)"
done
