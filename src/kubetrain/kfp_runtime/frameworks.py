"""One function per training component: its inputs as keyword arguments → one job, end to end.

`pytorch_train`, `chainermn_train` and `ps_train` each call exactly one function of this module
with their inputs; the function builds the framework's spec through :mod:`kubetrain.presets`
and hands it to :func:`~kubetrain.kfp_runtime.train_step.launch_training`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, cast

from kubetrain.errors import InvalidInputError
from kubetrain.kfp_runtime.exits import step
from kubetrain.kfp_runtime.taskconfig import ExplicitResources
from kubetrain.kfp_runtime.train_step import (
    Hyperparameters,
    JobPlan,
    LaunchSettings,
    StepArtifacts,
    launch_training,
    parse_command,
    with_program,
)
from kubetrain.presets import (
    CHAINERMN_IMAGE,
    PS_IMAGE,
    PYTORCH_IMAGE,
    mpi_job_spec,
    ps_job_spec,
    pytorch_job_spec,
)
from kubetrain.specs import JobSpec

TORCH_PROGRAM = ("python", "-m", "kubetrain.train.torch_ddp")
CHAINERMN_PROGRAM = ("python", "-m", "kubetrain.train.chainermn_mpi")


def _elastic(min_workers: int, max_workers: int) -> tuple[int, int] | None:
    if not min_workers and not max_workers:
        return None
    if min_workers < 1 or max_workers < min_workers:
        raise InvalidInputError(
            f"elastic_min_workers/elastic_max_workers: got {min_workers}/{max_workers}; expected 1 <= min <= max "
            "(both 0 for a fixed-size job)"
        )
    return (min_workers, max_workers)


def _common(
    *,
    dataset: Any,
    model: Any,
    metrics: Any,
    report: Any,
    run_id: str,
    task_id: str,
    workspace_pvc: str,
    epochs: int,
    batch_size: int,
    learning_rate: float,
    architecture: str,
    seed: int,
    cpu: str,
    memory: str,
    gpus: int,
    timeout_seconds: float,
    delete_after: str,
    backoff_limit: int,
    namespace: str,
    service_account: str,
) -> tuple[StepArtifacts, LaunchSettings, Hyperparameters, ExplicitResources]:
    return (
        StepArtifacts(dataset=dataset, model=model, metrics=metrics, report=report),
        LaunchSettings(
            run_id=run_id,
            task_id=task_id,
            workspace_pvc=workspace_pvc,
            timeout_seconds=timeout_seconds,
            delete_after=delete_after,
            backoff_limit=backoff_limit,
            namespace=namespace,
            service_account=service_account,
        ),
        Hyperparameters(
            epochs=epochs, batch_size=batch_size, learning_rate=learning_rate, architecture=architecture, seed=seed
        ),
        ExplicitResources(cpu=cpu, memory=memory, gpus=gpus),
    )


@step
def train_pytorch(
    *,
    workers: int,
    elastic_min_workers: int,
    elastic_max_workers: int,
    backend: str,
    image: str,
    command: str,
    task_config: object,
    **common: Any,
) -> tuple[str, str]:
    """The `pytorch_train` step: a PyTorchJob running DDP (master alone, + workers, or elastic)."""
    if backend not in ("gloo", "nccl"):
        raise InvalidInputError(f"backend: got {backend!r}; expected gloo (CPU) or nccl (GPU)")
    elastic = _elastic(elastic_min_workers, elastic_max_workers)
    chosen_image = image or PYTORCH_IMAGE
    program = parse_command(command)
    outputs, settings, hyper, resources = _common(**common)

    def build(plan: JobPlan) -> JobSpec:
        spec = pytorch_job_spec(
            name=plan.name,
            params=plan.params,
            workers=workers,
            elastic=elastic,
            image=chosen_image,
            backend=cast(Literal["gloo", "nccl"], backend),
            pod=plan.pod,
            workspace_pvc=plan.settings.workspace_pvc,
            run_policy=plan.settings.run_policy(),
            namespace=plan.namespace,
            kfp_run_id=plan.settings.run_id,
            kfp_task_id=plan.settings.task_id,
        )
        if not program:
            return spec
        return dataclasses.replace(
            spec,
            master=with_program(spec.master, TORCH_PROGRAM, program) if spec.master else None,
            worker=with_program(spec.worker, TORCH_PROGRAM, program) if spec.worker else None,
        )

    return launch_training(
        framework="pytorch",
        image=chosen_image,
        build=build,
        hyper=hyper,
        settings=settings,
        resources=resources,
        task_config=task_config,
        outputs=outputs,
    )


@step
def train_chainermn(
    *,
    workers: int,
    slots_per_worker: int,
    image: str,
    command: str,
    task_config: object,
    **common: Any,
) -> tuple[str, str]:
    """The `chainermn_train` step: an MPIJob whose launcher runs mpirun over the ChainerMN program."""
    chosen_image = image or CHAINERMN_IMAGE
    program = parse_command(command)
    outputs, settings, hyper, resources = _common(**common)

    def build(plan: JobPlan) -> JobSpec:
        spec = mpi_job_spec(
            name=plan.name,
            params=plan.params,
            workers=workers,
            slots_per_worker=slots_per_worker,
            image=chosen_image,
            pod=plan.pod,
            workspace_pvc=plan.settings.workspace_pvc,
            run_policy=plan.settings.run_policy(),
            namespace=plan.namespace,
            kfp_run_id=plan.settings.run_id,
            kfp_task_id=plan.settings.task_id,
        )
        return dataclasses.replace(spec, launcher=with_program(spec.launcher, CHAINERMN_PROGRAM, program))

    return launch_training(
        framework="chainermn",
        image=chosen_image,
        build=build,
        hyper=hyper,
        settings=settings,
        resources=resources,
        task_config=task_config,
        outputs=outputs,
    )


@step
def train_ps(
    *,
    ps_replicas: int,
    workers: int,
    mode: str,
    records_per_task: int,
    optimizer: str,
    image: str,
    task_config: object,
    **common: Any,
) -> tuple[str, str]:
    """The `ps_train` step: a JobSet with the parameter-server master, servers and workers."""
    if mode not in ("async", "sync"):
        raise InvalidInputError(f"mode: got {mode!r}; expected async or sync")
    if optimizer not in ("sgd", "adam"):
        raise InvalidInputError(f"optimizer: got {optimizer!r}; expected sgd or adam")
    chosen_image = image or PS_IMAGE
    outputs, settings, hyper, resources = _common(**common)

    def build(plan: JobPlan) -> JobSpec:
        return ps_job_spec(
            name=plan.name,
            params=plan.params,
            ps=ps_replicas,
            workers=workers,
            mode=cast(Literal["async", "sync"], mode),
            records_per_task=records_per_task,
            optimizer=cast(Literal["sgd", "adam"], optimizer),
            image=chosen_image,
            pod=plan.pod,
            workspace_pvc=plan.settings.workspace_pvc,
            run_policy=plan.settings.run_policy(),
            namespace=plan.namespace,
            kfp_run_id=plan.settings.run_id,
            kfp_task_id=plan.settings.task_id,
        )

    return launch_training(
        framework="ps",
        image=chosen_image,
        build=build,
        hyper=hyper,
        settings=settings,
        resources=resources,
        task_config=task_config,
        outputs=outputs,
    )
