"""KFP's floor: each shipped pipeline's DAG, made of plain lightweight components (not shipped).

Same shape, same data, same training code and epochs, on the same backend, with no job and no
launcher: each training step is one container in the framework's own image that trains in its
own pod, one process:

- PyTorch: `python -m kubetrain.train.torch_ddp` in the pytorch image, no operator environment,
  so world size 1 (the DDP trainer's single-process path);
- ChainerMN: `python -m kubetrain.train.chainermn_mpi` in the chainermn image, not under mpirun:
  a singleton MPI world of one rank;
- parameter servers: there is no one-process PS, so the closest honest equivalent is the PS
  runtime's own single-process baseline, `python -m kubetrain.ps.harness.baseline` in the ps image
  (the same model and optimizer on local tables, no servers, no master, no staleness).

download_dataset and compare_summary are the shipped components themselves (they are plain
lightweight components already): the floor's download and summary do exactly the same work.
`compile_floor(name, out_dir)` writes a floor pipeline's YAML; bench/kfp_backend.py compiles them
at bench time.
"""

# No `from __future__ import annotations`: KFP reads the component signature's annotations at runtime.

from pathlib import Path
from typing import Any

from kfp import compiler, dsl, kubernetes
from kfp.dsl import Dataset, Input, Metrics, Model, Output

from kubetrain.components import compare_summary, download_dataset
from kubetrain.pipelines._workspace import launcher_task
from kubetrain.presets import CHAINERMN_IMAGE, PS_IMAGE, PYTORCH_IMAGE, WORKSPACE_MOUNT


# The body runs from its source in the training image (kubetrain and kfp are installed there).
@dsl.component(base_image=PYTORCH_IMAGE, install_kfp_package=False)  # type: ignore[untyped-decorator]
def floor_train(
    dataset: Input[Dataset],
    model: Output[Model],
    metrics: Output[Metrics],
    framework: str,
    epochs: int,
    architecture: str = "mlp",
) -> None:
    """Train in this pod, one process: kubetrain's own trainer of `framework`, then fill the artifacts."""
    import json
    import os
    import shutil
    import subprocess
    import sys
    import tempfile

    data = dataset.metadata["path"]
    out = tempfile.mkdtemp(prefix="floor-")
    base = ["--data", data, "--epochs", str(epochs)]
    if framework == "pytorch":
        argv = ["-m", "kubetrain.train.torch_ddp", *base, "--output", out, "--model", architecture]
    elif framework == "chainermn":
        argv = ["-m", "kubetrain.train.chainermn_mpi", *base, "--output", out, "--model", architecture]
    else:
        argv = ["-m", "kubetrain.ps.harness.baseline", *base, "--model", architecture]
    # The shipped pipelines' defaults: 32 records per step, learning rate 0.002.
    argv += ["--batch-size", "32", "--lr", "0.002"]
    done = subprocess.run([sys.executable, *argv], check=True, stdout=subprocess.PIPE, text=True)
    if framework == "ps":  # the baseline prints its metrics instead of writing metrics.json
        with open(os.path.join(out, "metrics.json"), "w", encoding="utf-8") as f:
            f.write(done.stdout.strip().splitlines()[-1])
    else:
        print(done.stdout, end="")
    shutil.copytree(out, model.path, dirs_exist_ok=True)
    with open(os.path.join(out, "metrics.json"), encoding="utf-8") as f:
        values = json.load(f)
    for key, value in values.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            metrics.log_metric(key, float(value))


IMAGES = {"pytorch": PYTORCH_IMAGE, "chainermn": CHAINERMN_IMAGE, "ps": PS_IMAGE}
ARTIFACT_ROOTS = ("/gcs", "/minio", "/s3")


def _train(framework: str, data: Any, *, epochs: int, workspace_pvc: str) -> Any:
    task = floor_train(dataset=data.outputs["dataset"], framework=framework, epochs=epochs)
    # The framework's image, as the shipped pipeline's training pods use; the workspace where they mount it.
    task.container_spec.image = IMAGES[framework]
    kubernetes.mount_pvc(task, pvc_name=workspace_pvc, mount_path=WORKSPACE_MOUNT)
    # KFP's executor writes the outputs under /gcs, /minio or /s3 (by the pipeline root's scheme):
    # the launcher image makes them writable for its non-root user, the training images do not, so
    # the floor gives each an emptyDir (world-writable).
    for root in ARTIFACT_ROOTS:
        kubernetes.empty_dir_mount(task, volume_name=f"artifacts-{root.strip('/')}", mount_path=root)
    task.set_caching_options(False)
    task.set_display_name(f"{framework}-train")
    return task


def _download(dataset: str, workspace_pvc: str) -> Any:
    return launcher_task(download_dataset(source=dataset, workspace_pvc=workspace_pvc), workspace_pvc=workspace_pvc)


@dsl.pipeline(name="floor-mnist-pytorch")  # type: ignore[untyped-decorator]
def floor_mnist_pytorch(dataset: str = "builtin:digits", workspace_pvc: str = "kubetrain-workspace") -> None:
    """mnist_pytorch's shape: download, then train (5 epochs, as its default)."""
    _train("pytorch", _download(dataset, workspace_pvc), epochs=5, workspace_pvc=workspace_pvc)


@dsl.pipeline(name="floor-mnist-chainermn")  # type: ignore[untyped-decorator]
def floor_mnist_chainermn(dataset: str = "builtin:digits", workspace_pvc: str = "kubetrain-workspace") -> None:
    """mnist_chainermn's shape: download, then train (5 epochs, as its default)."""
    _train("chainermn", _download(dataset, workspace_pvc), epochs=5, workspace_pvc=workspace_pvc)


@dsl.pipeline(name="floor-mnist-ps")  # type: ignore[untyped-decorator]
def floor_mnist_ps(dataset: str = "builtin:digits", workspace_pvc: str = "kubetrain-workspace") -> None:
    """mnist_ps's shape: download, then train (10 epochs, as its default)."""
    _train("ps", _download(dataset, workspace_pvc), epochs=10, workspace_pvc=workspace_pvc)


@dsl.pipeline(name="floor-compare-frameworks")  # type: ignore[untyped-decorator]
def floor_compare_frameworks(dataset: str = "builtin:digits", workspace_pvc: str = "kubetrain-workspace") -> None:
    """compare_frameworks' shape: download once, three trainings in parallel, the same summary."""
    data = _download(dataset, workspace_pvc)
    runs = {fw: _train(fw, data, epochs=10 if fw == "ps" else 5, workspace_pvc=workspace_pvc) for fw in IMAGES}
    summary = compare_summary(
        **{f"{fw}_{kind}": runs[fw].outputs[kind] for fw in IMAGES for kind in ("model", "metrics")}
    )
    summary.set_caching_options(False)


FLOORS = {
    "mnist_pytorch": floor_mnist_pytorch,
    "mnist_chainermn": floor_mnist_chainermn,
    "mnist_ps": floor_mnist_ps,
    "compare_frameworks": floor_compare_frameworks,
}


def compile_floor(pipeline: str, out_dir: Path) -> Path:
    """Compile the floor of the shipped `pipeline` into `out_dir`; the YAML's path."""
    path = out_dir / f"floor_{pipeline}.yaml"
    compiler.Compiler().compile(FLOORS[pipeline], str(path))
    return path
