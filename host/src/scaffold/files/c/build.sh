#!/usr/bin/env bash
# Builds @NAME@.wasm with clang, wit-bindgen c and wasm-tools, against the C SDK in inrun/
# and the WIT in wit/ (both written by `inrun plugin new`). Installs the toolchain when it
# is missing: Debian's clang, lld, wasi-libc and libclang-rt-14-dev-wasm32 (apt-get), and
# wit-bindgen-cli and wasm-tools (cargo install, a few minutes once) into
# ${INRUN_C_TOOLS:-~/.cache/inrun/c-guest}.
set -euo pipefail
WIT_BINDGEN_VERSION=@WIT_BINDGEN@
WASM_TOOLS_VERSION=@WASM_TOOLS@
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
tools="${INRUN_C_TOOLS:-$HOME/.cache/inrun/c-guest}"

missing=()
for pkg in clang lld wasi-libc libclang-rt-14-dev-wasm32; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  sudo=""
  [[ $(id -u) == 0 ]] || sudo="sudo -n"
  $sudo apt-get install -y -qq "${missing[@]}" </dev/null >/dev/null \
    || { $sudo apt-get update -qq </dev/null >/dev/null && $sudo apt-get install -y -qq "${missing[@]}" </dev/null >/dev/null; }
fi
has() { # binary version [subcommand that must exist]
  "$tools/bin/$1" --version 2>/dev/null | grep -qE " $2( |\$)" || return 1
  [[ -z ${3:-} ]] || "$tools/bin/$1" "$3" --help >/dev/null 2>&1
}
tool() { # binary crate version subcommand [cargo install args...]
  local bin="$1" crate="$2" version="$3" sub="$4"
  shift 4
  has "$bin" "$version" "$sub" && return
  mkdir -p "$tools"
  (
    flock 9   # one install at a time; none when another build installed it meanwhile
    has "$bin" "$version" "$sub" && exit 0
    echo "installing $crate $version into $tools (cargo install, a few minutes)" >&2
    cargo install "$crate" --version "$version" --locked --force --root "$tools" "$@" </dev/null
  ) 9>"$tools/.install.lock"
}
# wit-bindgen with the C and Go generators: the binary Inrun's Go plugins share.
tool wit-bindgen wit-bindgen-cli "$WIT_BINDGEN_VERSION" go --no-default-features --features c,go
tool wasm-tools wasm-tools "$WASM_TOOLS_VERSION" "" --no-default-features --features component,validate,print,strip

gen="$here/.build/gen"
rm -rf "$gen" && mkdir -p "$gen"
"$tools/bin/wit-bindgen" c "$here/wit" --world reconciler --out-dir "$gen" >/dev/null
clang --target=wasm32-wasi -Os -Wall -Wextra -Werror -std=c11 -mexec-model=reactor \
  -ffunction-sections -fdata-sections -DINRUN_WORLD_RECONCILER -I"$here/inrun" -I"$gen" \
  "$here/app.c" "$here/inrun/inrun.c" "$here/inrun/inrun_json.c" "$gen/reconciler.c" \
  "$gen/reconciler_component_type.o" -Wl,--gc-sections -Wl,--strip-all \
  -Wl,-z,stack-size=1048576 -o "$here/.build/core.wasm"
"$tools/bin/wasm-tools" component new "$here/.build/core.wasm" -o "$here/@NAME@.wasm"
echo "built @NAME@.wasm"
