"""Every committed pipeline and component YAML compiles with the real KFP backend's compiler.

The API server turns an uploaded pipeline into an Argo Workflow with this Go code when a run is
created; a YAML it refuses fails every run on a real deployment while passing kfp's Python
compiler and `kfp.local`. The binary is built by tools/kfp/build.sh (`make e2e` always builds it);
without it in the cache these tests are skipped, saying so.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import kubetrain.components
import kubetrain.pipelines
from tools.cluster.kfp import compiler

REPO_ROOT = Path(__file__).resolve().parents[2]
# Every compiled YAML, the pre-2.15 copies too (not the components' metadata.yaml).
PACKAGES = sorted(
    path
    for package in (kubetrain.components, kubetrain.pipelines)
    for old in (False, True)
    for path in package.compiled_yaml(kfp_pre_2_15=old).values()
)


@pytest.fixture(scope="module")
def binary() -> Path:
    found = compiler.cached_binary()
    if found is None:
        pytest.skip(
            "the KFP backend's compiler is not in the cache (tools/kfp/build.sh compiler; `make e2e` builds it)"
        )
    return found


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_a_committed_yaml_compiles_to_an_argo_workflow_running_its_steps_in_their_images(
    binary: Path, package: Path
) -> None:
    workflow = compiler.compile_workflow(binary, package)
    assert (workflow["apiVersion"], workflow["kind"]) == ("argoproj.io/v1alpha1", "Workflow")
    spec = next(yaml.safe_load_all(package.read_text()))  # then, if any, the platform spec
    images = {executor["container"]["image"] for executor in spec["deploymentSpec"]["executors"].values()}
    # Each step's image reaches the pod through the workflow's parameters (the driver's pod patch).
    parameters = yaml.safe_dump(workflow["spec"]["arguments"]["parameters"])
    for image in images:
        assert image in parameters, (package.name, image)


def test_a_pipeline_the_backend_cannot_compile_is_refused_with_its_message(binary: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    text = (REPO_ROOT / "pipelines" / "mnist_pytorch.yaml").read_text()
    broken.write_text(text.replace("name: comp-pytorch-train\n", "name: comp-missing\n", 1))
    with pytest.raises(compiler.CompileError, match='cannot find component ref name="comp-missing"'):
        compiler.compile_workflow(binary, broken)
