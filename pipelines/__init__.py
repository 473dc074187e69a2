"""kubetrain's KFP pipelines (importable as `kubetrain.pipelines`), each compiled to YAML beside its source.

- `mnist_pytorch`: download → PyTorch DDP.
- `mnist_chainermn`: download → ChainerMN over MPI.
- `mnist_ps`: download → parameter-server training.
- `compare_frameworks`: download once → the three in parallel → a comparison table.

Each takes `dataset` (default `builtin:digits`, which needs no network) and `workspace_pvc`, the
ReadWriteMany claim shared by the launcher steps and the training jobs.
"""

from pathlib import Path

from kubetrain.components import PRE_2_15


def compiled_yaml(*, kfp_pre_2_15: bool = False) -> dict[str, Path]:
    """The compiled YAML of each shipped pipeline, by name, as installed with kubetrain (package data).

    `kfp_pre_2_15` gives the copies for Kubeflow Pipelines backends before 2.15 (no TaskConfig).
    """
    folder = Path(__file__).parent / (PRE_2_15 if kfp_pre_2_15 else "")
    return {path.stem: path for path in sorted(folder.glob("*.yaml"))}
