"""The e2e scenarios compile their users' pipelines from threads running side by side."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from tests.cluster.kfp_pipelines import by_name_pipeline, users_pipeline

BODY = """
        @dsl.pipeline(name="{name}")
        def pipeline() -> None:
            __import__("time").sleep(0.3)  # a definition that takes a while, so the threads overlap
            data = claim(download{suffix}(source="builtin:digits"))
            claim(train{train_suffix}(dataset=data.outputs["dataset"], workers=0, epochs=1))
"""


def _compile(tmp_path: Path, i: int) -> dict[str, Any]:
    """Scenario i's pipeline: loaded from the YAML for even i, imported by name for odd i."""
    directory = tmp_path / str(i)
    directory.mkdir()
    if i % 2:
        body = BODY.format(name=f"by-name-{i}", suffix="_dataset", train_suffix="").replace("train(", "pytorch_train(")
        package = by_name_pipeline(directory, f"p{i}", body)
    else:
        package = users_pipeline(directory, f"p{i}", BODY.format(name=f"users-{i}", suffix="", train_suffix=""))
    spec: dict[str, Any] = next(iter(yaml.safe_load_all(package.read_text())))
    return spec


def test_pipelines_defined_in_threads_at_once_each_compile_to_their_own_spec(tmp_path: Path) -> None:
    # kfp keeps the pipeline being defined in a class attribute: unguarded, two threads defining
    # theirs at once failed with "Nested pipelines are not allowed" (CI, 2026-11-27).
    with ThreadPoolExecutor(4) as pool:
        specs = list(pool.map(lambda i: _compile(tmp_path, i), range(8)))
    names = [spec["pipelineInfo"]["name"] for spec in specs]
    assert names == [f"by-name-{i}" if i % 2 else f"users-{i}" for i in range(8)]
