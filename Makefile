# kubetrain: the README's commands. `make setup` is idempotent: a second run with nothing
# changed returns at once (a stamp file records the last complete install).
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
UV_PIN := uv==0.13.9
# --python: this venv, whatever VIRTUAL_ENV says. uv reads neither pip.conf nor PIP_*: the TLS
# proxy's CA comes from SSL_CERT_FILE, or the system store (--native-tls).
UV_INSTALL := $(PY) -m uv pip install --quiet --native-tls --python $(PY)
STAMP := $(VENV)/.kubetrain-setup
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# Open MPI for ChainerMN and mpi4py (the MPI tests and the local backend's MPIJob).
SETUP_PACKAGES := openmpi-bin libopenmpi-dev
PYTEST_ARGS ?=
# The unit and integration tests on two workers, a test file per worker at a time (its module
# fixtures, such as a trained model or a started server, are then built once). PYTEST_XDIST= runs them in one.
PYTEST_XDIST ?= -n 2 --dist loadfile
# CI's log names the slowest tests, so where the unit tier's time goes needs no second run.
PYTEST_DURATIONS := --durations=25
LINT_PATHS := $(wildcard src tests tools bench components pipelines)


.PHONY: debian-packages ui-packages setup demo test test-fast lint typecheck compile golden bench clean controlplane kfp-backend node-packages cluster-up cluster-down e2e ui-screenshots lock

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile images/constraints.txt
	@bash tools/ci/apt_install_missing.sh $(SETUP_PACKAGES)
	@[ -x $(PY) ] || python3 -m venv $(VENV)
	# uv installs: parallel downloads, and a warm cache is linked into the venv rather than
	# unpacked again (torch with its CUDA wheels is about 3 GB; pip took 139 s warm, docs/testing.md).
	$(PIP) install -q $(UV_PIN)
	# torch (the PyPI build: its CUDA libraries go unused on CPUs), and what Chainer 7.8.1 builds
	# with (pkg_resources: setuptools<81) and runs on (numpy<2), pinned like the rest.
	$(UV_INSTALL) -c images/constraints.txt torch numpy setuptools wheel
	$(UV_INSTALL) -c images/constraints.txt --no-build-isolation chainer
	echo "import os; os.environ.setdefault('SETUPTOOLS_USE_DISTUTILS', 'stdlib')" > "$$($(PY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/00-kubetrain-stdlib-distutils.pth"
	# The versions the images install (images/constraints.txt), so kfp here is the kfp that
	# compiles the YAML and runs in the launcher image.
	$(UV_INSTALL) -c images/constraints.txt -e '.[torch,chainer,ps,dev]'
	# Chainer imported as kubetrain imports it (its pkg_resources and distutils warnings silenced).
	SETUPTOOLS_USE_DISTUTILS=stdlib $(PY) -c "import torch, kubetrain.train.chainer_models, chainermn, mpi4py.MPI, grpc, kfp, kubetrain"
	@touch $(STAMP)
	@echo "setup: done ($(VENV))"

# The main job on this machine, no cluster: the compare_frameworks pipeline on builtin digits.
demo: setup
	$(VENV)/bin/kubetrain demo

# Each step prints one `phase NAME: start … end … N s` line (.ci/phase.sh), as CI reads them.
# go-tests: the Go tests of our own Go programs (tools/hdrproxy; under a second warm).
test: setup
	@source .ci/phase.sh; \
	phase lint $(PY) -m ruff check $(LINT_PATHS); \
	phase types $(PY) -m mypy; \
	phase go-tests bash tools/hdrproxy/build.sh --test; \
	phase unit-and-integration-tests $(PY) -m pytest --ignore=tests/cluster $(PYTEST_XDIST) $(PYTEST_DURATIONS) $(PYTEST_ARGS)

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

# Re-pin what the images install (and setup uses) after a dependency change in pyproject.toml.
lock: setup
	$(PIP) install -q $(UV_PIN)
	$(PY) -m uv pip compile pyproject.toml images/lock.in --extra s3 --extra gcs --extra torch --extra chainer \
	  --extra ps --python $(PY) --python-version 3.11 --python-platform x86_64-manylinux_2_28 \
	  --no-build-isolation-package chainer --annotation-style line --custom-compile-command "make lock" \
	  -o images/constraints.txt

bench: setup
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) build dist .pytest_cache .mypy_cache .ruff_cache

# The real control plane (tests/cluster): binaries built from the Go module proxy, cached by their
# pins under ~/.cache/kubetrain/controlplane; kwokctl runs them as host processes.
# KUBETRAIN_REAL_NODE=0 leaves the real node out (kwok nodes only: no root, no Debian packages).
REAL_NODE ?= $(if $(filter 0,$(KUBETRAIN_REAL_NODE)),,node)
NODE_PACKAGES := runc buildah mmdebstrap iptables nftables
UI_PACKAGES := chromium  # node and npm (20.19+) come with the machine: Debian 12 ships node 18

controlplane: $(if $(REAL_NODE),node-packages)
	bash tools/controlplane/build.sh $(REAL_NODE)

# The real node runs containers with Debian's runc, builds images with buildah on an mmdebstrap
# base, and its kubelet and kube-proxy program iptables (nft underneath).
node-packages:
	@bash tools/ci/apt_install_missing.sh --no-recommends $(NODE_PACKAGES)

# Both tiers' Debian packages up front (.ci/run), so nothing later waits on dpkg's lock.
debian-packages:
	@bash tools/ci/apt_install_missing.sh $(SETUP_PACKAGES)
	@bash tools/ci/apt_install_missing.sh --no-recommends $(NODE_PACKAGES)
	@bash tools/ci/apt_install_missing.sh $(UI_PACKAGES)

# The Kubeflow Pipelines 2.17 backend on the real node (tools/kfp/build.sh: KFP and Argo from their
# pinned source archives, cached under ~/.cache/kubetrain/kfp). KUBETRAIN_KFP=0 leaves it out.
KFP := $(if $(REAL_NODE),$(if $(filter 0,$(KUBETRAIN_KFP)),,kfp))

# With it, SeaweedFS (its S3 store, tools/seaweedfs), KFP's web UI (tools/ui, npm; its browser
# tests drive Debian's chromium) and the multi-user tier's identity front (tools/identity:
# oauth2-proxy and an OIDC provider) and pod-facing proxy (tools/hdrproxy), each cached by its pins.
kfp-backend: ui-packages
	bash tools/kfp/build.sh
	bash tools/seaweedfs/build.sh
	bash tools/ui/build.sh
	bash tools/identity/build.sh
	bash tools/hdrproxy/build.sh

ui-packages:
	@bash tools/ci/apt_install_missing.sh $(UI_PACKAGES)

cluster-up: setup controlplane $(if $(KFP),kfp-backend)
	$(PY) -m tools.cluster up

cluster-down: setup
	$(PY) -m tools.cluster down

# The binaries are built first when missing (a cold machine: tens of minutes, see docs/testing.md).
# The backend's compiler check (tests/unit/test_kfp_backend_compiler.py) runs here always: the
# compiler is built even when the backend is left out.
e2e: setup controlplane $(if $(KFP),kfp-backend)
	bash tools/kfp/build.sh compiler >/dev/null
	PYTEST_ARGS="$(PYTEST_ARGS)" $(PY) -m tools.ci.e2e

# The README's and docs' UI pictures (docs/images/ui/), remade by the browser scenarios on the e2e cluster.
ui-screenshots: setup controlplane $(if $(KFP),kfp-backend)
	KUBETRAIN_E2E=1 KUBETRAIN_UPDATE_GOLDEN=1 $(PY) -m pytest tests/cluster/test_kfp_ui.py $(PYTEST_ARGS)
