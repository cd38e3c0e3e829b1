# devicehost — the two set-up commands are `make demo` and `make test`; each needs only
# python3 (with venv and pip) and installs everything else into .venv from uv.lock.
# The sync is --inexact: a driver you installed beside the locked ones
# (`uv pip install -e ../devicehost-acme`) stays installed; targets then run with --no-sync.

SHELL := /bin/bash
TOOLS := .tools
UV := $(shell command -v uv 2>/dev/null || echo $(TOOLS)/bin/uv)
RUN := $(UV) run --frozen --no-sync

.PHONY: setup demo test lint format proto bench soak gpu-check clean

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

format: setup
	$(RUN) ruff check --fix .
	$(RUN) ruff format .

proto: setup
	$(RUN) python proto/generate.py

bench: setup
	$(RUN) python -m bench

soak: setup
	$(RUN) pytest -q -m slow --run-slow tests

gpu-check: setup
	$(RUN) pytest -q -m gpu --run-gpu drivers/nvidia

clean:
	rm -rf .venv $(TOOLS) dist build
