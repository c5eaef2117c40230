# The one task runner: README, CI and developers all call these targets.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# One venv, two installs: the demo needs the package and its dependencies only; tests, lint,
# type checks and benchmarks add the dev extras (pytest, the harness SDKs, matplotlib...).
DEMO_STAMP := $(VENV)/.installed-demo
DEV_STAMP := $(VENV)/.installed-dev
# Named in the message when the Python is too old: the command to run again with PY=.
GOAL := $(or $(firstword $(MAKECMDGOALS)),demo)

.PHONY: demo test lint typecheck bench xtdb-start clean

# A venv whose making failed (a Python without ensurepip) would be kept for its bin/python: none is left.
$(BIN)/python:
	@scripts/check-python.sh '$(PY)' $(GOAL)
	$(PY) -m venv $(VENV) || { rm -rf $(VENV); exit 1; }
	$(BIN)/python -m pip install -q --upgrade pip

$(DEMO_STAMP): pyproject.toml | $(BIN)/python
	@scripts/check-python.sh --venv $(BIN)/python $(GOAL)
	$(BIN)/python -m pip install -q -e .
	touch $@

$(DEV_STAMP): pyproject.toml | $(BIN)/python
	@scripts/check-python.sh --venv $(BIN)/python $(GOAL)
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $@

## demo: replay the bundled coding session on the embedded store (the main job)
demo: $(DEMO_STAMP)
	$(BIN)/ctxos demo

## test: the whole suite, including the conformance suite against a real XTDB node
test: $(DEV_STAMP)
	scripts/test.sh

lint: $(DEV_STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

typecheck: $(DEV_STAMP)
	$(BIN)/mypy

bench: $(DEV_STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
