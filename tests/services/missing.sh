#!/usr/bin/env bash
# Which Debian packages the tests need and this machine lacks: the one check that
# install.sh and `make test` (through install.sh) both use, so they cannot disagree.
#
#   tests/services/missing.sh [all|servers|chromium]   # default: all
#
# Prints the missing packages on one line, space-separated, and exits 1 when any is
# missing; prints nothing and exits 0 when all are present (a few `command -v`, fast).
#
#   servers:  postgresql redis-server prometheus docker-registry apache2-utils openssl
#             (the external-input and plugin-source tests start their own instances)
#   chromium: chromium (the console test, headless)
#
# INRUN_SERVICES_ASSUME_MISSING=1 reports every package of the group as missing whether or
# not it is installed, so that the install path runs (scripts/fresh-test.sh uses it on a
# machine where they are already installed). It changes only what this script reports.
set -euo pipefail

group="${1:-all}"
case "$group" in
  all | servers | chromium) ;;
  *)
    echo "usage: $0 [all|servers|chromium]" >&2
    exit 2
    ;;
esac

assume_missing="${INRUN_SERVICES_ASSUME_MISSING:-}"
missing=()
# need PACKAGE CHECK...: PACKAGE is missing when the check command fails.
need() {
  local package=$1
  shift
  if [[ -n "$assume_missing" && "$assume_missing" != 0 ]] || ! "$@" >/dev/null 2>&1; then
    missing+=("$package")
  fi
}
have_initdb() { compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; }

if [[ $group == all || $group == servers ]]; then
  need postgresql have_initdb
  need redis-server command -v redis-server
  need prometheus command -v prometheus
  need docker-registry command -v docker-registry
  need apache2-utils command -v htpasswd
  need openssl command -v openssl
fi
if [[ $group == all || $group == chromium ]]; then
  need chromium command -v chromium
fi

if ((${#missing[@]})); then
  echo "${missing[*]}"
  exit 1
fi
