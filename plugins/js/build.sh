#!/usr/bin/env bash
# Builds the JavaScript guests into WebAssembly components with componentize-js.
#
# The toolchain is pinned by plugins/js/package.json + package-lock.json
# (@bytecodealliance/componentize-js 0.23.0) and installed with `npm ci` into
# $INRUN_JS_TOOLCHAIN (default ~/.cache/inrun/js-guest/<lockfile digest>/), outside the
# repository. A component is rebuilt only when a source is newer than it. Needs node and
# npm; reads no standard input.
#
#   plugins/js/build.sh            # build what is out of date
#   INRUN_JS_FORCE=1 plugins/js/build.sh   # rebuild everything
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${INRUN_PLUGIN_DIR:-$root/plugins/target/wasm32-wasip2/release}"
wit="$root/wit"
sdk="$root/sdk/js/inrun-sdk.js"
package_sdk="$root/sdk/js/inrun-package.js"

for tool in node npm; do
  command -v "$tool" >/dev/null || { echo "plugins/js/build.sh: $tool is required (Node.js 18 or newer)" >&2; exit 1; }
done

lock_digest="$(cat "$here/package.json" "$here/package-lock.json" | sha256sum | cut -c1-16)"
toolchain="${INRUN_JS_TOOLCHAIN:-${XDG_CACHE_HOME:-$HOME/.cache}/inrun/js-guest/$lock_digest}"
cli="$toolchain/node_modules/@bytecodealliance/componentize-js/src/cli.js"

if [[ ! -f "$toolchain/.installed" ]]; then
  echo "plugins/js: installing componentize-js (pinned by plugins/js/package-lock.json) into $toolchain" >&2
  mkdir -p "$toolchain"
  cp "$here/package.json" "$here/package-lock.json" "$toolchain/"
  (cd "$toolchain" && npm ci --no-audit --no-fund --loglevel=error </dev/null >&2)
  touch "$toolchain/.installed"
fi

mkdir -p "$out"

# name, world, entry module, WIT directory (default wit/, the 0.1.0 worlds)
guests=(
  "inrun_plugin_webapp_js reconciler webapp/webapp.js"
  "inrun_plugin_hooks_js hooks hooks/hooks.js"
  "inrun_test_throw_js reconciler throw/throw.js"
  "inrun_test_spin_js reconciler spin/spin.js"
  "inrun_test_infra_js %package infra/infra.js 0.2.0"
)

# True when $1 is missing or older than any file the guest is built from.
stale() {
  local target="$1" dir="$2"
  [[ -n "${INRUN_JS_FORCE:-}" || ! -f "$target" ]] && return 0
  local newer
  newer="$(find "$here/$dir" "$sdk" "$package_sdk" "$wit" "$here/package-lock.json" "$here/build.sh" -newer "$target" -type f -print -quit)"
  [[ -n "$newer" ]]
}

for guest in "${guests[@]}"; do
  read -r name world entry version <<<"$guest"
  guest_wit="$wit${version:+/$version}"
  target="$out/$name.wasm"
  if ! stale "$target" "$(dirname "$entry")"; then
    continue
  fi
  echo "plugins/js: componentize-js $entry (world $world) -> $target" >&2
  tmp="$target.tmp.$$"
  # http and fetch-event would import wasi:http, which the host does not grant. Run from
  # the repository root: componentize-js lets a module import files under the working
  # directory only, and the guests import sdk/js/inrun-sdk.js.
  (cd "$root" && node "$cli" "plugins/js/$entry" --wit "$guest_wit" --world-name "$world" \
      --disable http fetch-event --out "$tmp" </dev/null)
  mv -f "$tmp" "$target"
done
