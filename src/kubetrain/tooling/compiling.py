"""Compile every component and pipeline to the YAML beside its source, or check that YAML is current.

The check compiles afresh into memory and compares with the committed file, ignoring the line
that records the SDK version (`sdkVersion: kfp-X.Y.Z`), so a different kfp patch release alone
does not fail it.
"""

from __future__ import annotations

import difflib
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubetrain.tooling.catalog import Entry, entries
from kubetrain.tooling.legacy import legacy_path, without_task_config

_SDK_VERSION = re.compile(r"^\s*sdkVersion:.*$", re.MULTILINE)


def normalized(text: str) -> str:
    """Compiled YAML without the SDK-version line."""
    return _SDK_VERSION.sub("", text)


def compile_pipeline(pipeline: Any, name: str) -> str:
    """The YAML kfp's compiler writes for a component or pipeline object (`name` names its temporary file)."""
    from kfp import compiler

    with tempfile.TemporaryDirectory(prefix="kubetrain-compile-") as tmp:
        path = Path(tmp) / f"{name}.yaml"
        compiler.Compiler().compile(pipeline, str(path))
        return path.read_text(encoding="utf-8")


def compile_text(entry: Entry) -> str:
    """The freshly compiled YAML of one entry."""
    return compile_pipeline(entry.load(), entry.name)


@dataclass(frozen=True)
class Stale:
    """A committed YAML that differs from a fresh compile (or is missing)."""

    entry: Entry
    diff: str
    path: Path | None = None  # the stale file, when not the entry's own YAML (the pre-2.15 copy)


def output_path(entry: Entry, out: Path | None) -> Path:
    """Where an entry's YAML goes: beside its source, or under `out` as it lies in components/ or pipelines/."""
    if out is None:
        return entry.yaml_path
    return out / f"{entry.kind}s" / entry.yaml_path.relative_to(entry.home)


def compile_all(selected: list[Entry] | None = None, *, out: Path | None = None) -> list[Path]:
    """Write every entry's YAML (and its pre-2.15 copy) beside its source or under `out`; returns the paths."""
    written = []
    for entry in selected or entries():
        text = compile_text(entry)
        path = output_path(entry, out)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        legacy = legacy_path(path)
        legacy.parent.mkdir(exist_ok=True)
        legacy.write_text(without_task_config(text), encoding="utf-8")
        written += [path, legacy]
    return written


def check_all(selected: list[Entry] | None = None) -> list[Stale]:
    """The entries whose committed YAML differs from a fresh compile, with a unified diff each."""
    stale = []
    for entry in selected or entries():
        text = compile_text(entry)
        for path, fresh_text in ((entry.yaml_path, text), (legacy_path(entry.yaml_path), without_task_config(text))):
            fresh = normalized(fresh_text)
            committed = normalized(path.read_text(encoding="utf-8")) if path.is_file() else ""
            if fresh != committed:
                diff = "".join(
                    difflib.unified_diff(
                        committed.splitlines(keepends=True),
                        fresh.splitlines(keepends=True),
                        fromfile=f"{path} (committed)" if committed else f"{path} (missing)",
                        tofile=f"{path} (fresh compile)",
                    )
                )
                stale.append(Stale(entry, diff, None if path == entry.yaml_path else path))
    return stale
