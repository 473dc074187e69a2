"""One function per training component: its inputs → one typed request → one job, end to end.

`pytorch_train`, `chainermn_train` and `ps_train` each call exactly one function of this module
with their inputs by name. The three are the same step over a different request type: split off
the artifacts and the task's TaskConfig, build the framework's request from the rest (validated
once, :mod:`.requests`) and hand both to :func:`~kubetrain.kfp_runtime.train_step.launch_training`.
"""

from __future__ import annotations

from typing import Any, Protocol

from kubetrain.kfp_runtime.artifacts import ArtifactLike, MetricsLike
from kubetrain.kfp_runtime.exits import step
from kubetrain.kfp_runtime.requests import ChainerMNRequest, PSRequest, PyTorchRequest, TrainingRequest
from kubetrain.kfp_runtime.task_identity import IDENTITY_FIELDS, resolve_identity
from kubetrain.kfp_runtime.train_step import StepArtifacts, launch_training


class TrainingStep(Protocol):
    """What a training component's body calls: its artifacts, its TaskConfig and its inputs by name."""

    def __call__(
        self,
        *,
        dataset: ArtifactLike,
        model: ArtifactLike,
        metrics: MetricsLike,
        report: ArtifactLike,
        task_config: object,
        **inputs: Any,
    ) -> tuple[str, str]:
        """Run the job end to end; (job name, final status)."""
        ...


def _training_step(request_type: type[TrainingRequest], name: str, summary: str) -> TrainingStep:
    def train(
        *,
        dataset: ArtifactLike,
        model: ArtifactLike,
        metrics: MetricsLike,
        report: ArtifactLike,
        task_config: object,
        **inputs: Any,
    ) -> tuple[str, str]:
        outputs = StepArtifacts(dataset=dataset, model=model, metrics=metrics, report=report)
        # Read only when an identity input is left out: a caller's own artifacts may have no URI.
        given = all(inputs.get(name) for name in IDENTITY_FIELDS)
        identity = resolve_identity(inputs, output_uri="" if given else str(getattr(model, "uri", "")))
        if identity.source != "inputs":
            print(f"{request_type.framework}: run {identity.run_id}, task {identity.task_id} ({identity.source})")
        named = {**inputs, "run_id": identity.run_id, "task_id": identity.task_id, "task_name": identity.task_name}
        return launch_training(request_type.from_inputs(named), outputs=outputs, task_config=task_config)

    train.__name__ = train.__qualname__ = name
    train.__doc__ = summary
    return step(train)


train_pytorch = _training_step(
    PyTorchRequest, "train_pytorch", "The `pytorch_train` step: a PyTorchJob running DDP (or a TrainJob)."
)
train_chainermn = _training_step(
    ChainerMNRequest, "train_chainermn", "The `chainermn_train` step: an MPIJob running mpirun (or a TrainJob)."
)
train_ps = _training_step(
    PSRequest, "train_ps", "The `ps_train` step: a JobSet with the parameter-server master, servers and workers."
)
