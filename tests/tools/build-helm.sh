#!/usr/bin/env bash
# Builds helm from its Go module (helm.sh/helm/v3, from the Go module proxy) into a cache
# outside the clone, keyed by version, and reuses it when present. Prints the binary's path.
#
#   tests/tools/build-helm.sh              # build if missing, print the path
#   INRUN_HELM_DIR=... build-helm.sh       # use another cache root
set -euo pipefail

HELM_VERSION=v3.22.0
root="${INRUN_HELM_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/inrun/helm}"
dir="$root/$HELM_VERSION"
mkdir -p "$dir"
# One build at a time per cache: test binaries running in parallel may all call this.
exec 9>"$dir/.lock"
flock 9

if [ -x "$dir/helm" ]; then
  echo "helm: $HELM_VERSION cached in $dir" >&2
else
  echo "helm: building $HELM_VERSION from its Go module; a cold build takes a few minutes" >&2
  start=$SECONDS
  tmp="$(mktemp -d "$dir/build.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  # `go install module@version` builds with the module's own go.mod and go.sum, outside
  # any workspace; the version variable is what `helm version` prints.
  (cd "$tmp" && CGO_ENABLED=0 GOBIN="$tmp" GOFLAGS=-buildvcs=false GOWORK=off \
      go install -trimpath \
      -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
      "helm.sh/helm/v3/cmd/helm@$HELM_VERSION")
  mv "$tmp/helm" "$dir/helm"
  echo "helm: built $HELM_VERSION in $((SECONDS - start))s" >&2
fi

echo "$dir/helm"
