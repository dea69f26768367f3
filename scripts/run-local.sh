#!/usr/bin/env bash
# `make run`: a local control plane, `inrun run` on an example Blueprint, and an example CR,
# so a newcomer sees children appear. Ctrl-C stops everything.
#   EXAMPLE=declarative make run     # or hooks, constructor (default)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
example="${EXAMPLE:-constructor}"
dir="deploy/examples/$example"
log="$(mktemp -d)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM

INRUN_CONTROLPLANE_BIN="$(tests/controlplane/build.sh)" target/debug/inrun-cluster >"$log/cluster.out" 2>&1 &
pids+=($!)
for _ in $(seq 1 300); do grep -q '^export KUBECONFIG=' "$log/cluster.out" && break; sleep 0.2; done
kubeconfig="$(sed -n 's/^export KUBECONFIG=//p' "$log/cluster.out")"
[ -n "$kubeconfig" ] || { cat "$log/cluster.out"; echo "control plane did not start" >&2; exit 1; }
export KUBECONFIG="$kubeconfig"

(cd "$dir" && exec ../../../target/debug/inrun run -b blueprint.yaml --install-crds --context inrun) >"$log/inrun.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 150); do kubectl get crd webapps.demo.inrun.dev >/dev/null 2>&1 && break; sleep 0.2; done
kubectl wait --for=condition=Established crd/webapps.demo.inrun.dev --timeout=30s >/dev/null
kubectl apply -f "$dir/webapp.yaml"
kubectl wait --for=condition=Ready webapp/shop --timeout=30s
kubectl get webapps,deployments,services
echo
echo "export KUBECONFIG=$KUBECONFIG    # in another shell, to look around"
echo "inrun's log: $log/inrun.log; Ctrl-C stops everything"
wait "${pids[0]}"
