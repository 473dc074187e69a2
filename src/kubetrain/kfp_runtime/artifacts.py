"""Filling a training step's KFP output artifacts from what the job left on the workspace.

Rank 0 of every training program writes `model.*` and `metrics.json` to its output directory
(DESIGN.md "Programs"). The launcher copies the model files into the Model artifact, logs the
final metrics on the Metrics artifact and writes the HTML report.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeGuard

from kubetrain.errors import DIVERGED_ADVICE, TrainingError

METRICS_JSON = "metrics.json"
# Keys every metrics.json carries (DESIGN.md "metrics.json").
REQUIRED_METRICS = (
    "test_accuracy",
    "test_loss",
    "train_loss",
    "samples_per_second",
    "world_size",
    "wall_seconds",
    "epochs",
    "global_step",
    "history",
)
# metrics.json key -> name logged on the KFP Metrics artifact.
LOGGED_METRICS = (
    ("test_accuracy", "test_accuracy"),
    ("test_loss", "test_loss"),
    ("train_loss", "train_loss"),
    ("samples_per_second", "samples_per_second"),
    ("wall_seconds", "duration_seconds"),
    ("world_size", "world_size"),
    ("epochs", "epochs"),
    # The parameter-server job's elastic story (ps.master): what it lost and how big it grew.
    ("preemptions", "preemptions"),
    ("tasks_requeued", "tasks_requeued"),
    ("tasks_reissued", "tasks_reissued"),
    ("max_workers_seen", "max_workers_seen"),
    ("worker_seconds", "worker_seconds"),
)


class ArtifactLike(Protocol):
    """What the launcher uses of a KFP artifact (kfp.dsl.Artifact and its subclasses)."""

    path: str
    metadata: dict[str, Any]


class MetricsLike(ArtifactLike, Protocol):
    """A KFP Metrics artifact."""

    def log_metric(self, metric: str, value: float) -> None:
        """Record one scalar metric."""


@dataclass(frozen=True)
class MetricsRead:
    """What could be read of a job's metrics.json, and why not all of it (empty when all is well).

    A job that succeeded has trained a model: a metrics file that cannot be read costs the
    metrics, never the model, so reading it does not raise.
    """

    metrics: dict[str, Any]
    problems: tuple[str, ...] = ()


def read_metrics(output_dir: Path, *, required: tuple[str, ...] = (), missing_ok: bool = False) -> MetricsRead:
    """The job's metrics.json: a JSON object, checked for `required` keys; problems reported, not raised.

    `missing_ok`: a program that writes no metrics.json at all is fine (a user's own program).
    """
    path = output_dir / METRICS_JSON
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        if missing_ok:
            return MetricsRead({})
        return MetricsRead({}, (f"{path}: rank 0 wrote no {METRICS_JSON}",))
    except (OSError, ValueError) as e:
        return MetricsRead({}, (f"{path}: not readable JSON ({e})",))
    if not isinstance(data, dict):
        return MetricsRead({}, (f"{path}: expected a JSON object of metrics, got {type(data).__name__}",))
    problems = []
    missing = [k for k in required if k not in data]
    if missing:
        problems.append(f"{path}: missing keys {missing} (kubetrain's trainers write {list(required)})")
    history = data.get("history")
    if history is not None and not (isinstance(history, list) and all(isinstance(h, dict) for h in history)):
        problems.append(f"{path}: history is not a list of objects; no curves")
        data = {k: v for k, v in data.items() if k != "history"}
    return MetricsRead(data, tuple(problems))


def _is_number(value: object) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_loss(key: str) -> bool:
    return key == "loss" or key.endswith("_loss")


def divergence(metrics: Mapping[str, Any]) -> str | None:
    """Why `metrics` says the model diverged, or None: a loss (`loss`, `*_loss`) that is not finite.

    Read at the top level and in the history's last entry, as kubetrain's trainers and a user's
    own program write them; a diverged run fails its step with this, whichever program trained.
    """
    bad = [f"{k} is {v}" for k, v in metrics.items() if _is_loss(str(k)) and _is_number(v) and not math.isfinite(v)]
    history = metrics.get("history")
    last = history[-1] if isinstance(history, list) and history else None
    if isinstance(last, dict):
        at = f" (step {last['step']})" if "step" in last else ""
        bad += [
            f"the history's last {k}{at} is {v}"
            for k, v in last.items()
            if _is_loss(str(k)) and _is_number(v) and not math.isfinite(v)
        ]
    if not bad:
        return None
    return f"the model diverged: {METRICS_JSON} says {', '.join(bad)}; {DIVERGED_ADVICE}"


def non_finite(metrics: Mapping[str, Any]) -> list[str]:
    """The top-level numbers that are not finite (`name nan`): a KFP Metrics artifact cannot hold them."""
    return [f"{k} {v}" for k, v in metrics.items() if _is_number(v) and not math.isfinite(v)]


def model_files(output_dir: Path) -> list[Path]:
    """The model files (`model.*`) rank 0 wrote, in name order."""
    return sorted(p for p in output_dir.glob("model*") if p.is_file() or p.is_dir())


def copy_model(output_dir: Path, model: ArtifactLike, *, metadata: Mapping[str, Any]) -> list[str]:
    """Copy the model files and metrics.json into the Model artifact (a directory); returns the file names."""
    files = model_files(output_dir)
    if not files:
        raise TrainingError(f"{output_dir}: the job succeeded but wrote no model.* file")
    metrics_file = output_dir / METRICS_JSON
    return _copy_into(model, [*files, *([metrics_file] if metrics_file.is_file() else [])], metadata)


def log_metrics(
    metrics_artifact: MetricsLike, metrics: Mapping[str, Any], *, job_seconds: float | None
) -> dict[str, float]:
    """Log the final metrics on the Metrics artifact; returns what was logged."""
    logged: dict[str, float] = {}
    for key, name in LOGGED_METRICS:
        value = metrics.get(key)
        if _is_number(value) and math.isfinite(value):
            logged[name] = as_metric(value)
    if job_seconds is not None:
        logged["job_seconds"] = float(job_seconds)
    for name, value in logged.items():
        metrics_artifact.log_metric(name, value)
    return logged


def write_text(artifact: ArtifactLike, text: str) -> Path:
    """Write `text` as the artifact's file."""
    path = Path(artifact.path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


# -- a user's own program: whatever it left in its output directory ------------------------------


def as_metric(value: float) -> float:
    """A metric's value as logged and shown: an integer stays one (`2`, not `2.0000`), anything else a float."""
    return value if isinstance(value, int) and not isinstance(value, bool) else float(value)


def numeric_metrics(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The finite numbers among the top-level keys (booleans and nested values left out); integers stay integers."""
    return {str(k): as_metric(v) for k, v in metrics.items() if _is_number(v) and math.isfinite(v)}


def copy_outputs(output_dir: Path, model: ArtifactLike, *, metadata: Mapping[str, Any]) -> list[str]:
    """Copy everything in the output directory into the Model artifact; returns the top-level names."""
    return _copy_into(model, sorted(output_dir.iterdir()) if output_dir.is_dir() else [], metadata)


def _copy_into(model: ArtifactLike, sources: list[Path], metadata: Mapping[str, Any]) -> list[str]:
    """Copy `sources` (files or directories) into the Model artifact's directory and record their names."""
    target = Path(model.path)
    target.mkdir(parents=True, exist_ok=True)
    names = []
    for src in sources:
        if src.is_dir():
            shutil.copytree(src, target / src.name, dirs_exist_ok=True)
        else:
            shutil.copy2(src, target / src.name)
        names.append(src.name)
    model.metadata.update(metadata)
    model.metadata["files"] = names
    return names
