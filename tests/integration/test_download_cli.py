"""`kubetrain download` as a real process: exit codes, one-line errors, no partial output."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kubetrain.data.dataset_format import load_split, read_dataset_info
from tests.data_helpers import LoopbackServer, sha256_hex

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def _kubetrain(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBETRAIN_CACHE_DIR": str(cache), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "kubetrain.cli", "download", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_builtin_digits(tmp_path: Path) -> None:
    out = tmp_path / "digits"
    proc = _kubetrain("builtin:digits", "--out", str(out), "--shards", "3", cache=tmp_path / "c")
    assert proc.returncode == 0, proc.stderr
    assert f"{out}: digits train: 1438 records in 3 shard(s), features [1, 8, 8]" in proc.stdout
    info = read_dataset_info(out)
    assert len(info.shards("train")) == 3
    x, y = load_split(out, "test", verify=True)
    assert x.shape == (359, 1, 8, 8)
    assert y.max() == 9


def test_errors_exit_2_with_one_line_and_no_output(tmp_path: Path) -> None:
    data = b"not the promised content"
    with LoopbackServer({"d.npz": data}) as server:
        missing = _kubetrain(
            server.url("nope.npz"), "--out", str(tmp_path / "o1"), "--retries", "2", cache=tmp_path / "c"
        )
        wrong = _kubetrain(
            server.url("d.npz"), "--out", str(tmp_path / "o2"), "--sha256", "0" * 64, "--quiet", cache=tmp_path / "c"
        )
        assert [r.path for r in server.requests] == ["nope.npz", "d.npz"]
    assert missing.returncode == 2
    assert missing.stderr.strip() == (f"kubetrain download: {server.url('nope.npz')}: HTTP 404 Not Found")
    assert wrong.returncode == 2
    assert "Traceback" not in wrong.stderr
    assert f"expected {'0' * 64}, got {sha256_hex(data)}" in wrong.stderr
    unknown = _kubetrain("ftpx://host/x", "--out", str(tmp_path / "o3"), cache=tmp_path / "c")
    assert unknown.returncode == 2
    assert "unknown scheme 'ftpx'" in unknown.stderr
    bad_flag = _kubetrain("builtin:digits", "--out", str(tmp_path / "o4"), "--shards", "x", cache=tmp_path / "c")
    assert bad_flag.returncode == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]
