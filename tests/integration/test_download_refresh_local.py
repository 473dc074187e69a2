"""The shipped pipelines' download wiring under the real kfp.local: the cache key task runs, and feeds the download.

KFP's cache itself lives in the real backend (tests/cluster/test_kfp_caching.py runs a refresh twice
with the cache on); here the wiring every shipped pipeline uses (pipelines/_download.py) runs as
`kubetrain run` runs it: the key task resolves the run's id, and the download takes its output.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from kubetrain.cli import main

pytestmark = pytest.mark.slow  # pyproject's 600-s hang guard: 180 s ended it beside a cold Go build

PIPELINE = """
from kfp import dsl

from kubetrain.pipelines._download import download_task


@dsl.pipeline(name="refresh")
def refresh(refresh_dataset: bool = False):
    download_task(source="builtin:digits", workspace_pvc="kubetrain-workspace", refresh=refresh_dataset)
"""


def _run(tmp_path: Path, capsys: pytest.CaptureFixture[str], refresh: bool) -> dict[str, Any]:
    path = tmp_path / "refresh_pipeline.py"
    path.write_text(textwrap.dedent(PIPELINE), encoding="utf-8")
    args = ["run", str(path), "--runs-dir", str(tmp_path / "runs"), "--json", f"--param=refresh_dataset={refresh}"]
    code = main(args)
    out, err = capsys.readouterr()
    outcome: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    assert (code, outcome["state"]) == (0, "SUCCEEDED"), err
    return outcome


def test_the_download_cache_key_is_the_runs_id_only_with_a_refresh(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    refreshed = _run(tmp_path, capsys, True)["tasks"]
    again = _run(tmp_path, capsys, True)["tasks"]
    plain = _run(tmp_path, capsys, False)["tasks"]
    keys = [run["download-cache-key"]["parameters"]["Output"] for run in (refreshed, again, plain)]
    # Two refresh runs alike in every input still give the download different keys: no cache serves
    # the second the first's copy. Without a refresh the key is the same in every run.
    assert keys[0] and keys[1] and keys[0] != keys[1]
    assert keys[2] == ""
    for run in (refreshed, again, plain):
        assert run["download-dataset"]["state"] == "SUCCEEDED"
        assert set(run["download-dataset"]["artifacts"]) == {"dataset"}
