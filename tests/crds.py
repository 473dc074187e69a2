"""The upstream CRDs the tests validate manifests against, from the pinned operator modules.

`tools/crds/go.mod` pins the operators (training-operator, mpi-operator, JobSet, Trainer v2) and
`tools/crds/go.sum` their checksums. `go mod download` fetches them into the Go module cache
(verified against go.sum; nothing is built) and :func:`crd_dir` lays the CRD files out under
`~/.cache/kubetrain/crds/<hash of the pins>/` as `kubetrain.manifests.schema.CRD_FILES` expects.
`KUBETRAIN_CRD_DIR` overrides all of this. A fresh clone with Go on the PATH needs nothing beside
it; `../shared/crds`, where present, is only a cross-check (tests/unit/test_crd_sources.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
PINS = REPO_ROOT / "tools" / "crds"
# Where each CRD lies inside its module, by the layout CRD_FILES uses.
SOURCES = {
    "training-operator-v1/kubeflow.org_pytorchjobs.yaml": (
        "github.com/kubeflow/training-operator",
        "manifests/base/crds/kubeflow.org_pytorchjobs.yaml",
    ),
    "mpi-operator-v2beta1/kubeflow.org_mpijobs.yaml": (
        "github.com/kubeflow/mpi-operator",
        "manifests/base/kubeflow.org_mpijobs.yaml",
    ),
    "jobset/jobset.x-k8s.io_jobsets.yaml": (
        "sigs.k8s.io/jobset",
        "config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml",
    ),
    "trainer-v2/trainer.kubeflow.org_trainjobs.yaml": (
        "github.com/kubeflow/trainer/v2",
        "manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml",
    ),
    "trainer-v2/trainer.kubeflow.org_clustertrainingruntimes.yaml": (
        "github.com/kubeflow/trainer/v2",
        "manifests/base/crds/trainer.kubeflow.org_clustertrainingruntimes.yaml",
    ),
    # A built-in kind's schema, as the API server of the real cluster's version serves it.
    "kubernetes-v1.36/apis__networking.k8s.io__v1_openapi.json": (
        "k8s.io/kubernetes",
        "api/openapi-spec/v3/apis__networking.k8s.io__v1_openapi.json",
    ),
    # Not used by the schema checks, but the Trainer controller watches it (tests/cluster installs all).
    "trainer-v2/trainer.kubeflow.org_trainingruntimes.yaml": (
        "github.com/kubeflow/trainer/v2",
        "manifests/base/crds/trainer.kubeflow.org_trainingruntimes.yaml",
    ),
}

# The CustomResourceDefinitions among them, the objects a cluster installs; the rest are built-in
# kinds' OpenAPI documents, schemas to validate against and nothing to apply.
CRDS = tuple(sorted(rel for rel in SOURCES if rel.endswith(".yaml")))


class CRDsUnavailableError(RuntimeError):
    """The pinned modules could not be fetched (no Go, no module proxy)."""


def _pins_hash() -> str:
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum"):
        digest.update((PINS / name).read_bytes())
    # The layout too: a CRD added to SOURCES makes a new directory, never a half-filled old one.
    digest.update(json.dumps(SOURCES, sort_keys=True).encode())
    return digest.hexdigest()[:16]


def _module_dirs() -> dict[str, Path]:
    go = shutil.which("go") or ("/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None)
    if go is None:
        raise CRDsUnavailableError(
            "`go` is not on the PATH: install Go 1.26, or set KUBETRAIN_CRD_DIR to a CRD directory"
        )
    modules = sorted({module for module, _ in SOURCES.values()})
    env = {**os.environ, "GOFLAGS": "-mod=readonly", "GOTOOLCHAIN": "local"}
    done = subprocess.run(
        [go, "mod", "download", "-json", *modules], cwd=PINS, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise CRDsUnavailableError(f"go mod download failed in {PINS}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    # `go mod download -json` prints one JSON object per module, back to back.
    decoder = json.JSONDecoder()
    text, dirs, at = done.stdout.strip(), {}, 0
    while at < len(text):
        item, end = decoder.raw_decode(text, at)
        at = end + (len(text[end:]) - len(text[end:].lstrip()))
        if item.get("Error"):
            raise CRDsUnavailableError(f"{item['Path']}: {item['Error']}")
        dirs[str(item["Path"])] = Path(item["Dir"])
    return dirs


def crd_dir() -> Path:
    """A directory laid out like ../shared/crds with the pinned CRDs (built once per pin set)."""
    override = os.environ.get("KUBETRAIN_CRD_DIR")
    if override:
        return Path(override)
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kubetrain" / "crds" / _pins_hash()
    if all((cache / rel).is_file() for rel in SOURCES):
        return cache
    dirs = _module_dirs()
    staging = cache.with_name(cache.name + f".tmp-{os.getpid()}")
    for rel, (module, path) in SOURCES.items():
        target = staging / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(dirs[module] / path, target)
    if cache.exists():
        shutil.rmtree(staging)  # another session built it meanwhile
    else:
        staging.rename(cache)
    return cache
