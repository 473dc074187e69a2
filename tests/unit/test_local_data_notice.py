"""`render` → `launch --local`: the data set's local directory is named when nothing is there (issue 49.15).

The rendered job reads `/workspace/datasets/digits` (`--data`, and `KUBETRAIN_DATA_DIR` for a
user's own program); locally that is a directory of the workspace claim, which holds nothing until
a data set is put there. The launch says where, and how to fill it, before the job starts.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from kubetrain.backends.local.backend import LocalBackend
from kubetrain.backends.local.data_notice import missing_data_notice
from kubetrain.cli import build_parser
from kubetrain.commands.launch import say_missing_data
from kubetrain.commands.render import render_manifest

DATA = "/workspace/datasets/digits"


def _rendered(*argv: str) -> dict[str, Any]:
    args: argparse.Namespace = build_parser().parse_args(["render", *argv])
    return render_manifest(args)


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["pytorchjob", "--name", "job", "--command", '["python", "train.py"]'], "KUBETRAIN_DATA_DIR"),
        (["psjob", "--name", "job"], "--data"),
        (["mpijob", "--name", "job"], "--data"),
    ],
)
def test_a_missing_or_empty_data_set_is_named_with_its_local_directory(
    argv: list[str], named: str, tmp_path: Path
) -> None:
    manifest = _rendered(*argv)
    local = tmp_path / "claims" / "kubetrain-workspace" / "datasets" / "digits"

    def claim_dir(claim: str) -> Path:
        return tmp_path / "claims" / claim

    for _ in ("missing", "empty"):
        notice = missing_data_notice(manifest, claim_dir)
        assert notice is not None
        assert f"{DATA} ({named}) is {local}, which is missing or empty" in notice
        assert f"kubetrain download builtin:digits --out {local}" in notice
        local.mkdir(parents=True, exist_ok=True)
    (local / "dataset.json").write_text("{}", encoding="utf-8")
    assert missing_data_notice(manifest, claim_dir) is None


def test_a_data_set_outside_the_claims_is_not_guessed_at(tmp_path: Path) -> None:
    manifest = _rendered("pytorchjob", "--name", "job")
    (container,) = manifest["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"]
    container["args"][container["args"].index("--data") + 1] = "/data/baked-into-the-image"
    del manifest["spec"]["pytorchReplicaSpecs"]["Worker"]
    assert missing_data_notice(manifest, lambda claim: tmp_path / claim) is None


def test_launch_local_says_it_before_the_job_starts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    backend = LocalBackend(root=tmp_path)
    try:
        say_missing_data(_rendered("pytorchjob", "--name", "job"), backend)
    finally:
        backend.close()
    err = capsys.readouterr().err
    assert err.startswith(
        f"locally, the data set directory {DATA} (--data) is {backend.claim_dir('kubetrain-workspace')}"
    )
