#!/usr/bin/env bash
# Builds kube-apiserver and etcd from Go modules into a cache outside the clone,
# keyed by version, and reuses them when present. Prints the directory holding them.
#
#   tests/controlplane/build.sh            # build if missing, print the bin dir
#   INRUN_CONTROLPLANE_DIR=... build.sh    # use another cache root
set -euo pipefail

K8S_VERSION=v1.36.3
ETCD_VERSION=v3.6.8
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="${INRUN_CONTROLPLANE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/inrun/controlplane}"
bin="$root/k8s-$K8S_VERSION-etcd-$ETCD_VERSION"
mkdir -p "$bin"
# One build at a time per cache: test binaries running in parallel may all call this.
exec 9>"$bin/.lock"
flock 9

build() { # name, module dir, package, ldflags
  local name=$1 dir=$2 pkg=$3 ldflags=$4
  if [ -x "$bin/$name" ]; then
    echo "controlplane: $name cached in $bin" >&2
    return
  fi
  echo "controlplane: building $name ($pkg); a cold build takes several minutes" >&2
  local start=$SECONDS
  (cd "$here/$dir" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath \
      -ldflags "-s -w $ldflags" -o "$bin/$name.tmp" "$pkg")
  mv "$bin/$name.tmp" "$bin/$name"
  echo "controlplane: built $name in $((SECONDS - start))s" >&2
}

build etcd etcd go.etcd.io/etcd/server/v3 \
  "-X go.etcd.io/etcd/api/v3/version.GitSHA=inrun"
build kube-apiserver apiserver k8s.io/kubernetes/cmd/kube-apiserver \
  "-X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=36 -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION"

echo "$bin"
