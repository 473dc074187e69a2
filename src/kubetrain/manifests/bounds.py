"""The input bounds, held by every manifest too: counts, deadlines and restarts within the limits.

The component inputs are bounded (:mod:`kubetrain.specs.limits`), but a `manifest_patch` or a
manifest given to `kubetrain launch -f` sets the same fields directly: a million replicas, a
negative deadline or `backoffLimit: Infinity` (Python's JSON reader takes it) would otherwise
reach the API server or the local backend. So every manifest is held to the same bounds, by field
name wherever it occurs (a replica count is a count in every kind), and no number may be infinite
or NaN, which JSON cannot carry.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from kubetrain.errors import ManifestError
from kubetrain.specs import MAX_REPLICAS
from kubetrain.specs.limits import MAX_BACKOFF_LIMIT, MAX_SECONDS, MAX_SLOTS_PER_WORKER

# Field name -> (least, greatest, what bounds it), for integer fields of the job kinds kubetrain runs.
_BOUNDS: dict[str, tuple[int, int, str]] = {
    "replicas": (0, MAX_REPLICAS, "MAX_REPLICAS"),
    "parallelism": (0, MAX_REPLICAS, "MAX_REPLICAS"),
    "completions": (0, MAX_REPLICAS, "MAX_REPLICAS"),
    "minReplicas": (0, MAX_REPLICAS, "MAX_REPLICAS"),
    "maxReplicas": (0, MAX_REPLICAS, "MAX_REPLICAS"),
    "numNodes": (1, MAX_REPLICAS, "MAX_REPLICAS"),
    "activeDeadlineSeconds": (1, MAX_SECONDS, "366 days; MAX_SECONDS"),
    "ttlSecondsAfterFinished": (0, MAX_SECONDS, "366 days; MAX_SECONDS"),
    "backoffLimit": (0, MAX_BACKOFF_LIMIT, "MAX_BACKOFF_LIMIT"),
    "backoffLimitPerIndex": (0, MAX_BACKOFF_LIMIT, "MAX_BACKOFF_LIMIT"),
    "maxFailedIndexes": (0, MAX_REPLICAS, "MAX_REPLICAS"),
    "maxRestarts": (0, MAX_BACKOFF_LIMIT, "MAX_BACKOFF_LIMIT"),
    "slotsPerWorker": (1, MAX_SLOTS_PER_WORKER, "MAX_SLOTS_PER_WORKER"),
}
# Free-form maps: their keys are the user's, not fields.
_FREE_FORM = frozenset({"labels", "annotations", "nodeSelector"})


def check_manifest_bounds(manifest: Mapping[str, Any]) -> None:
    """Raise ManifestError naming the first bounded field out of bounds, or a number that is not finite."""
    todo: list[tuple[str, Any]] = [("", manifest)]
    while todo:
        path, node = todo.pop()
        if isinstance(node, Mapping):
            for key, value in node.items():
                here = f"{path}.{key}" if path else str(key)
                bound = _BOUNDS.get(key) if isinstance(key, str) else None
                if bound is not None:
                    _check(here, value, *bound)
                if key not in _FREE_FORM:
                    todo.append((here, value))
        elif isinstance(node, list):
            todo.extend((f"{path}[{i}]", item) for i, item in enumerate(node))
        elif isinstance(node, float) and not math.isfinite(node):
            raise ManifestError(path, f"got {node!r}; expected a finite number (JSON has no Infinity or NaN)")


def _check(path: str, value: object, least: int, greatest: int, cap: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= greatest:
        raise ManifestError(path, f"got {value!r}; expected an integer from {least} to {greatest} ({cap})")
