#!/usr/bin/env bash
# `make demo` as a new user runs it, with Python, Node.js and clang hidden (any call to
# them fails), timed.
#
#   scripts/fresh-demo.sh                                # a fresh clone of HEAD, cold build
#   CARGO_TARGET_DIR=$PWD/target scripts/fresh-demo.sh   # a fresh clone, warm host build
#   scripts/fresh-demo.sh --here                         # this checkout as it is (CI: a clean clone)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# Stand-ins that fail loudly: the demo must need none of these.
hidden="$work/hidden"
mkdir -p "$hidden"
for tool in python python3 pip pip3 node npm npx clang clang-14 clang-15 clang-16 wasm-tools wit-bindgen componentize-py go; do
  printf '#!/bin/sh\necho "%s is not available to make demo" >&2\nexit 127\n' "$tool" > "$hidden/$tool"
  chmod +x "$hidden/$tool"
done

if [[ "${1:-}" == "--here" ]]; then
  cd "$repo"
  where="this checkout"
else
  git clone -q "$repo" "$work/inrun"
  cd "$work/inrun"
  export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$work/target}"
  where="a fresh clone (CARGO_TARGET_DIR=$CARGO_TARGET_DIR)"
fi
start=$SECONDS
PATH="$hidden:$PATH" make demo </dev/null
echo "make demo in $where, Rust only: $((SECONDS - start))s"
