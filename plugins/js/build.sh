#!/usr/bin/env bash
# Builds the JavaScript and TypeScript guests into WebAssembly components with
# componentize-js.
#
# The toolchain (componentize-js 0.23.0, typescript 7.0.2, @types/node) is pinned by
# plugins/js/package.json + package-lock.json; plugins/js/toolchain.sh installs it with
# `npm ci` into ~/.cache/inrun/js-guest/<lock digest>/, outside the repository.
# componentize-js runs through the SDK's sdk/js/componentize.mjs, which encodes the
# strings a guest hands to the host natively instead of in interpreted JavaScript.
#
# TypeScript guests (plugins/js/*-ts/) are type-checked under `strict` against the SDK's
# declarations (sdk/js/*.d.ts) and compiled by tsc (plugins/js/tsconfig.json) into
# plugins/target/ts/, a mirror of the repository that also gets the SDK's modules, so their
# relative imports resolve there; componentize-js builds the compiled module. A type error
# fails the build. So does one in sdk/js/test/types.test.ts, which uses every export of
# the SDK (host/tests/lang_ts.rs also runs it against the JavaScript).
#
# A component is rebuilt only when a source is newer than it. Needs node and npm; reads no
# standard input.
#
#   plugins/js/build.sh            # build what is out of date
#   INRUN_JS_FORCE=1 plugins/js/build.sh   # rebuild everything
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${INRUN_PLUGIN_DIR:-$root/plugins/target/wasm32-wasip2/release}"
wit="$root/wit"
sdk="$root/sdk/js"
# Where tsc writes (plugins/js/tsconfig.json's outDir).
ts_out="$root/plugins/target/ts"

toolchain="$("$here/toolchain.sh")"
# componentize-js's command line with the SDK's cheaper string glue (sdk/js/componentize.mjs).
cli="$sdk/componentize.mjs"
export INRUN_COMPONENTIZE_JS="$toolchain/node_modules/@bytecodealliance/componentize-js"
tsc=(node "$toolchain/node_modules/typescript/bin/tsc")

mkdir -p "$out"

# The TypeScript guests and the SDK's declarations, type-checked every run (well under a
# second): an error stops the build here.
(cd "$root" && "${tsc[@]}" -p plugins/js/tsconfig.json </dev/null)
(cd "$root" && "${tsc[@]}" -p sdk/js/test/tsconfig.json --noEmit \
    --typeRoots "$toolchain/node_modules/@types" </dev/null)
mkdir -p "$ts_out/sdk/js"
cp "$sdk"/*.js "$ts_out/sdk/js/"

# name, world, entry module, WIT directory (default wit/, the 0.1.0 worlds). An entry
# ending in .ts is compiled first, and its module built from $ts_out.
guests=(
  "inrun_plugin_webapp_js reconciler webapp/webapp.js"
  "inrun_plugin_hooks_js hooks hooks/hooks.js"
  "inrun_test_throw_js reconciler throw/throw.js"
  "inrun_test_spin_js reconciler spin/spin.js"
  "inrun_test_infra_js %package infra/infra.js 0.2.0"
  "inrun_plugin_webapp_ts reconciler webapp-ts/webapp.ts 0.2.0"
)

# True when $1 is missing or older than any file the guest is built from (its directory
# $2, the SDK's modules, the WIT, the toolchain, and for TypeScript ($3) the declarations
# and tsconfig.json).
stale() {
  local target="$1" dir="$2" typescript="$3"
  [[ -n "${INRUN_JS_FORCE:-}" || ! -f "$target" ]] && return 0
  local inputs=("$here/$dir" "$sdk"/*.js "$sdk/componentize.mjs" "$wit" "$here/package-lock.json" "$here/build.sh")
  [[ -n "$typescript" ]] && inputs+=("$sdk"/*.d.ts "$here/tsconfig.json")
  local newer
  newer="$(find "${inputs[@]}" -newer "$target" -type f -print -quit)"
  [[ -n "$newer" ]]
}

for guest in "${guests[@]}"; do
  read -r name world entry version <<<"$guest"
  guest_wit="$wit${version:+/$version}"
  target="$out/$name.wasm"
  typescript=""
  [[ "$entry" == *.ts ]] && typescript=1
  if ! stale "$target" "$(dirname "$entry")" "$typescript"; then
    continue
  fi
  # componentize-js lets a module import files under the working directory only: a
  # JavaScript guest is built from the repository root (it imports sdk/js/inrun-sdk.js), a
  # TypeScript one from $ts_out, which mirrors the repository.
  if [[ -n "$typescript" ]]; then
    from="$ts_out" module="plugins/js/${entry%.ts}.js"
  else
    from="$root" module="plugins/js/$entry"
  fi
  echo "plugins/js: componentize-js $entry (world $world) -> $target" >&2
  tmp="$target.tmp.$$"
  # http and fetch-event would import wasi:http, which the host does not grant.
  (cd "$from" && node "$cli" "$module" --wit "$guest_wit" --world-name "$world" \
      --disable http fetch-event --out "$tmp" </dev/null)
  mv -f "$tmp" "$target"
done
