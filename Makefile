# Task runner. `make demo` runs the main job, `make test` runs every check CI runs.
# Both set up what they need: a virtualenv in .venv and the testbed binaries in the cache
# (~/.cache/gpustack-chain/testbed, or $GPUSTACK_TESTBED_CACHE).

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: all venv testbed demo test unit e2e lint clean

all: test

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	rm -f $(VENV)/.installed-* && touch $@

venv: $(STAMP)

testbed: venv
	$(PY) -m testbed build

demo: testbed
	$(PY) -m testbed demo

lint: venv
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

unit: venv
	$(PY) -m pytest -m "not e2e" tests || [ $$? -eq 5 ]

e2e: testbed
	$(PY) -m pytest -m e2e tests || [ $$? -eq 5 ]

# The test command: lint and types, then both tiers (unit, and e2e on the testbed).
# pytest exits 5 when it collects nothing; that is not a failure of the suite.
test: lint testbed
	$(PY) -m pytest tests || [ $$? -eq 5 ]

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
