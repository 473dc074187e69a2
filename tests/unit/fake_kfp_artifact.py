"""A stand-in for a KFP artifact, for the component library's tests (no KFP running)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


class FakeArtifact:
    """The two attributes of a KFP artifact the library uses, plus Metrics.log_metric."""

    def __init__(self, path: Path, metadata: dict[str, Any] | None = None) -> None:
        self.path = str(path)
        self.metadata: dict[str, Any] = dict(metadata or {})

    def log_metric(self, metric: str, value: float) -> None:
        self.metadata[metric] = value
