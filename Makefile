# One task runner for people and CI. `make demo` and `make test` are the README's commands.
SHELL := /bin/bash
CARGO ?= cargo
PLUGIN_DIR := $(CURDIR)/plugins/target/wasm32-wasip2/release
INRUN ?= $(or $(CARGO_TARGET_DIR),$(CURDIR)/target)/debug/inrun
EXAMPLES := declarative hooks constructor

export INRUN_PLUGIN_DIR := $(PLUGIN_DIR)

# Guest languages besides Rust; each builds through plugins/<language>/build.sh, which
# installs its pinned toolchain itself.
GUEST_LANGUAGES := python js c go
LANGUAGE_PLUGINS := $(addprefix plugins-,$(GUEST_LANGUAGES))

.PHONY: demo test test-services test-after-services lint bench fuzz chaos plugins plugins-rust plugins-demo wasm-target $(LANGUAGE_PLUGINS) build controlplane helm cluster run clean-cache chart image

## Build the example and test plugins: Rust guests, then the other languages.
plugins: plugins-rust $(LANGUAGE_PLUGINS)

plugins-rust: wasm-target
	cd plugins && $(CARGO) build --release --target wasm32-wasip2 --target-dir target

## The Rust target guests build for, added once if missing.
wasm-target:
	@rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2 || rustup target add wasm32-wasip2

## Only the Rust plugins the examples use: all `make demo` needs (no Python, Node or clang).
DEMO_PLUGINS := inrun-plugin-webapp inrun-plugin-labels-hooks
plugins-demo: wasm-target
	cd plugins && $(CARGO) build --release --target wasm32-wasip2 --target-dir target $(addprefix -p ,$(DEMO_PLUGINS))

$(LANGUAGE_PLUGINS): plugins-%:
	@if [ -x plugins/$*/build.sh ]; then plugins/$*/build.sh; fi

## Build the host binary.
build:
	$(CARGO) build -p inrun --bin inrun

## The SDKs as packages in dist/sdk/: the inrun-sdk and inrun-contract crates (and both
## unpacked), the Python wheel and the npm tarball (sdk/package.sh); `inrun plugin new
## --sdk dist/sdk` copies them into a project, as the scaffold tests do.
.PHONY: sdk
sdk:
	CARGO="$(CARGO)" sdk/package.sh

## The profile `make demo` builds the host with: `demo` leaves dependencies unoptimised, so a
## first build takes minutes, not the test build's quarter hour (DEMO_PROFILE=dev reuses
## the test build instead).
DEMO_PROFILE ?= demo
# With DEMO_PROFILE=dev, the features the test build has (its dormant failpoints), so the
# test build's crates are reused rather than built again without them.
DEMO_FEATURES := $(if $(filter dev,$(DEMO_PROFILE)),--features inrun-pass/failpoints)
DEMO_INRUN := $(or $(CARGO_TARGET_DIR),$(CURDIR)/target)/$(if $(filter dev,$(DEMO_PROFILE)),debug,$(DEMO_PROFILE))/inrun

## Build the examples' Rust plugins and render each example CR offline, with no cluster.
demo: plugins-demo
	$(CARGO) build --profile $(DEMO_PROFILE) -p inrun --bin inrun $(DEMO_FEATURES)
	@for ex in $(EXAMPLES); do \
	  echo "=== $$ex: inrun render --blueprint deploy/examples/$$ex/blueprint.yaml --object deploy/examples/$$ex/webapp.yaml"; \
	  (cd deploy/examples/$$ex && $(DEMO_INRUN) render --blueprint blueprint.yaml --object webapp.yaml) || exit 1; \
	done

## Build (or reuse from the cache) kube-apiserver and etcd for end-to-end tests.
controlplane:
	@tests/controlplane/build.sh >/dev/null

## Build (or reuse from the cache) helm, for the chart's tests.
helm:
	@tests/tools/build-helm.sh >/dev/null

## Install the Debian packages the tests need when missing (PostgreSQL, Redis, Prometheus,
## the OCI registry, htpasswd, openssl, Chromium): apt-get as root or through passwordless
## sudo; without either it stops with one message naming them and the command to run.
## A quiet no-op when all are present.
test-services:
	@tests/services/install.sh

## Every test: unit, Wasm integration, and end-to-end against a real kube-apiserver + etcd.
## The test servers come first, before the long builds (even under -j): test-services,
## then the rest in a sub-make.
test: test-services
	@$(MAKE) --no-print-directory test-after-services

test-after-services: plugins sdk controlplane helm
	INRUN_CONTROLPLANE_BIN="$$(tests/controlplane/build.sh)" INRUN_HELM="$$(tests/tools/build-helm.sh)" $(CARGO) test --workspace --no-fail-fast

## cargo fmt --check and clippy with warnings as errors.
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

## Faults while the host works (API server restarted mid-burst, leader SIGKILLed, specs
## edited during reconciles, host SIGKILLed, the previous release and this build handing
## over to each other), the host killed at each failpoint and at 50 random ones, and a
## fault proxy in front of the API server; results go in RELIABILITY.md. The upgrade runs
## build the previous release first (tests/tools/build-previous.sh: the newest v* tag, else
## the commit before HEAD, or PREVIOUS_REF), cached outside the clone.
CHAOS_CRS ?= 1000
PREVIOUS_REF ?=
chaos: controlplane plugins
	INRUN_CONTROLPLANE_BIN="$$(tests/controlplane/build.sh)" INRUN_CHAOS_CRS=$(CHAOS_CRS) INRUN_PREVIOUS_BIN="$$(tests/tools/build-previous.sh $(PREVIOUS_REF))" $(CARGO) test -p inrun --test chaos -- --include-ignored --test-threads 1 --nocapture
	INRUN_CONTROLPLANE_BIN="$$(tests/controlplane/build.sh)" INRUN_FAILPOINT_CRS=200 INRUN_FAILPOINT_KILLS=50 INRUN_FAULT_CRS=100 $(CARGO) test -p inrun --test e2e_failpoints -- --test-threads 1 --nocapture

## Benchmarks; numbers go to BENCHMARKS.md.
# Property tests over every parser a tenant or CR author reaches (Blueprints, templates,
# durations, quantities, reconciler replies, intents), many more cases than `make test`'s smoke.
FUZZ_CASES ?= 20000
fuzz:
	PROPTEST_CASES=$(FUZZ_CASES) $(CARGO) test --release -p inrun-template -p inrun-blueprint -p inrun-contract --test fuzz
	PROPTEST_CASES=$(FUZZ_CASES) $(CARGO) test -p inrun-wasm --lib fuzz

bench: plugins controlplane
	$(CARGO) bench -p inrun --bench wasm
	$(CARGO) bench -p inrun --bench languages
	INRUN_CONTROLPLANE_BIN="$$(tests/controlplane/build.sh)" $(CARGO) bench -p inrun --bench tenancy
	INRUN_CONTROLPLANE_BIN="$$(tests/controlplane/build.sh)" INRUN_BENCH_RUNS=3 $(CARGO) bench -p inrun --bench e2e

## A local control plane, `inrun run` on an example Blueprint, and an example CR (EXAMPLE=declarative|hooks|constructor).
run: plugins controlplane
	$(CARGO) build -p inrun --bin inrun -p inrun-testenv --bin inrun-cluster
	scripts/run-local.sh

## A local control plane in the foreground; prints the KUBECONFIG to export.
cluster: controlplane
	INRUN_CONTROLPLANE_BIN="$$(tests/controlplane/build.sh)" $(CARGO) run -q -p inrun-testenv --bin inrun-cluster

## Regenerate the Helm chart's CRDs and RBAC (deploy/chart/files/generated/) from its
## Blueprint (deploy/chart/files/blueprint.yaml); a test checks they are current.
CHART := deploy/chart
CHART_BLUEPRINT := $(CHART)/files/blueprint.yaml
CHART_GENERATED := $(CHART)/files/generated
chart: build
	@mkdir -p $(CHART_GENERATED)
	{ echo "# Generated by \`inrun generate crds -b $(CHART_BLUEPRINT)\` (\`make chart\`); do not edit."; \
	  $(INRUN) generate crds -b $(CHART_BLUEPRINT); } > $(CHART_GENERATED)/crds.yaml
	{ echo "# Generated by \`inrun generate rbac -b $(CHART_BLUEPRINT) -n inrun-system --leader-elect\` (\`make chart\`); do not edit."; \
	  $(INRUN) generate rbac -b $(CHART_BLUEPRINT) -n inrun-system --leader-elect; } > $(CHART_GENERATED)/rbac.yaml
	{ echo "# Generated by \`inrun generate rbac -b $(CHART_BLUEPRINT) -n inrun-system --leader-elect --blueprint-resources\` (\`make chart\`); do not edit."; \
	  $(INRUN) generate rbac -b $(CHART_BLUEPRINT) -n inrun-system --leader-elect --blueprint-resources; } > $(CHART_GENERATED)/rbac-blueprint-resources.yaml
	{ echo "# Generated by \`inrun generate blueprint-crd\` (\`make chart\`); do not edit."; \
	  $(INRUN) generate blueprint-crd; } > $(CHART_GENERATED)/blueprint-crd.yaml

## The host's container image (multi-stage Dockerfile).
image:
	docker build -t inrun .
