#!/usr/bin/env bash
# Builds the SDKs as packages into dist/sdk/ (`make sdk`):
#   inrun-contract-<v>.crate, inrun-sdk-<v>.crate   cargo package (the SDK carries its WIT)
#   crates/inrun-{contract,sdk}-<v>/                 the two unpacked, which
#                                                    `inrun plugin new --sdk` copies
#   inrun_sdk-<v>-py3-none-any.whl                   pip wheel of sdk/python + wit/
#   inrun-sdk-<v>.tgz                                npm pack of sdk/js (modules, .d.ts) + wit/
# Python and JavaScript are built from a staged copy under dist/build/, since the WIT
# lives outside their directories. A language whose tool is missing (python3, npm) is
# skipped with a message. Needs crates.io and PyPI (the build backend) the first time.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$root/dist/sdk"
stage="$root/dist/build"
cargo="${CARGO:-cargo}"
target="${CARGO_TARGET_DIR:-$root/target}"
log() { echo "sdk: $*" >&2; }

rm -rf "$out" "$stage"
mkdir -p "$out" "$stage"

# Rust: both crates in one run, so inrun-sdk's dependency on inrun-contract resolves to
# the one being packaged. --allow-dirty: a working tree with uncommitted edits packages too.
log "cargo package -p inrun-contract -p inrun-sdk"
(cd "$root" && "$cargo" package -q --allow-dirty -p inrun-contract -p inrun-sdk </dev/null)
cp "$target"/package/inrun-contract-*.crate "$target"/package/inrun-sdk-*.crate "$out/"
mkdir -p "$out/crates"
for crate in "$out"/inrun-contract-*.crate "$out"/inrun-sdk-*.crate; do
  tar xzf "$crate" -C "$out/crates"
done

if command -v python3 >/dev/null; then
  log "python wheel"
  py="$stage/python"
  mkdir -p "$py"
  cp "$root/sdk/python/pyproject.toml" "$root/sdk/python/README.md" \
    "$root/sdk/python/inrun_sdk.py" "$root/sdk/python/inrun_package.py" "$py/"
  cp -r "$root/sdk/python/inrun_wit" "$py/"
  rm -rf "$py/inrun_wit/__pycache__"
  cp -rL "$root/wit" "$py/inrun_wit/wit"
  python3 -m pip wheel --quiet --disable-pip-version-check --no-deps -w "$out" "$py" </dev/null
else
  log "python3 not found: no wheel"
fi

if command -v npm >/dev/null; then
  log "npm tarball"
  js="$stage/js"
  mkdir -p "$js"
  # The modules and their TypeScript declarations: everything package.json's `files` lists
  # besides testing/ and wit/.
  cp "$root/sdk/js/package.json" "$root/sdk/js/README.md" "$root"/sdk/js/*.js "$root"/sdk/js/*.mjs "$root"/sdk/js/*.d.ts "$js/"
  cp -r "$root/sdk/js/testing" "$js/"
  cp -rL "$root/wit" "$js/"
  (cd "$js" && npm pack --silent --pack-destination "$out" </dev/null >/dev/null)
else
  log "npm not found: no tarball"
fi
ls -1 "$out" >&2
