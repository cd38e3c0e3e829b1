# devicehost — the two set-up commands are `make demo` and `make test`; each needs only
# python3 (with venv and pip) and installs everything else into .venv from uv.lock.
# The sync is --inexact: a driver you installed beside the locked ones
# (`uv pip install -e ../devicehost-acme`) stays installed; targets then run with --no-sync.

SHELL := /bin/bash
TOOLS := .tools
UV := $(shell command -v uv 2>/dev/null || echo $(TOOLS)/bin/uv)
RUN := $(UV) run --frozen --no-sync

.PHONY: setup demo test lint format proto bench bench-smoke soak gpu-check e2e e2e-build bench-e2e clean

$(TOOLS)/bin/uv:
	python3 -m venv $(TOOLS)
	$(TOOLS)/bin/pip install --quiet uv

setup: $(if $(findstring $(TOOLS),$(UV)),$(TOOLS)/bin/uv)
	$(UV) sync --frozen --inexact --quiet

demo: setup
	$(RUN) devicehost demo

test: setup lint
	UV=$(abspath $(UV)) $(RUN) pytest -q

lint: setup
	$(RUN) ruff check .
	$(RUN) ruff format --check .
	$(RUN) mypy
	$(RUN) lint-imports

format: setup
	$(RUN) ruff check --fix .
	$(RUN) ruff format .

proto: setup
	$(RUN) python proto/generate.py

bench: setup
	$(RUN) python -m bench

# Every benchmark once with few runs, results to a scratch directory: fails when one breaks.
bench-smoke: setup
	$(RUN) python -m bench --smoke

soak: setup
	$(RUN) pytest -q -m slow --run-slow tests

# The real-cluster tier (docs/e2e.md): builds Kubernetes, containerd, runc, etcd and Jaeger
# from the Go module proxy once (cached by version outside the repository), the images
# without Docker, then a three-node cluster in namespaces of its own. Needs root.
# E2E_NODES=1 runs the DGX node alone, for quick iteration.
E2E_CACHE ?= $(or $(DEVICEHOST_E2E_CACHE),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/devicehost-e2e)
E2E_PYTEST = DEVICEHOST_E2E_CACHE=$(E2E_CACHE) DEVICEHOST_E2E_IMAGES=$(E2E_CACHE)/images \
	DEVICEHOST_E2E_NODES=$(E2E_NODES) $(RUN) pytest -q -p no:cacheprovider -rsx e2e/tests

e2e-build: setup
	DEVICEHOST_E2E_CACHE=$(E2E_CACHE) e2e/build.sh
	DEVICEHOST_E2E_CACHE=$(E2E_CACHE) UV=$(abspath $(UV)) e2e/images.sh $(E2E_CACHE)/images

e2e: e2e-build
	$(E2E_PYTEST) -m "not bench" $(E2E_ARGS)

# Pod-start overhead of a devicehost resource on the same cluster: bench/results/e2e_pod_start.json
bench-e2e: export DEVICEHOST_E2E_BENCH := 1
bench-e2e: e2e-build
	$(E2E_PYTEST) -m bench $(E2E_ARGS)

gpu-check: setup
	$(RUN) pytest -q -m gpu --run-gpu drivers/nvidia

clean:
	rm -rf .venv $(TOOLS) dist build
