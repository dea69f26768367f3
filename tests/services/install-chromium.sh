#!/usr/bin/env bash
# Installs Debian's headless-capable Chromium for the console test (skipped when present);
# the same as `tests/services/install.sh chromium`, which `make test` runs.
set -euo pipefail
exec "$(dirname "${BASH_SOURCE[0]}")/install.sh" chromium
