# One task runner for people and CI. `make demo` and `make test` are the README's commands.
SHELL := /bin/bash
CARGO ?= cargo
PLUGIN_DIR := $(CURDIR)/plugins/target/wasm32-wasip2/release
INRUN := $(CURDIR)/target/debug/inrun
EXAMPLES := declarative hooks constructor

export INRUN_PLUGIN_DIR := $(PLUGIN_DIR)

.PHONY: demo test lint bench plugins build controlplane cluster run clean-cache

## Build the example plugins (Rust guests for wasm32-wasip2).
plugins:
	cd plugins && $(CARGO) build --release --target wasm32-wasip2

## Build the host binary.
build:
	$(CARGO) build -p inrun --bin inrun

## Build the plugins and render each example CR offline, with no cluster.
demo: plugins build
	@for ex in $(EXAMPLES); do \
	  echo "=== $$ex: inrun render --blueprint deploy/examples/$$ex/blueprint.yaml --object deploy/examples/$$ex/webapp.yaml"; \
	  (cd deploy/examples/$$ex && $(INRUN) render --blueprint blueprint.yaml --object webapp.yaml) || exit 1; \
	done

## Build (or reuse from the cache) kube-apiserver and etcd for end-to-end tests.
controlplane:
	@tests/controlplane/build.sh >/dev/null

## Every test: unit, Wasm integration, and end-to-end against a real kube-apiserver + etcd.
test: plugins controlplane
	INRUN_CONTROLPLANE_BIN="$$(tests/controlplane/build.sh)" $(CARGO) test --workspace --no-fail-fast

## cargo fmt --check and clippy with warnings as errors.
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

## Benchmarks; numbers go to BENCHMARKS.md.
bench: plugins
	$(CARGO) bench -p inrun --bench wasm

## A local control plane, `inrun run` on an example Blueprint, and an example CR (EXAMPLE=declarative|hooks|constructor).
run: plugins controlplane
	$(CARGO) build -p inrun --bin inrun -p inrun-testenv --bin inrun-cluster
	scripts/run-local.sh

## A local control plane in the foreground; prints the KUBECONFIG to export.
cluster: controlplane
	INRUN_CONTROLPLANE_BIN="$$(tests/controlplane/build.sh)" $(CARGO) run -q -p inrun-testenv --bin inrun-cluster
