#!/usr/bin/env bash
# Builds the Python example and test plugins into WebAssembly components with
# componentize-py, installing the pinned toolchain first (once, in a venv under
# ${XDG_CACHE_HOME:-~/.cache}/inrun/python-guest, outside the repository).
#
#   plugins/python/build.sh           build what is out of date
#   plugins/python/build.sh --force   rebuild everything
#
# Outputs go to plugins/target/wasm32-wasip2/release/ beside the Rust plugins. Needs
# python3 (3.9 or newer) with the venv module, and PyPI; reads no standard input.
set -euo pipefail

COMPONENTIZE_PY_VERSION=0.25.1

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="$root/plugins/target/wasm32-wasip2/release"
cache="${INRUN_PYTHON_GUEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/inrun/python-guest}"
venv="$cache/componentize-py-$COMPONENTIZE_PY_VERSION"
force=false
[[ "${1:-}" == "--force" ]] && force=true

# name of the output | source folder | module | WIT world | WIT folder (default: wit)
plugins=(
  "inrun_plugin_webapp_python|webapp|webapp|reconciler"
  "inrun_plugin_hooks_python|hooks|labels_hooks|hooks"
  "inrun_test_raise_python|raise|failing|reconciler"
  "inrun_test_spin_python|spin|spin|reconciler"
  "inrun_plugin_bucket_python|bucket|bucket|%package|wit/0.2.0"
  "inrun_test_reporter_python|reporter|reporter|reconciler|wit/0.2.0"
  "inrun_bench_pair_python|pair|pair|reconciler"
)

install_toolchain() {
  [[ -f "$venv/.installed" ]] && return
  echo "python plugins: installing componentize-py $COMPONENTIZE_PY_VERSION into $venv" >&2
  mkdir -p "$cache"
  # $PYTHON, else python3 on the PATH, else Debian's (installing its venv module if root).
  local python made=false
  for python in ${PYTHON:-} python3 /usr/bin/python3; do
    command -v "$python" >/dev/null || continue
    rm -rf "$venv"
    if "$python" -m venv "$venv" </dev/null >&2; then made=true; break; fi
  done
  if ! $made && [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    echo "python plugins: installing python3-venv" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3 python3-venv </dev/null >&2
    rm -rf "$venv"
    /usr/bin/python3 -m venv "$venv" </dev/null >&2 && made=true
  fi
  if ! $made; then
    echo "python plugins: could not create a venv; install python3 with its venv module" >&2
    exit 1
  fi
  "$venv/bin/pip" install --quiet --disable-pip-version-check \
    "componentize-py==$COMPONENTIZE_PY_VERSION" </dev/null >&2
  touch "$venv/.installed"
}

# True when $1 exists and is newer than every source it is built from.
up_to_date() {
  local output="$1" dir="$2"
  [[ -f "$output" ]] || return 1
  [[ -z "$(find "$here/$dir" "$root/sdk/python" "$root/wit" "$here/build.sh" \
      -newer "$output" -print -quit)" ]]
}

mkdir -p "$out"
for entry in "${plugins[@]}"; do
  IFS='|' read -r name dir module world witdir <<<"$entry"
  witdir="$root/${witdir:-wit}"
  wasm="$out/$name.wasm"
  if ! $force && up_to_date "$wasm" "$dir"; then
    continue
  fi
  install_toolchain
  echo "python plugins: $name.wasm (world $world, module $module)" >&2
  # componentize-py writes its bindings next to nothing in the source tree; build into a
  # temporary file so an interrupted build never leaves a truncated component behind.
  tmp="$wasm.tmp"
  (cd "$here/$dir" && env -u VIRTUAL_ENV "$venv/bin/componentize-py" -q \
      -d "$witdir" -w "$world" componentize "$module" \
      -p "$here/$dir" -p "$root/sdk/python" -o "$tmp" </dev/null)
  mv "$tmp" "$wasm"
done
