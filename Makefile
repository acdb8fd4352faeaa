# Task runner. `make demo` runs the main job, `make test` runs every check CI runs.
# Both set up what they need: a virtualenv in .venv and the testbed binaries in the cache
# (~/.cache/gpustack-chain/testbed, or $GPUSTACK_TESTBED_CACHE).

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml constraints.txt | cksum | cut -d' ' -f1)
# `make image`: the one image every component runs, from the Containerfile (podman or docker).
CONTAINER_TOOL ?= $(shell command -v podman >/dev/null 2>&1 && echo podman || echo docker)
IMAGE ?= ghcr.io/gpustack-chain/gpustack-chain:0.1.0
BASE_IMAGE ?= docker.io/library/python:3.11-slim-bookworm

.PHONY: all venv testbed image push demo demo-fleet test unit e2e fuzz bench-fleet churn-real-nodes upgrade-real-nodes lint clean

all: test

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e '.[dev]'
	rm -f $(VENV)/.installed-* && touch $@

venv: $(STAMP)

testbed: venv
	$(PY) -m testbed build

image:
	$(CONTAINER_TOOL) build --build-arg BASE_IMAGE=$(BASE_IMAGE) -f Containerfile -t $(IMAGE) .

# `make push`: IMAGE to the registry its name says (`make image push IMAGE=<registry>/<name>:<tag>`,
# docs/install.md, "Four things a stock cluster decides"); PUSH_TO sends it elsewhere (a destination `podman push` takes), PUSH_FLAGS
# are the tool's own (`--tls-verify=false` for a registry without TLS).
PUSH_TO ?=
PUSH_FLAGS ?=
push:
	$(CONTAINER_TOOL) push $(PUSH_FLAGS) $(IMAGE) $(PUSH_TO)

demo: testbed
	$(PY) -m testbed demo

# A fleet of three emulated clusters on this machine (docs/fleet.md): a Job dispatched by
# MultiKueue from the manager to a member, its status mirrored back.
demo-fleet: testbed
	$(PY) -m testbed demo-fleet

lint: venv
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy
	$(VENV)/bin/lint-imports --no-cache

unit: venv
	$(PY) -m pytest -m "not e2e" tests || [ $$? -eq 5 ]

e2e: testbed
	$(PY) -m pytest -m e2e tests || [ $$? -eq 5 ]

# The long fuzz profile of every hook and webhook route (make test runs the fast one).
fuzz: venv
	GPUSTACK_FUZZ=long $(PY) -m pytest -q -p no:cacheprovider tests/unit/hooks/test_fuzz.py

# The fleet benchmark's long profile (make test runs the short one): the worker gateway's pass at
# 10 members x 1,000 nodes against json.loads, then the lag on one emulated API server, then with
# every member on one of its own (docs/benchmarks.md, "Fleet").
bench-fleet: testbed
	$(PY) -m benchmarks.fleet
	flock /tmp/gpustack-testbed.lock $(PY) -m benchmarks.fleet --lag --lag-members 10
	flock /tmp/gpustack-testbed.lock $(PY) -m benchmarks.fleet --lag --lag-members 10 --lag-servers

# The real-node churn's long profile (make test runs the short one, 48): 400 Pod lifecycles of
# mixed modes through the real agents on the testbed's real nodes, with their own cluster; the
# agents' RSS, the journal and what is left printed (docs/benchmarks.md, "Churn").
churn-real-nodes: testbed
	GPUSTACK_REAL_CHURN=long flock /tmp/gpustack-testbed.lock \
		$(PY) -m pytest -q -s -p no:cacheprovider tests/e2e/test_real_nodes_churn.py

# The upgrade test (make test leaves it out, it is long: README, "Test suites and their cost"):
# release 0.1.0 installed on the real nodes with Pods holding cards, then the current release
# applied over it and every Deployment rolled (tests/e2e/test_real_nodes_upgrade.py). Marked
# `upgrade`, which pytest deselects unless given --upgrade-real-nodes; with its own cluster.
upgrade-real-nodes: testbed
	flock /tmp/gpustack-testbed.lock $(PY) -m pytest -q -s -p no:cacheprovider \
		--upgrade-real-nodes tests/e2e/test_real_nodes_upgrade.py

# The test command: lint and types, then both tiers (unit, and e2e on the testbed), through
# testbed/suite.py: two pytest processes at once, the unit tier, the fleet bed and the emulated
# testbed in one and the real nodes in the other (README, "Test suites and their cost"). Arguments
# for pytest go in PYTEST_ADDOPTS. pytest's 5 (nothing collected) is not a failure there.
test: lint testbed
	$(PY) -m testbed.suite

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
