#!/usr/bin/env bash
# Builds the C example and test plugins as WebAssembly components (called by
# `make plugins`). Installs its pinned toolchain first when it is missing:
#   Debian: clang lld wasi-libc libclang-rt-14-dev-wasm32 (clang targets wasm32-wasi)
#   cargo:  wit-bindgen-cli (generators c and go, shared with the Go build) and wasm-tools,
#           into a cache outside the repo
# Outputs, next to the Rust plugins:
#   plugins/target/wasm32-wasip2/release/inrun_plugin_webapp_c.wasm
#   plugins/target/wasm32-wasip2/release/inrun_plugin_hooks_c.wasm
#   plugins/target/wasm32-wasip2/release/inrun_test_abort_c.wasm
#   plugins/target/wasm32-wasip2/release/inrun_test_spin_c.wasm
#   plugins/target/wasm32-wasip2/release/inrun_test_reporter_c.wasm
#   plugins/target/wasm32-wasip2/release/inrun_test_infra_c.wasm (an infrastructure package)
# Nothing is rebuilt when every output is newer than every source. Needs no stdin.
set -euo pipefail

WIT_BINDGEN_VERSION=0.63.0
WASM_TOOLS_VERSION=1.263.0
APT_PACKAGES=(clang lld wasi-libc libclang-rt-14-dev-wasm32)

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
tools="${INRUN_C_TOOLS:-$HOME/.cache/inrun/c-guest}"
out="$root/plugins/target/wasm32-wasip2/release"
work="$root/plugins/target/c"
sdk="$root/sdk/c"
wit="$root/wit"

# name:world:source-dir[:contract] (contract 0.2.0: the worlds of wit/0.2.0, whose outcome
# carries conditions and events; default 0.1.0, wit/)
PLUGINS=(
  "inrun_plugin_webapp_c:reconciler:webapp"
  "inrun_plugin_hooks_c:hooks:hooks"
  "inrun_test_abort_c:reconciler:abort"
  "inrun_test_spin_c:reconciler:spin"
  "inrun_test_reporter_c:reconciler:reporter:0.2.0"
  "inrun_test_infra_c:package:infra:0.2.0"
)

log() { echo "plugins/c: $*" >&2; }

# --- Up to date? --------------------------------------------------------------------
sources=("$here/build.sh" "$sdk"/*.c "$sdk"/*.h "$wit"/*.wit "$wit"/0.2.0/*.wit)  # inrun_package.[ch] included
for p in "${PLUGINS[@]}"; do
  IFS=: read -r _ _ dir _ <<<"$p"
  sources+=("$here/$dir"/*.c)
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
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  log "installing ${missing[*]} (apt-get)"
  sudo=""
  [[ $(id -u) == 0 ]] || sudo="sudo -n"
  export DEBIAN_FRONTEND=noninteractive
  if ! $sudo apt-get install -y -qq "${missing[@]}" </dev/null >/dev/null; then
    $sudo apt-get update -qq </dev/null >/dev/null
    $sudo apt-get install -y -qq "${missing[@]}" </dev/null >/dev/null
  fi
fi

have_tool() { # binary version [subcommand that must exist]
  "$tools/bin/$1" --version 2>/dev/null | grep -qE " $2( |\$)" || return 1
  [[ -z ${3:-} ]] || "$tools/bin/$1" "$3" --help >/dev/null 2>&1
}
cargo_tool() { # binary crate version subcommand [cargo install args...]
  local bin="$1" crate="$2" version="$3" sub="$4"
  shift 4
  have_tool "$bin" "$version" "$sub" && return
  mkdir -p "$tools"
  (
    # One install at a time (plugins/go/toolchain.sh takes the same lock), and none when
    # another build installed it meanwhile.
    flock 9
    have_tool "$bin" "$version" "$sub" && exit 0
    log "installing $crate $version into $tools (cargo install, a few minutes)"
    cargo install "$crate" --version "$version" --locked --force --root "$tools" "$@" </dev/null
  ) 9>"$tools/.install.lock"
}
# The C and Go generators, one binary for both languages (plugins/go/toolchain.sh installs
# the same; one without `go` counts as missing): the other generators (Rust, C#, C++,
# MoonBit, D) are compile time for nothing.
cargo_tool wit-bindgen wit-bindgen-cli "$WIT_BINDGEN_VERSION" go --no-default-features --features c,go
cargo_tool wasm-tools wasm-tools "$WASM_TOOLS_VERSION" "" \
  --no-default-features --features component,validate,print,strip
WIT_BINDGEN="$tools/bin/wit-bindgen"
WASM_TOOLS="$tools/bin/wasm-tools"

# --- Build --------------------------------------------------------------------------
CFLAGS=(--target=wasm32-wasi -Os -Wall -Wextra -Werror -std=c11
  -mexec-model=reactor -ffunction-sections -fdata-sections)
LDFLAGS=(-Wl,--gc-sections -Wl,--strip-all -Wl,-z,stack-size=1048576)

mkdir -p "$out" "$work"
for world in reconciler hooks package; do
  for contract in 0.1.0 0.2.0; do
    # The package world exists only in the 0.2.0 contract (`%package`: a WIT keyword).
    [[ $world == package && $contract == 0.1.0 ]] && continue
    dir="$wit"
    [[ $contract == 0.2.0 ]] && dir="$wit/0.2.0"
    spec="$world"
    [[ $world == package ]] && spec="%package"
    rm -rf "$work/gen-$world-$contract"
    if ! msg=$("$WIT_BINDGEN" c "$dir" --world "$spec" --out-dir "$work/gen-$world-$contract" 2>&1); then
      echo "$msg" >&2
      exit 1
    fi
  done
done

for p in "${PLUGINS[@]}"; do
  IFS=: read -r name world dir contract <<<"$p"
  contract="${contract:-0.1.0}"
  gen="$work/gen-$world-$contract"
  world_flag=INRUN_WORLD_RECONCILER
  [[ $world == hooks ]] && world_flag=INRUN_WORLD_HOOKS
  [[ $world == package ]] && world_flag=INRUN_WORLD_PACKAGE
  # A package links the package glue instead of the reconciler/hooks glue.
  glue="$sdk/inrun.c"
  [[ $world == package ]] && glue="$sdk/inrun_package.c"
  contract_flag=()
  [[ $contract == 0.2.0 ]] && contract_flag=(-DINRUN_CONTRACT_0_2_0)
  core="$work/$name.core.wasm"
  # $world_component_type.o carries the world's type: linking it embeds the WIT (what
  # `wasm-tools component embed` would do), so `component new` needs nothing else.
  clang "${CFLAGS[@]}" -D"$world_flag" "${contract_flag[@]}" -I"$sdk" -I"$gen" \
    "$here/$dir"/*.c "$glue" "$sdk/inrun_json.c" "$gen/$world.c" \
    "$gen/${world}_component_type.o" "${LDFLAGS[@]}" -o "$core"
  # No --adapt: the SDK and these plugins import nothing from WASI (no stdio).
  "$WASM_TOOLS" component new "$core" -o "$out/$name.wasm.tmp"
  "$WASM_TOOLS" validate "$out/$name.wasm.tmp"
  mv "$out/$name.wasm.tmp" "$out/$name.wasm"
  log "built $name.wasm ($(stat -c %s "$out/$name.wasm") bytes)"
done
