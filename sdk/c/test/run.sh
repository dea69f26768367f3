#!/usr/bin/env bash
# Native tests of the C SDK's JSON reader/writer (any C compiler; no Wasm toolchain).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
${CC:-cc} -std=c11 -Wall -Wextra -Werror -g -fsanitize=address,undefined -I"$here/.." \
  "$here/json_test.c" "$here/../inrun_json.c" -o "$out/json_test"
"$out/json_test"
