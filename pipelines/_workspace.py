"""How the pipelines wire a launcher task: the workspace claim mounted, caching off."""

from typing import Any

from kfp import kubernetes

from kubetrain.presets import WORKSPACE_MOUNT


def launcher_task(task: Any, *, workspace_pvc: Any) -> Any:
    """Mount the workspace claim on a launcher task and turn its caching off; returns the task.

    The launcher reads and writes the workspace (the dataset, the job's model and metrics), so
    the claim is mounted where the job pods mount it. Caching is off because the task's real
    output is a job on the cluster and data on the claim, neither of which a cache hit restores.
    """
    kubernetes.mount_pvc(task, pvc_name=workspace_pvc, mount_path=WORKSPACE_MOUNT)
    task.set_caching_options(False)
    return task
