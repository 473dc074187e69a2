"""What a pipeline's tasks ask of Kubernetes that a local run does not do, one line per task.

On a cluster a task's node selector, tolerations, node affinity and accelerator (set with
`kfp.kubernetes.add_node_selector`, `add_toleration`, `task.set_accelerator_limit`, ...) reach
the step's pod and, through its TaskConfig, the training pods. `kfp.local` drops them all: the
step gets an empty TaskConfig and looks like a task without them, so a GPU-only program or a
node selector that matches no node passes every local trial. `kubetrain run` says so per task.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["unused_task_settings"]


def _tasks(spec: Mapping[str, Any], dag: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """(task name, executor label) of every task that runs a container, inside loops and conditions too."""
    for task_name, task in (dag.get("tasks") or {}).items():
        component = (spec.get("components") or {}).get(task.get("componentRef", {}).get("name", ""), {})
        if "executorLabel" in component:
            yield task_name, str(component["executorLabel"])
        elif "dag" in component:
            yield from _tasks(spec, component["dag"])


def _describe(container: Mapping[str, Any], kubernetes: Mapping[str, Any]) -> list[str]:
    unused = []
    accelerator = (container.get("resources") or {}).get("accelerator") or {}
    count = accelerator.get("resourceCount") or accelerator.get("count")
    if count:
        kind = accelerator.get("resourceType") or accelerator.get("type") or "accelerator"
        unused.append(f"accelerator {kind}: {count} (set_accelerator_limit; every replica runs on the CPU)")
    labels = (kubernetes.get("nodeSelector") or {}).get("labels") or {}
    if labels:
        unused.append("node selector " + ", ".join(f"{k}={v}" for k, v in labels.items()))
    if tolerations := len(kubernetes.get("tolerations") or []):
        unused.append(f"{tolerations} toleration{'s' if tolerations > 1 else ''}")
    if kubernetes.get("nodeAffinity"):
        unused.append("node affinity")
    return unused


def unused_task_settings(pipeline: Any) -> dict[str, str]:
    """Task name -> `locally, not used: ...` for each task of `pipeline` (a GraphComponent) with such settings."""
    from google.protobuf import json_format

    spec = json_format.MessageToDict(pipeline.pipeline_spec)
    platform = json_format.MessageToDict(pipeline.platform_spec)
    k8s = platform.get("platforms", {}).get("kubernetes", {}).get("deploymentSpec", {}).get("executors", {})
    executors = spec.get("deploymentSpec", {}).get("executors", {})
    notices = {}
    for task_name, executor in _tasks(spec, spec.get("root", {}).get("dag", {})):
        unused = _describe(executors.get(executor, {}).get("container", {}), k8s.get(executor, {}))
        if unused:
            notices[task_name] = (
                "locally, not used: " + "; ".join(unused) + " (set on the task; a cluster uses them: "
                "docs/local-vs-cluster.md)"
            )
    return notices
