"""Smoke checks of the launch benchmarks: one short round each, a well-formed result.

The kubetrain side must really go through the launcher and the local backend (a job of the
right kind that Succeeded on the `local` backend), not plain processes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.bench, pytest.mark.timeout(180)]


@pytest.mark.parametrize(
    ("script", "other", "kind", "size"),
    [
        # Master + 1 worker, not the benchmark's 3 ranks: both launchers still rendezvous 2 ranks.
        ("ddp_vs_torchrun.py", "torchrun", "PyTorchJob", ["--workers", "1"]),
        ("chainermn_vs_mpirun.py", "mpiexec", "MPIJob", []),
    ],
    ids=["ddp_vs_torchrun.py-torchrun-PyTorchJob", "chainermn_vs_mpirun.py-mpiexec-MPIJob"],
)
def test_benchmark_runs_both_sides_and_reports_a_ratio(
    repo_root: Path, script: str, other: str, kind: str, size: list[str]
) -> None:
    proc = subprocess.run(
        [sys.executable, str(repo_root / "bench" / script), "--rounds", "1", "--epochs", "1", *size, "--json"],
        capture_output=True,
        text=True,
        timeout=170,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert result["rounds"] == 1
    assert result["first_in_round"] == ["kubetrain"]
    (launch,) = result["kubetrain"]["launches"]
    assert launch.startswith(f"{kind} default/") and launch.endswith("Succeeded on the local backend"), launch
    assert result[other]["launches"][0].startswith(other), result[other]["launches"]
    for side in ("kubetrain", other):
        assert len(result[side]["samples_per_second"]) == 1
        assert result[side]["samples_per_second"][0] > 0
        # The job's wall time includes rank 0's whole program, so what is left over is not negative.
        (wall,) = result[side]["wall_seconds"]
        (overhead,) = result[side]["overhead_seconds"]
        assert 0 <= overhead < wall
    # Same program, same data, same seed, same flags: the two launchers train the same model.
    assert result["kubetrain"]["test_accuracy"] == result[other]["test_accuracy"]
    assert result["ratio_samples_per_second"] > 0
