#!/usr/bin/env bash
# Installs the JavaScript and TypeScript guests' toolchain when missing and prints its
# directory (its node_modules/ holds componentize-js, typescript and @types/node).
#
# The toolchain is pinned by plugins/js/package.json + package-lock.json and installed
# with `npm ci` into $INRUN_JS_TOOLCHAIN (default ~/.cache/inrun/js-guest/<lockfile
# digest>/), outside the repository. Needs node and npm; reads no standard input.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

for tool in node npm; do
  command -v "$tool" >/dev/null || { echo "plugins/js: $tool is required (Node.js 18 or newer)" >&2; exit 1; }
done

lock_digest="$(cat "$here/package.json" "$here/package-lock.json" | sha256sum | cut -c1-16)"
toolchain="${INRUN_JS_TOOLCHAIN:-${XDG_CACHE_HOME:-$HOME/.cache}/inrun/js-guest/$lock_digest}"

if [[ ! -f "$toolchain/.installed" ]]; then
  # One install at a time (build.sh and tests may ask at once); the others wait, then find it.
  mkdir -p "$toolchain"
  exec 9>"$toolchain/.lock"
  flock 9
fi
if [[ ! -f "$toolchain/.installed" ]]; then
  echo "plugins/js: installing componentize-js and typescript (pinned by plugins/js/package-lock.json) into $toolchain" >&2
  mkdir -p "$toolchain"
  cp "$here/package.json" "$here/package-lock.json" "$toolchain/"
  (cd "$toolchain" && npm ci --no-audit --no-fund --loglevel=error </dev/null >&2)
  touch "$toolchain/.installed"
fi
echo "$toolchain"
