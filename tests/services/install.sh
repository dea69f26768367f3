#!/usr/bin/env bash
# Installs the servers the external-input tests start on 127.0.0.1: PostgreSQL, Redis and
# Prometheus from Debian packages, and the OCI registry (distribution) the plugin-source
# tests push to and pull from, with htpasswd and openssl for its auth and TLS. Idempotent
# and quiet; the tests start and stop their own instances in temp dirs, so the packages'
# system services are not needed.
set -euo pipefail

need=()
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
command -v docker-registry >/dev/null 2>&1 || need+=(docker-registry)
command -v htpasswd >/dev/null 2>&1 || need+=(apache2-utils)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
# Keep the packages' own services from starting (containers have no init anyway).
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
  $SUDO chmod +x /usr/sbin/policy-rc.d
  trap '$SUDO rm -f /usr/sbin/policy-rc.d' EXIT
fi
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
