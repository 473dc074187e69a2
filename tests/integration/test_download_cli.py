"""`kubetrain download` as a real process: exit codes, one-line errors, no partial output."""

from __future__ import annotations

import http.server
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kubetrain.data.dataset_format import load_split, read_dataset_info
from tests.data_helpers import LoopbackServer, sha256_hex
from tests.integration.test_download_limits import serving

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


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_a_download_with_exit_5_and_no_lock_left(tmp_path: Path, sig: signal.Signals) -> None:
    stop, sent = threading.Event(), threading.Event()

    class HalfThenStall(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("ETag", '"v1"')
            self.send_header("Content-Length", str(1 << 20))
            self.end_headers()
            try:
                self.wfile.write(b"x" * (1 << 18))
                self.wfile.flush()
                sent.set()
                stop.wait(60)
            except OSError:
                return

    cache = tmp_path / "c"
    env = {**os.environ, "KUBETRAIN_CACHE_DIR": str(cache), "OMP_NUM_THREADS": "1"}
    try:
        with serving(HalfThenStall) as base:
            proc = subprocess.Popen(
                [sys.executable, "-m", "kubetrain.cli", "download", f"{base}/d.npz", "--out", str(tmp_path / "o")],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
            # Signalled mid-transfer: the cache entry is locked and the server has sent a quarter.
            deadline = time.monotonic() + 60
            while not (sent.is_set() and list(cache.glob("*.lock"))):
                assert proc.poll() is None and time.monotonic() < deadline, "the download never got going"
                time.sleep(0.05)
            proc.send_signal(sig)
            _out, err = proc.communicate(timeout=60)
    finally:
        stop.set()
    assert proc.returncode == 5, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == (
        f"kubetrain download: stopped by {sig.name}; {tmp_path / 'o'} was not written; run the same command again to resume"
    )
    assert not (tmp_path / "o").exists()
    assert list(cache.glob("*.lock")) == []
