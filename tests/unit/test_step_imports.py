"""A KFP step's process imports only what the step uses: each heavy library costs the launcher pod
start-up time (bench/step_imports.py measures it), so the modules a component body imports first
must not pull in numerical, plotting or object-store libraries they have no use for."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# Libraries no step needs at import time: numpy for reading shards or writing a download, matplotlib
# (no step draws with it now: the reports' charts are kubetrain's SVG), the object-store filesystems
# for s3:// and gs:// sources only.
HEAVY = ("numpy", "matplotlib", "sklearn", "scipy", "torch", "chainer", "grpc", "fsspec", "s3fs", "gcsfs")

STEP_MODULES = {
    # Every training component's body: `from kubetrain.kfp_runtime.frameworks import train_...`.
    "kubetrain.kfp_runtime.frameworks": HEAVY,
    # download_dataset: a data set the workspace already holds is reused without numpy or the fetchers;
    # the manifest schema (jsonschema) is a training step's business only.
    "kubetrain.kfp_runtime.download_step": (*HEAVY, "jsonschema"),
    # compare_summary draws its chart when it runs, not when it is imported.
    "kubetrain.kfp_runtime.summary": (*HEAVY, "jsonschema", "kubernetes"),
}


def _loaded_after_import(module: str, candidates: tuple[str, ...]) -> list[str]:
    code = f"import json, sys, {module}; print(json.dumps(sorted(m for m in {list(candidates)!r} if m in sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded: list[str] = json.loads(done.stdout)
    return loaded


@pytest.mark.parametrize("module", sorted(STEP_MODULES))
def test_step_module_imports_no_heavy_library(module: str) -> None:
    assert _loaded_after_import(module, STEP_MODULES[module]) == []


def test_reading_dataset_json_needs_no_numpy() -> None:
    # The training step reads the Dataset artifact's dataset.json through this module.
    assert _loaded_after_import("kubetrain.data.dataset_format", ("numpy",)) == []
