# Tollgate: `make run` starts the gateway, `make test` tests it. `make` lists targets.
.DEFAULT_GOAL := help
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c

PY       := .venv/bin/python
ENVOY    := .tools/bin/envoy
CARGO    ?= cargo
export PATH := $(HOME)/.cargo/bin:$(PATH)

# Settings (override on the command line):
#   DETACH=1       make run starts the stack in the background
#   CONCURRENCY=N  Envoy worker threads for make run / up
#   TG_PROVIDERS=real  make run / up send every provider to its real API over
#                  TLS (keys: OPENAI_API_KEY, ANTHROPIC_API_KEY, ... in the
#                  environment or config/provider-keys.env); default mock
#   PYTEST_ARGS=…  extra pytest arguments, e.g. PYTEST_ARGS='-k anthropic -x'
DETACH       ?=
CONCURRENCY  ?= 2
TG_PROVIDERS ?= mock
PYTEST_ARGS  ?=

NATIVE_BINS := target/release/mock-llm target/release/tollgate-authz
# What build-native compiles. `make test` compiles the binaries with the tests
# and examples in one go: their dev-dependencies change the features of crates
# the binaries share (serde, regex-automata, zerocopy), so building the
# binaries alone first would compile them, and all that depends on those
# crates, twice.
NATIVE_TARGETS := --bins -p mock-llm -p tollgate-authz
test: NATIVE_TARGETS := --bins --tests --examples

.PHONY: help bootstrap build build-native build-wasm run up down stop status rotate-keys \
        test test-unit validate check-config compose-check k8s-config k8s-check dashboard-check test-e2e bench-smoke bench bench-full bench-replica bench-cache bench-peers peers-install lint fmt clean

help: ## List the targets (this text)
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  \033[1m%-14s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)
	@echo; echo "Settings: DETACH=1 (run in background), CONCURRENCY=N (Envoy workers), TG_PROVIDERS=real (real providers), PYTEST_ARGS=..."

bootstrap: ## Install what is missing: Envoy 1.40, Wasm target, Redis, fortio, Python test deps
	@scripts/bootstrap.sh

build: bootstrap build-native build-wasm ## Build the authz service, the mock and the Wasm filter

build-native: ## Build only the native binaries (mock-llm, tollgate-authz), release mode
	$(CARGO) build --release $(NATIVE_TARGETS)

build-wasm: ## Build only the Wasm filter into build/tollgate_filter.wasm (and the bench's null filter)
	@scripts/build-wasm.sh

run: build check-config ## Start Redis, mock-llm, authz-service and Envoy on loopback (foreground; DETACH=1 to detach; TG_PROVIDERS=real for the real providers)
	@exec $(PY) scripts/stack.py $(if $(DETACH),up,run) --concurrency $(CONCURRENCY) --providers $(TG_PROVIDERS)

up: build check-config ## Start the stack in the background and return once it is healthy (TG_PROVIDERS=real for the real providers)
	@$(PY) scripts/stack.py up --concurrency $(CONCURRENCY) --providers $(TG_PROVIDERS)

rotate-keys: ## Apply new provider keys (config/provider-keys.env, or the variables set here) to the running stack: Envoy hot restart, no request lost
	@$(PY) scripts/stack.py rotate

down: ## Stop the stack started by `make up` / `make run DETACH=1`
	@if [ -x $(PY) ]; then $(PY) scripts/stack.py down; else python3 scripts/stack.py down; fi

stop: down ## Same as down

status: ## Show which parts of the detached stack are running
	@$(PY) scripts/stack.py status

test: build test-unit validate check-config compose-check k8s-check dashboard-check test-e2e bench-smoke ## Everything: unit tests, config checks, end-to-end tests
	@echo "make test: all passed"

test-unit: ## Unit and integration tests of every Rust crate (cargo test); the scanner's tests in V8 too
	$(CARGO) test --release
	@if command -v node >/dev/null; then \
	  tests=$$($(CARGO) test -q -p tollgate-core --lib --target wasm32-wasip1 --no-run --message-format=json \
	    | sed -n 's/.*"executable":"\([^"]*\.wasm\)".*/\1/p' | tail -1) && test -n "$$tests" && \
	  node --no-warnings filters/tools/wasm-test/run.mjs "$$tests" scan --test-threads=1; \
	else echo "test-unit: node not found: the scanner's Wasm-only code was not tested in V8"; fi

validate: build-wasm ## Validate envoy.yaml with `envoy --mode validate` and the built Wasm file
	@tmp=$$(mktemp -d) && printf validate-only-usage-token > $$tmp/token && \
	sed "s|filename: /etc/tollgate/usage/token|filename: $$tmp/token|" envoy.yaml > $$tmp/envoy.yaml && \
	(set -a && . ./config/provider-keys.env && set +a && \
	 $(ENVOY) --mode validate -c $$tmp/envoy.yaml --disable-hot-restart --log-level error); rc=$$?; rm -rf $$tmp; \
	[ $$rc = 0 ] && echo "validate: envoy.yaml OK"

check-config: ## Cross-check the plugin config against envoy.yaml's clusters, config/ports.env and config/mock-llm.yaml
	@$(PY) scripts/check_config.py

compose-check: ## Check docker-compose.yml and the Dockerfiles statically (no Docker engine here)
	@$(PY) scripts/compose_check.py

k8s-config: ## Regenerate deploy/k8s/*/envoy.yaml from envoy.yaml and deploy/k8s/providers.yaml
	@$(PY) deploy/k8s/render_envoy.py

k8s-check: bootstrap build-wasm ## Check the Kubernetes manifests offline (fresh configs, envoy validate, kustomize, schemas)
	@$(PY) deploy/k8s/check.py

dashboard-check: bootstrap ## Check the Grafana dashboard and Prometheus configs offline (promtool)
	@$(PY) deploy/grafana/check.py

test-e2e: build ## End-to-end tests: real Envoy, Redis, Wasm filter, authz-service and mock, official openai client
	MOCK_LLM_BIN=$${MOCK_LLM_BIN:-$(CURDIR)/target/release/mock-llm} $(PY) -m pytest tests $(PYTEST_ARGS)

bench-smoke: build ## Every benchmark scenario briefly (about a minute): keeps the harness working
	$(PY) bench/bench.py smoke --out .run/bench-smoke

bench: build ## Benchmarks against same-run baselines (a few minutes) → bench/results/<time>/
	$(PY) bench/bench.py quick

bench-full: build ## Longer benchmarks → bench/results/<time>/
	$(PY) bench/bench.py full

bench-cache: build ## Prompt-cache economics: 200 agent sessions x 10 turns through two gateways, affine vs random vs one key (a few minutes)
	$(PY) bench/cache.py $(BENCH_CACHE_ARGS)

bench-replica: build ## Bifrost replica only, short (1,000 / 3,000 rps), HTTP/1.1 vs HTTP/2 to the provider
	$(PY) bench/bench.py replica

bench-peers: build peers-install ## Tollgate beside LiteLLM, Portkey and (where installed) aigw: same box, same mock, same load (about 45 min) → bench/results/<time>-peers/
	$(PY) bench/peers.py full

peers-install: ## Install the peer gateways of bench-peers, pinned, into .tools/peers (LiteLLM with prisma-client-py, Portkey) and Debian's Postgres
	@bench/install_peers.sh

lint: ## clippy with warnings as errors, rustfmt --check, and no circle between modules
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) fmt --all -- --check
	@python3 scripts/check_floors.py

fmt: ## Format the Rust code
	$(CARGO) fmt --all

clean: down ## Remove build outputs and run state (keeps .venv and .tools)
	$(CARGO) clean
	rm -rf build .run
