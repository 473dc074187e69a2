"""Smoke check of bench/download.py: it runs, both tools fetch the whole file, JSON is complete."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.bench, pytest.mark.slow, pytest.mark.timeout(450)]

BENCH = Path(__file__).resolve().parents[2] / "bench" / "download.py"


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is the benchmark's baseline")
def test_bench_download_smoke(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--size-mb", "8", "--rounds", "2", "--json", "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=400,  # bounds a hung run; a loaded machine makes it slow, not wrong
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["size_bytes"] == 8 << 20
    assert {len(v) for v in result["mb_per_s"].values()} == {2}
    assert result["ratio_kubetrain_over_curl"] > 0
    assert list(tmp_path.iterdir()) == []  # the served file and every download were removed
