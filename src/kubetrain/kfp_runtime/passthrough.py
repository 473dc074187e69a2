"""Noticing, in the running step, that its TaskConfig passthroughs were dropped.

`kfp.components.load_component_from_file/url/text` (kfp ≤ 2.17) drops a compiled component's
`taskConfigPassthroughs`. The KFP driver then applies every task setting to the launcher pod
itself (its `getTaskConfigOptions`: no passthroughs → everything is set on the pod), and kfp's
executor hands the step an empty TaskConfig, which looks like a task with no settings. GPUs,
tolerations, node selectors and node affinity meant for the training pods land on the launcher,
and the training pods get none. Nothing fails, so the step says so loudly in its log where it can tell: a GPU
visible to the launcher (which never asks for one) is the sign; no TaskConfig at all (a library
caller) is another.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

DEV_DIR = Path("/dev")
FIX = (
    "load the component with kubetrain.components.load_component(path_or_url) instead of "
    "kfp.components.load_component_from_*, or set the training pods' resources with the cpu/memory/gpus inputs"
)


def _gpus_visible(environ: Mapping[str, str], dev_dir: Path) -> bool:
    visible = environ.get("NVIDIA_VISIBLE_DEVICES", "").strip().lower()
    if visible and visible not in ("void", "none"):
        return True
    return any(dev_dir.glob("nvidia[0-9]*"))


def passthrough_warning(
    task_config: object, *, environ: Mapping[str, str] | None = None, dev_dir: Path = DEV_DIR
) -> str | None:
    """A loud warning when this step evidently runs without its passthroughs; None when all looks right."""
    env = os.environ if environ is None else environ
    reasons: list[str] = []
    if _gpus_visible(env, dev_dir):
        reasons.append("this launcher pod has a GPU, which the task's settings meant for the training pods")
    if task_config is None:
        reasons.append("the step received no TaskConfig from the backend")
    if not reasons:
        return None
    banner = "!" * 100
    return (
        f"{banner}\nWARNING: this step runs without its TaskConfig passthroughs: {'; and '.join(reasons)}. "
        "Resources, tolerations, node selectors and node affinity set on the task go to this launcher pod, and "
        f"the training pods get none.\nFix: {FIX}.\n{banner}"
    )
