#!/usr/bin/env bash
# Builds @NAME@.wasm with componentize-py. The first run makes .venv and installs the
# inrun-sdk package (whose WIT the component is built against) and componentize-py into
# it; later runs reuse it. Needs python3 with venv.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$here/.venv"
cd "$here"
if [[ ! -x "$venv/bin/python" ]]; then
  "${PYTHON:-python3}" -m venv "$venv" </dev/null
fi
if [[ ! -f "$venv/.installed" || requirements.txt -nt "$venv/.installed" ]]; then
@PY_SDK_INSTALL@
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r requirements.txt </dev/null
  touch "$venv/.installed"
fi
wit="$("$venv/bin/python" -m inrun_wit)"
# With VIRTUAL_ENV set, componentize-py finds the SDK in the venv's site-packages.
VIRTUAL_ENV="$venv" "$venv/bin/componentize-py" -q -d "$wit" -w reconciler componentize app \
  -p "$here" -o "@NAME@.wasm" </dev/null
echo "built @NAME@.wasm"
