#!/usr/bin/env bash
# Installs, when missing, what an Inrun plugin in Go is built with, pinned and cached
# outside the project, then prints it as shell assignments for the build to eval:
#   GO_PKG       the Go runtime package the generated bindings import
#                (go.bytecodealliance.org/pkg, which the Go module proxy does not serve),
#                taken from the crates.io crate wit-bindgen-go
#   GO_ADAPTER   the WASI preview 1 reactor adapter, from the crates.io crate
#                wasi-preview1-component-adapter-provider (the host's wasmtime version)
#   WIT_BINDGEN  wit-bindgen-cli with its c and go generators (cargo install; shared with
#                the C guests, so whichever builds first installs the one binary both use)
#   WASM_TOOLS   wasm-tools (cargo install)
#   GOTOOLCHAIN  exported only when the go command is older than Go 1.25: it then runs
#                Go GO_TOOLCHAIN, fetched once through the Go module proxy
# The go command itself (Go 1.21 or newer) and cargo must be on PATH. Needs no stdin;
# everything it says goes to standard error.
set -euo pipefail

GO_MIN_MINOR=25
GO_TOOLCHAIN=go1.26.8
WIT_BINDGEN_VERSION=0.63.0
WIT_BINDGEN_GO_VERSION=0.63.0
WASM_TOOLS_VERSION=1.263.0
ADAPTER_VERSION=48.0.8

tools="${INRUN_C_TOOLS:-$HOME/.cache/inrun/c-guest}"
cache="${INRUN_GO_CACHE:-$HOME/.cache/inrun/go-guest}"

log() { echo "go toolchain: $*" >&2; }

# --- go -----------------------------------------------------------------------------
if ! command -v go >/dev/null; then
  log "the go command is missing: install Go 1.21 or newer (1.$GO_MIN_MINOR or newer needs no download)"
  exit 1
fi
version="$(cd / && GOTOOLCHAIN=local go env GOVERSION)"   # e.g. go1.26.8
minor="$(sed -E 's/^go1\.([0-9]+).*/\1/' <<<"$version")"
if ! [[ $minor =~ ^[0-9]+$ ]] || ((minor < 21)); then
  log "$version is too old to fetch a toolchain: install Go 1.21 or newer"
  exit 1
fi
toolchain=""
if ((minor < GO_MIN_MINOR)); then
  toolchain="$GO_TOOLCHAIN"
  if ! (cd / && GOTOOLCHAIN="$toolchain" go version >/dev/null </dev/null); then
    log "could not fetch $toolchain through the Go module proxy"
    exit 1
  fi
fi

# --- cargo tools ----------------------------------------------------------------------
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
    # One install at a time, and none when another build installed it meanwhile.
    flock 9
    have_tool "$bin" "$version" "$sub" && exit 0
    log "installing $crate $version into $tools (cargo install, a few minutes once)"
    cargo install "$crate" --version "$version" --locked --force --root "$tools" "$@" </dev/null >&2
  ) 9>"$tools/.install.lock"
}
# The C and Go generators only: the others are compile time for nothing.
cargo_tool wit-bindgen wit-bindgen-cli "$WIT_BINDGEN_VERSION" go \
  --no-default-features --features c,go
cargo_tool wasm-tools wasm-tools "$WASM_TOOLS_VERSION" "" \
  --no-default-features --features component,validate,print,strip

# --- Go runtime package and adapter, from crates.io ---------------------------------
pkg="$cache/wit-bindgen-go-$WIT_BINDGEN_GO_VERSION/pkg"
adapter="$cache/adapter-$ADAPTER_VERSION/wasi_snapshot_preview1.reactor.wasm"
if [[ ! -f $pkg/go.mod || ! -f $adapter ]]; then
  log "fetching wit-bindgen-go $WIT_BINDGEN_GO_VERSION and wasi-preview1-component-adapter-provider $ADAPTER_VERSION (crates.io, no compile)"
  scratch="$(mktemp -d)"
  trap 'rm -rf "$scratch"' EXIT
  mkdir -p "$scratch/src"
  : >"$scratch/src/lib.rs"
  cat >"$scratch/Cargo.toml" <<EOF
[package]
name = "inrun-go-guest-sources"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
wit-bindgen-go = "=$WIT_BINDGEN_GO_VERSION"
wasi-preview1-component-adapter-provider = "=$ADAPTER_VERSION"
EOF
  # `cargo metadata` downloads and unpacks the packages and names their directories.
  meta="$(cargo metadata --format-version 1 --manifest-path "$scratch/Cargo.toml" </dev/null)"
  crate_dir() { # name version
    grep -o "\"manifest_path\":\"[^\"]*/$1-$2/Cargo.toml\"" <<<"$meta" | head -n1 |
      sed -e 's/^"manifest_path":"//' -e 's#/Cargo.toml"$##'
  }
  go_src="$(crate_dir wit-bindgen-go "$WIT_BINDGEN_GO_VERSION")"
  adapter_src="$(crate_dir wasi-preview1-component-adapter-provider "$ADAPTER_VERSION")"
  if [[ ! -d $go_src/src/pkg/wit || ! -f $adapter_src/artefacts/wasi_snapshot_preview1.reactor.wasm ]]; then
    log "the crates do not hold src/pkg and artefacts/wasi_snapshot_preview1.reactor.wasm"
    exit 1
  fi
  # Copied beside, then renamed into place: a concurrent build sees all or nothing.
  mkdir -p "$(dirname "$pkg")" "$(dirname "$adapter")"
  staged="$(mktemp -d "$(dirname "$pkg")/.pkg.XXXXXX")"
  cp -r "$go_src/src/pkg/wit" "$go_src/src/pkg/go.mod" "$go_src/src/pkg/LICENSE" "$staged/"
  # The crate's go.mod asks for a newer Go than the generated code needs.
  sed -i -E "s/^go [0-9.]+\$/go 1.$GO_MIN_MINOR/" "$staged/go.mod"
  mv -T "$staged" "$pkg" 2>/dev/null || rm -rf "$staged"
  cp "$adapter_src/artefacts/wasi_snapshot_preview1.reactor.wasm" "$adapter.tmp.$$"
  mv "$adapter.tmp.$$" "$adapter"
fi

printf "GO_PKG='%s'\nGO_ADAPTER='%s'\nWIT_BINDGEN='%s'\nWASM_TOOLS='%s'\n" \
  "$pkg" "$adapter" "$tools/bin/wit-bindgen" "$tools/bin/wasm-tools"
if [[ -n $toolchain ]]; then
  printf "export GOTOOLCHAIN='%s'\n" "$toolchain"
fi
