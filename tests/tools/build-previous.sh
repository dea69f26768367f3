#!/usr/bin/env bash
# Builds the `inrun` binary of an earlier commit, for the upgrade tests (`make chaos`): the
# previous release and the current build run side by side through leader and ring
# hand-overs. Cached outside the clone, keyed by commit; prints the binary's path.
#
#   tests/tools/build-previous.sh           # INRUN_PREVIOUS_REF, else the newest v* tag,
#                                           # else the commit before HEAD
#   tests/tools/build-previous.sh REF       # any commit
#   INRUN_PREVIOUS_DIR=... build-previous.sh  # another cache root
set -euo pipefail

repo="$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)"
ref="${1:-${INRUN_PREVIOUS_REF:-}}"
if [ -z "$ref" ]; then
  ref="$(git -C "$repo" describe --tags --abbrev=0 --match 'v*' 2>/dev/null || echo HEAD~1)"
fi
sha="$(git -C "$repo" rev-parse --verify "$ref^{commit}")"
root="${INRUN_PREVIOUS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/inrun/previous}"
dir="$root/$sha"
mkdir -p "$dir"
exec 9>"$dir/.lock"
flock 9

if [ -x "$dir/inrun" ]; then
  echo "previous host: $ref ($sha) cached in $dir" >&2
else
  echo "previous host: building $ref ($sha); a cold build takes a quarter of an hour on two cores" >&2
  start=$SECONDS
  tmp="$(mktemp -d "$dir/build.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  git -C "$repo" archive "$sha" | tar -x -C "$tmp"
  # Its own target directory: the clone's would take the old binary for the new one.
  (cd "$tmp" && CARGO_TARGET_DIR="$tmp/target" CARGO_INCREMENTAL=0 \
      cargo build --profile demo -p inrun --bin inrun >&2)
  mv "$tmp/target/demo/inrun" "$dir/inrun"
  echo "previous host: built in $((SECONDS - start))s" >&2
fi
echo "$dir/inrun"
