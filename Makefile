# kubetrain: the README's commands. `make setup` is idempotent: a second run with nothing
# changed returns at once (a stamp file records the last complete install).
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.kubetrain-setup
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
PYTEST_ARGS ?=
LINT_PATHS := $(wildcard src tests bench components pipelines)

.PHONY: setup demo test test-fast lint typecheck compile golden bench clean controlplane cluster-up cluster-down e2e

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	@command -v mpiexec >/dev/null && [ -e /usr/include/x86_64-linux-gnu/openmpi/mpi.h -o -e /usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h ] \
	  || { echo "setup: installing Open MPI from Debian"; \
	       $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq openmpi-bin libopenmpi-dev >/dev/null; }
	@[ -x $(PY) ] || python3 -m venv $(VENV)
	# torch first, the exact CPU build that is already on disk; anything else pulls CUDA wheels.
	$(PIP) install -q torch==2.13.0
	# Chainer 7.8.1 builds with pkg_resources (setuptools<81) and runs only on numpy<2.
	$(PIP) install -q "numpy>=1.24,<2" "setuptools>=65,<81" wheel
	$(PIP) install -q --no-build-isolation chainer==7.8.1
	$(PIP) install -q -e '.[torch,chainer,ps,dev]'
	SETUPTOOLS_USE_DISTUTILS=stdlib $(PY) -c "import torch, chainer, chainermn, mpi4py.MPI, grpc, kfp, kubetrain"
	@touch $(STAMP)
	@echo "setup: done ($(VENV))"

# The main job on this machine, no cluster: the compare_frameworks pipeline on builtin digits.
demo: setup
	$(VENV)/bin/kubetrain demo

test: setup
	$(PY) -m ruff check $(LINT_PATHS)
	$(PY) -m mypy
	$(PY) -m pytest --ignore=tests/cluster $(PYTEST_ARGS)

test-fast: setup
	$(PY) -m pytest -m "not slow" --ignore=tests/cluster $(PYTEST_ARGS)

lint: setup
	$(PY) -m ruff check $(LINT_PATHS)
	$(PY) -m ruff format --check $(LINT_PATHS)
	$(PY) -m mypy

compile: setup
	$(VENV)/bin/kubetrain compile

# Refresh every golden file (rendered manifests and compiled pipelines) in one command.
golden: setup
	KUBETRAIN_UPDATE_GOLDEN=1 $(PY) -m pytest tests/unit/test_golden_manifests.py -q
	$(VENV)/bin/kubetrain compile

bench: setup
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) build dist .pytest_cache .mypy_cache .ruff_cache

# The real control plane (tests/cluster): binaries built from the Go module proxy, cached by their
# pins under ~/.cache/kubetrain/controlplane; kwokctl runs them as host processes.
controlplane:
	bash tools/controlplane/build.sh

cluster-up: setup
	$(PY) -m tests.cluster.controlplane up

cluster-down: setup
	$(PY) -m tests.cluster.controlplane down

# The binaries are built first when missing (a cold machine: tens of minutes, see the README).
e2e: setup controlplane
	KUBETRAIN_E2E=1 $(PY) -m pytest tests/cluster $(PYTEST_ARGS)
