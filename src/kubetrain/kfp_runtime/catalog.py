"""The components and pipelines kubetrain ships, by name, and where their compiled YAML lives.

They are loaded by module name at call time: this package sits below the KFP layer and never
imports it statically (DESIGN.md, "Layering").
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from kubetrain.errors import InvalidInputError

COMPONENTS = ("download_dataset", "pytorch_train", "chainermn_train", "ps_train", "compare_summary")
PIPELINES = ("mnist_pytorch", "mnist_chainermn", "mnist_ps", "compare_frameworks")
EntryKind = Literal["component", "pipeline"]


@dataclass(frozen=True)
class Entry:
    """One component or pipeline: its Python module and the compiled YAML beside it."""

    kind: EntryKind
    name: str

    @property
    def module(self) -> str:
        """The module that defines it (a function of the same name)."""
        package = "kubetrain.components" if self.kind == "component" else "kubetrain.pipelines"
        return f"{package}.{self.name}"

    @property
    def source(self) -> Path:
        """The module's source file, with symlinks resolved (the file in components/ or pipelines/)."""
        spec = importlib.util.find_spec(self.module)
        if spec is None or spec.origin is None:
            raise InvalidInputError(f"{self.kind} {self.name}: module {self.module} not found")
        return Path(spec.origin).resolve()

    @property
    def yaml_path(self) -> Path:
        """The compiled YAML next to the source."""
        return self.source.with_suffix(".yaml")

    def load(self) -> Any:
        """The KFP component or pipeline object."""
        return getattr(importlib.import_module(self.module), self.name)


def entries() -> list[Entry]:
    """Every component, then every pipeline."""
    return [Entry("component", n) for n in COMPONENTS] + [Entry("pipeline", n) for n in PIPELINES]


def pipeline(name: str) -> Entry:
    """The pipeline called `name` (module name, or its KFP name with dashes)."""
    key = name.replace("-", "_")
    if key not in PIPELINES:
        raise InvalidInputError(f"pipeline: got {name!r}; expected one of {', '.join(PIPELINES)}")
    return Entry("pipeline", key)
