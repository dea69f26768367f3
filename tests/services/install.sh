#!/usr/bin/env bash
# Installs what the tests need from Debian packages, when it is missing (`make test` runs
# this first, before any build):
#   servers:  PostgreSQL, Redis and Prometheus, which the external-input tests start on
#             127.0.0.1, and the OCI registry (distribution) the plugin-source tests push to
#             and pull from, with htpasswd and openssl for its auth and TLS; the tests start
#             and stop their own instances in temp dirs, so the packages' system services
#             are not needed (nor started)
#   chromium: headless Chromium for the console test
#
#   tests/services/install.sh [all|servers|chromium]   # default: all
#
# What is missing is decided by tests/services/missing.sh. Idempotent, and a quiet no-op
# when nothing is missing. Installs with apt-get as root, or through passwordless
# `sudo -n`; with neither (or no apt-get) it installs nothing and exits 1 with one
# message naming the missing packages and the command that installs them.
#
# INRUN_SERVICES_ASSUME_NO_ROOT=1 behaves as if this user were neither root nor allowed
# passwordless sudo (scripts/fresh-test.sh --check-only uses it to show that message).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
group="${1:-all}"
case "$group" in
  all | servers | chromium) ;;
  *)
    echo "usage: $0 [all|servers|chromium]" >&2
    exit 2
    ;;
esac

status=0
missing="$("$here/missing.sh" "$group")" || status=$?
case $status in
  0) exit 0 ;;
  1) ;;
  *)
    echo "tests/services/missing.sh failed (exit $status)" >&2
    exit "$status"
    ;;
esac
read -ra need <<<"$missing"

command_line="sudo tests/services/install.sh"
[[ $group == all ]] || command_line+=" $group"
cannot() { # why [how]
  {
    echo "The tests need Debian packages that are not installed: ${need[*]}."
    echo "$1"
    echo "${2:-Install them with \`$command_line\` (from the repository root), then run make test again.}"
  } >&2
  exit 1
}

if ! command -v apt-get >/dev/null 2>&1; then
  cannot "This system has no apt-get, so they cannot be installed from here." \
    "Install their equivalents with its package manager, then run make test again."
fi
no_root="${INRUN_SERVICES_ASSUME_NO_ROOT:-}"
[[ $no_root == 0 ]] && no_root=""
SUDO=()
if [[ -n $no_root ]]; then
  cannot "Installing them takes root or passwordless sudo for apt-get, and this user has neither (INRUN_SERVICES_ASSUME_NO_ROOT is set)."
elif [[ $(id -u) != 0 ]]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true >/dev/null 2>&1; then
    SUDO=(sudo -n)
  else
    cannot "Installing them takes root or passwordless sudo for apt-get, and this user has neither (\`sudo -n true\` fails)."
  fi
fi

echo "tests/services: installing ${need[*]} (apt-get)" >&2
# env: sudo would drop DEBIAN_FRONTEND. The lock timeout waits out another apt-get.
apt=("${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -qq -o DPkg::Lock::Timeout=600)
# Keep the packages' own services from starting (containers have no init anyway).
if [[ ! -e /usr/sbin/policy-rc.d ]]; then
  printf '#!/bin/sh\nexit 101\n' | "${SUDO[@]}" tee /usr/sbin/policy-rc.d >/dev/null
  "${SUDO[@]}" chmod +x /usr/sbin/policy-rc.d
  trap '"${SUDO[@]}" rm -f /usr/sbin/policy-rc.d' EXIT
fi
"${apt[@]}" update </dev/null >/dev/null
servers=() chromium=()
for package in "${need[@]}"; do
  if [[ $package == chromium ]]; then chromium+=("$package"); else servers+=("$package"); fi
done
if ((${#servers[@]})); then
  "${apt[@]}" install -y --no-upgrade --no-install-recommends "${servers[@]}" </dev/null >/dev/null
fi
# Chromium with its recommended packages (fonts and the like), as it always was.
if ((${#chromium[@]})); then
  "${apt[@]}" install -y --no-upgrade "${chromium[@]}" </dev/null >/dev/null
fi

if ! still="$(INRUN_SERVICES_ASSUME_MISSING='' "$here/missing.sh" "$group")"; then
  echo "tests/services: apt-get installed ${need[*]}, yet still missing: $still" >&2
  exit 1
fi
