"""What a local run does not use of a job's manifest, said once per step.

Locally every replica is a process of this machine's Python: no image is pulled, no GPU is
given, no node is chosen. A mistyped `image`, a GPU request (`gpus`, `set_accelerator_limit`) or
node selectors and tolerations therefore pass every local trial; the step says so, in one line,
before the job starts. kubetrain's own images are left out: they are what runs here anyway.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from kubetrain.presets import IMAGE_REGISTRY

__all__ = ["local_notice"]


def _pod_specs(node: Any) -> Iterator[Mapping[str, Any]]:
    """Every pod spec in the manifest (a mapping with `containers`), however deep its kind nests them."""
    if isinstance(node, Mapping):
        if isinstance(node.get("containers"), list):
            yield node
        for value in node.values():
            yield from _pod_specs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _pod_specs(item)


def local_notice(manifest: Mapping[str, Any]) -> str | None:
    """`locally, not used: ...` naming the images, GPUs, node selectors and tolerations, or None."""
    images: list[str] = []
    gpus: dict[str, str] = {}
    selectors: dict[str, str] = {}
    tolerations = 0
    for pod in _pod_specs(manifest):
        for container in [*pod.get("containers", []), *(pod.get("initContainers") or [])]:
            image = str(container.get("image") or "")
            if image and not image.startswith(f"{IMAGE_REGISTRY}/") and image not in images:
                images.append(image)
            resources = container.get("resources") or {}
            for amounts in (resources.get("limits") or {}, resources.get("requests") or {}):
                gpus.update({str(k): str(v) for k, v in amounts.items() if "gpu" in str(k).lower()})
        selectors.update({str(k): str(v) for k, v in (pod.get("nodeSelector") or {}).items()})
        tolerations += len(pod.get("tolerations") or [])
    unused = []
    if images:
        unused.append(f"image {', '.join(images)} (not pulled: this machine's Python runs the command)")
    if gpus:
        unused.append(f"GPUs ({', '.join(f'{k}: {v}' for k, v in gpus.items())}; every replica runs on the CPU)")
    if selectors:
        unused.append(f"node selector {', '.join(f'{k}={v}' for k, v in selectors.items())}")
    if tolerations:
        unused.append(f"{tolerations} toleration{'s' if tolerations > 1 else ''}")
    if not unused:
        return None
    return "locally, not used: " + "; ".join(unused) + " (a cluster uses them: docs/local-vs-cluster.md)"
