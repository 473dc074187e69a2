"""One function per training component: its inputs → one typed request → one job, end to end.

`pytorch_train`, `chainermn_train` and `ps_train` each call exactly one function of this module
with their inputs by name. The function splits off the artifacts and the task's TaskConfig, builds
the framework's request from the rest (validated once, :mod:`.requests`) and hands both to
:func:`~kubetrain.kfp_runtime.train_step.launch_training`.
"""

from __future__ import annotations

from typing import Any

from kubetrain.kfp_runtime.artifacts import ArtifactLike, MetricsLike
from kubetrain.kfp_runtime.exits import step
from kubetrain.kfp_runtime.requests import ChainerMNRequest, PSRequest, PyTorchRequest
from kubetrain.kfp_runtime.train_step import StepArtifacts, launch_training


@step
def train_pytorch(
    *,
    dataset: ArtifactLike,
    model: ArtifactLike,
    metrics: MetricsLike,
    report: ArtifactLike,
    task_config: object,
    **inputs: Any,
) -> tuple[str, str]:
    """The `pytorch_train` step: a PyTorchJob running DDP (master alone, + workers, or elastic)."""
    outputs = StepArtifacts(dataset=dataset, model=model, metrics=metrics, report=report)
    return launch_training(PyTorchRequest.from_inputs(inputs), outputs=outputs, task_config=task_config)


@step
def train_chainermn(
    *,
    dataset: ArtifactLike,
    model: ArtifactLike,
    metrics: MetricsLike,
    report: ArtifactLike,
    task_config: object,
    **inputs: Any,
) -> tuple[str, str]:
    """The `chainermn_train` step: an MPIJob whose launcher runs mpirun over the ChainerMN program."""
    outputs = StepArtifacts(dataset=dataset, model=model, metrics=metrics, report=report)
    return launch_training(ChainerMNRequest.from_inputs(inputs), outputs=outputs, task_config=task_config)


@step
def train_ps(
    *,
    dataset: ArtifactLike,
    model: ArtifactLike,
    metrics: MetricsLike,
    report: ArtifactLike,
    task_config: object,
    **inputs: Any,
) -> tuple[str, str]:
    """The `ps_train` step: a JobSet with the parameter-server master, servers and workers."""
    outputs = StepArtifacts(dataset=dataset, model=model, metrics=metrics, report=report)
    return launch_training(PSRequest.from_inputs(inputs), outputs=outputs, task_config=task_config)
