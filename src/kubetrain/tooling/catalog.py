"""The components and pipelines kubetrain ships, by name, and where their compiled YAML lives.

This package sits above the pipelines (the CLI's tooling), so it imports them directly; the
imports are made on first use because kfp is slow to import and `--help` should not wait for it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
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
        """The module that defines it (a function of the same name): a component's component.py in its folder."""
        if self.kind == "component":
            return f"kubetrain.components.{self.name}.component"
        return f"kubetrain.pipelines.{self.name}"

    @property
    def source(self) -> Path:
        """The module's source file, with symlinks resolved (components/<name>/component.py or pipelines/<name>.py)."""
        return Path(str(_modules()[self.module].__file__)).resolve()

    @property
    def home(self) -> Path:
        """components/ or pipelines/, where it lies (a component in a folder of its own there)."""
        return self.source.parents[1] if self.kind == "component" else self.source.parent

    @property
    def yaml_path(self) -> Path:
        """The compiled YAML next to the source."""
        return self.source.with_suffix(".yaml")

    def load(self) -> Any:
        """The KFP component or pipeline object."""
        return getattr(_modules()[self.module], self.name)


def _modules() -> dict[str, ModuleType]:
    """Every component and pipeline module by its dotted name.

    Read from `sys.modules` after importing them: the package `kubetrain.components` exports each
    component under its folder's name, so the attribute `kubetrain.components.pytorch_train` is
    the component, not the folder's package.
    """
    import kubetrain.components
    import kubetrain.pipelines.compare_frameworks
    import kubetrain.pipelines.mnist_chainermn
    import kubetrain.pipelines.mnist_ps
    import kubetrain.pipelines.mnist_pytorch  # noqa: F401 (imported for sys.modules)

    names = [Entry("component", n).module for n in COMPONENTS] + [Entry("pipeline", n).module for n in PIPELINES]
    return {name: sys.modules[name] for name in names}


def entries() -> list[Entry]:
    """Every component, then every pipeline."""
    return [Entry("component", n) for n in COMPONENTS] + [Entry("pipeline", n) for n in PIPELINES]


def pipeline(name: str) -> Entry:
    """The pipeline called `name` (module name, or its KFP name with dashes)."""
    key = name.replace("-", "_")
    if key not in PIPELINES:
        raise InvalidInputError(
            f"pipeline: got {name!r}; expected one of {', '.join(PIPELINES)}, "
            "or a file: a .py defining a @dsl.pipeline function, or a compiled pipeline .yaml"
        )
    return Entry("pipeline", key)
