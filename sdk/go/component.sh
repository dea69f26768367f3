#!/usr/bin/env bash
# Builds one Inrun plugin written in Go into a WebAssembly component:
#
#   component.sh WORLD WIT_DIR PLUGIN_DIR OUT.wasm [WORK_DIR]
#
# WORLD       reconciler, hooks or package (package: the 0.2.0 contract only)
# WIT_DIR     the contract: a directory of inrun:reconciler@0.1.0 (wit/) or of 0.2.0
#             (wit/0.2.0, whose outcome carries conditions and events)
# PLUGIN_DIR  a Go module whose root package exports the plugin from an init function
#             (inrun.ExportReconciler, inrun.ExportHooks or infra.Export)
# WORK_DIR    where the generated bindings and intermediate files go (PLUGIN_DIR/.build)
#
# The steps: toolchain.sh (installs what is missing, pinned); `wit-bindgen go` for the
# world; the SDK's glue for the world (_glue/) as the package the generated exports call;
# a main package importing the plugin; `GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared`
# in one Go workspace of those modules (nothing downloaded); `wasm-tools component embed`
# and `component new` with the WASI preview 1 reactor adapter; `wasm-tools validate`.
set -euo pipefail

if (($# < 4 || $# > 5)); then
  echo "usage: $0 WORLD WIT_DIR PLUGIN_DIR OUT.wasm [WORK_DIR]" >&2
  exit 2
fi
world="$1"
abs() { (cd "$1" && pwd); }
wit_dir="$(abs "$2")"
plugin="$(abs "$3")"
out="$4"
gen="${5:-$plugin/.build}"
sdk="$(abs "$(dirname "${BASH_SOURCE[0]}")")"

toolchain="$("$sdk/toolchain.sh")"
eval "$toolchain" # GO_PKG, GO_ADAPTER, WIT_BINDGEN, WASM_TOOLS (and GOTOOLCHAIN)
go_version="$(cd / && go env GOVERSION)" # e.g. go1.26.8, for the workspace's go line

contract=0.1.0
if grep -qs '^package inrun:reconciler@0\.2\.0;' "$wit_dir"/*.wit; then
  contract=0.2.0
fi
# The glue files of the world: what the generated exports call.
case "$world" in
  reconciler) glue="imports.go request.go outcome-$contract.go reconciler.go" spec=reconciler ;;
  hooks) glue="imports.go request.go outcome-$contract.go hooks.go" spec=hooks ;;
  # `%package`: the world's name is a WIT keyword.
  package) glue="imports.go package.go" spec=%package ;;
  *)
    echo "$0: unknown world $world (reconciler, hooks or package)" >&2
    exit 2
    ;;
esac
module="$(sed -n 's/^module[[:space:]]*//p' "$plugin/go.mod" | head -n1)"
if [[ -z $module ]]; then
  echo "$0: $plugin/go.mod names no module" >&2
  exit 1
fi

rm -rf "$gen"
mkdir -p "$(dirname "$gen")"
if ! msg=$("$WIT_BINDGEN" go --include-versions -w "$spec" "$wit_dir" --out-dir "$gen" 2>&1); then
  echo "$msg" >&2
  exit 1
fi
mkdir -p "$gen/export_wit_world"
for f in $glue; do
  cp "$sdk/_glue/$f" "$gen/export_wit_world/"
done
printf 'package main\n\nimport _ "%s"\n' "$module" >"$gen/plugin.go"
printf 'go %s\n\nuse (\n\t.\n\t%s\n\t%s\n\t%s\n)\n' \
  "${go_version#go}" "$sdk" "$plugin" "$GO_PKG" >"$gen/go.work"
(
  cd "$gen"
  GOWORK="$gen/go.work" GOOS=wasip1 GOARCH=wasm \
    go build -buildmode=c-shared -trimpath -buildvcs=false -ldflags='-checklinkname=0 -s -w' -o core.wasm .
)
"$WASM_TOOLS" component embed "$wit_dir" --world "$spec" "$gen/core.wasm" -o "$gen/embedded.wasm"
"$WASM_TOOLS" component new "$gen/embedded.wasm" \
  --adapt "wasi_snapshot_preview1=$GO_ADAPTER" -o "$out.tmp"
"$WASM_TOOLS" validate "$out.tmp"
mv "$out.tmp" "$out"
