"""How the pipelines wire a launcher task: the workspace claim mounted, caching set, a small request."""

from typing import Any

from kfp import kubernetes

from kubetrain.presets import WORKSPACE_MOUNT

# The launcher pod's own request: without one it is BestEffort, evicted first under node pressure,
# and a launcher's SIGTERM deletes its training job. Change it with set_cpu_request /
# set_memory_request on tasks without TaskConfig passthroughs (download, summary, and every task
# in the kfp-pre-2.15 YAML); see the README for the training tasks on KFP ≥ 2.15.
LAUNCHER_CPU_REQUEST = "100m"
LAUNCHER_MEMORY_REQUEST = "256Mi"


def launcher_request(task: Any) -> Any:
    """Give a task without resource passthroughs the launcher's small request; returns the task.

    A training task's resources are TaskConfig passthroughs (they go to the training pods, not to
    the launcher pod), so a request set there would size the training pods instead: left alone.
    """
    passthroughs = task.component_spec.task_config_passthroughs or []
    if not any(p.field.name == "RESOURCES" for p in passthroughs):
        task.set_cpu_request(LAUNCHER_CPU_REQUEST).set_memory_request(LAUNCHER_MEMORY_REQUEST)
    return task


def launcher_task(task: Any, *, workspace_pvc: Any, cache: bool = False) -> Any:
    """Mount the workspace claim on a launcher task and set its caching; returns the task.

    The launcher reads and writes the workspace (the dataset, the job's model and metrics), so
    the claim is mounted where the job pods mount it. A training task is never cached: its real
    output is a job on the cluster and a model on the claim, which a cache hit would not make
    (and its run_id input differs in every run, so KFP could never hit anyway). `cache` is for
    download_dataset: its Dataset artifact names a directory on the claim that a later run can
    use as it is, so a cache hit skips the step's pod; see download_dataset's docstring for what
    that means for a source with no checksum.
    """
    kubernetes.mount_pvc(task, pvc_name=workspace_pvc, mount_path=WORKSPACE_MOUNT)
    task.set_caching_options(cache)
    return launcher_request(task)
