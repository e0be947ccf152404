# crewlet — every target installs what it needs first; nothing else is required on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CREWLET_URL ?= http://127.0.0.1:8080
export CREWLET_URL

.DEFAULT_GOAL := help

.PHONY: help
help: ## List the targets
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -U pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	@touch $(STAMP)

.PHONY: install
install: $(STAMP) ## Create .venv and install crewlet with its dev tools (idempotent)

.PHONY: run
run: install ## Start one node with the example company on the embedded broker, and show it working
	@$(BIN)/python -m crewlet.demo

.PHONY: test
test: install ## Run the whole test suite (real nats-server, real node processes; two workers, a module each)
	$(BIN)/lint-imports --no-cache
	$(BIN)/python -m pytest -q -n 2 --dist loadfile -p no:cacheprovider --durations=30 --ignore=tests/e2e --ignore=tests/chaos $(ARGS)

E2E_STAMP := $(VENV)/.installed-e2e
E2E_DEBS := chromium prometheus

$(E2E_STAMP): pyproject.toml $(STAMP)
	$(BIN)/python -m pip install -q -e '.[dev,e2e]'
	@touch $(E2E_STAMP)

.PHONY: e2e-deps
e2e-deps: $(E2E_STAMP) ## Debian's chromium and prometheus (apt-get as root when missing) and the e2e Python packages
	@missing=""; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	{ command -v prometheus >/dev/null && command -v promtool >/dev/null; } || missing="$$missing prometheus"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing Debian packages:$$missing"; \
	    export DEBIAN_FRONTEND=noninteractive; \
	    apt-get install -y -q $$missing >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q $$missing >/dev/null; } \
	      || { echo "make e2e needs the Debian packages:$$missing (apt-get install failed)"; exit 1; }; \
	  else \
	    echo "make e2e needs the Debian packages:$$missing — install them as root: apt-get install$$missing"; exit 1; \
	  fi; \
	fi

.PHONY: e2e
e2e: e2e-deps ## Checks that need Debian packages: a real Prometheus and a headless Chromium against real fleets
	$(BIN)/python -m pytest -q -n 2 --dist loadfile -p no:cacheprovider --durations=20 tests/e2e $(ARGS)

COMPOSE_STAMP := $(VENV)/.installed-compose
COMPOSE_DEBS := podman runc mmdebstrap

$(COMPOSE_STAMP): pyproject.toml $(STAMP)
	$(BIN)/python -m pip install -q -e '.[dev,compose]'
	@touch $(COMPOSE_STAMP)

.PHONY: wheelhouse
wheelhouse: install ## Build crewlet's wheel and every dependency's into wheelhouse/ (the Dockerfile installs from it, no network)
	@rm -f wheelhouse/*.whl
	@echo "pip wheel . -w wheelhouse"  # SOURCE_DATE_EPOCH: one commit, one wheel (image layers reused)
	@set -o pipefail; SOURCE_DATE_EPOCH=$$(git log -1 --format=%ct 2>/dev/null || echo 315532800) \
	  $(BIN)/python -m pip wheel -q . -w wheelhouse 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }
	@ls wheelhouse/*.whl | wc -l | xargs echo "wheels in wheelhouse/:"

.PHONY: compose-deps
compose-deps: $(COMPOSE_STAMP) ## Debian's podman, runc and mmdebstrap (apt-get as root when missing) and podman-compose
	@missing=""; for d in $(COMPOSE_DEBS); do command -v $$d >/dev/null || missing="$$missing $$d"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing Debian packages:$$missing"; \
	    export DEBIAN_FRONTEND=noninteractive; \
	    apt-get install -y -q $$missing >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q $$missing >/dev/null; } \
	      || { echo "make compose-check needs the Debian packages:$$missing (apt-get install failed)"; exit 1; }; \
	  else \
	    echo "make compose-check needs the Debian packages:$$missing — install them as root: apt-get install$$missing"; exit 1; \
	  fi; \
	fi

.PHONY: compose-check
compose-check: compose-deps wheelhouse ## compose.yaml in real containers (podman): images built here, the main job, a drain and a kill -9 (tests/compose/check.py)
	$(BIN)/python -m tests.compose.check

.PHONY: chaos
chaos: install ## Seeded fault run on a real fleet (3 members, 3 nodes, a satellite) with invariants (ARGS="--rounds N --seed S --minutes M"; default 3 rounds)
	@ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing the Debian package libfaketime (the clock-skew faults)"; \
	    export DEBIAN_FRONTEND=noninteractive; \
	    apt-get install -y -q libfaketime >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q libfaketime >/dev/null; } \
	      || echo "apt-get install libfaketime failed: the clock-skew faults are left out"; \
	  else \
	    echo "libfaketime is missing (as root: apt-get install libfaketime): the clock-skew faults are left out"; \
	  fi; \
	}
	$(BIN)/python -m chaos $(or $(ARGS),--rounds 3)

.PHONY: chaos-check
chaos-check: install ## The chaos runner's tests (a deliberately broken build must be reported), then the 3-round run (CI)
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/chaos
	$(MAKE) chaos ARGS=

.PHONY: bench-quick
bench-quick: install ## Every benchmark figure at its smallest size, no timing asserted (CI runs it after make test)
	$(BIN)/python -m bench --quick --quiet

.PHONY: lint
lint: install ## ruff + mypy + import contracts
	$(BIN)/ruff check shared services crewlet tests bench chaos
	$(BIN)/ruff format --check shared services crewlet tests bench chaos
	$(BIN)/mypy
	$(BIN)/mypy bench
	$(BIN)/mypy chaos
	$(BIN)/lint-imports --no-cache

.PHONY: bench
bench: install ## Benchmarks: every figure beside its floor measured in the same run (ARGS=--quick: smallest sizes)
	$(BIN)/python -m bench $(ARGS)

.PHONY: format
format: install ## Format the code
	$(BIN)/ruff format shared services crewlet tests bench chaos
	$(BIN)/ruff check --fix shared services crewlet tests bench chaos

.PHONY: typecheck
typecheck: install ## mypy --strict over shared, services, crewlet
	$(BIN)/mypy

.PHONY: fleet-status
fleet-status: install ## Print the fleet as the node at CREWLET_URL sees it
	@$(BIN)/crewlet fleet status --url "$(CREWLET_URL)"

.PHONY: all
all: lint test ## lint + test

.PHONY: fleet-local
fleet-local: install ## Three clustered nodes on this machine (API ports 8081-8083); Ctrl-C drains them
	@$(BIN)/python -m crewlet.fleet_local
