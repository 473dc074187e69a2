"""Smoke checks of the launch benchmarks: one short round each, a well-formed result."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.bench, pytest.mark.timeout(300)]


@pytest.mark.parametrize(
    ("script", "other"), [("ddp_vs_torchrun.py", "torchrun"), ("chainermn_vs_mpirun.py", "mpiexec")]
)
def test_benchmark_runs_both_sides_and_reports_a_ratio(repo_root: Path, script: str, other: str) -> None:
    proc = subprocess.run(
        [sys.executable, str(repo_root / "bench" / script), "--rounds", "1", "--epochs", "1", "--json"],
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    for side in ("kubetrain", other):
        assert len(result[side]["samples_per_second"]) == 1
        assert result[side]["samples_per_second"][0] > 0
    # Same program, same data, same seed: the two launchers train the same model.
    assert result["kubetrain"]["test_accuracy"] == result[other]["test_accuracy"]
    assert result["ratio_samples_per_second"] > 0
