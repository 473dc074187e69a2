"""`kubetrain download` against local I/O failures, as a real process (issue 16): a really full disk
(a small tmpfs, where this machine lets root mount one), an --out below a file or under /proc, and
a redirect loop. Each ends in one line on stderr with the documented exit code, no traceback, and
nothing partial left behind."""

from __future__ import annotations

import http.server
import io
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from kubetrain.errors import ExitCode
from tests.data_helpers import serving

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def _kubetrain(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBETRAIN_CACHE_DIR": str(cache), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "kubetrain.cli", "download", *args, "--quiet", "--retries", "1"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def _one_line(proc: subprocess.CompletedProcess[str], code: ExitCode, *words: str) -> None:
    assert proc.returncode == code, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for word in words:
        assert word in lines[0], lines[0]


@contextmanager
def _tmpfs(point: Path, options: str) -> Iterator[Path]:
    """A tmpfs mounted at `point`: a disk that really fills up. Skips where mounting is not allowed."""
    mount, umount = shutil.which("mount"), shutil.which("umount")
    point.mkdir()
    if os.geteuid() != 0 or mount is None or umount is None:
        pytest.skip("mounting a tmpfs needs root and mount(8)")
    done = subprocess.run([mount, "-t", "tmpfs", "-o", options, "tmpfs", str(point)], capture_output=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")
    try:
        yield point
    finally:
        subprocess.run([umount, "-l", str(point)], check=False)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB disk."""
    with _tmpfs(tmp_path / "small", "size=64k") as point:
        yield point


@pytest.fixture
def no_inodes(tmp_path: Path) -> Iterator[Path]:
    """A disk with room for bytes but no file left to create (its only inode is its root)."""
    with _tmpfs(tmp_path / "full-inodes", "size=64k,nr_inodes=1") as point:
        yield point


def _left_in(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file())


def test_builtin_data_onto_a_full_disk(tmp_path: Path, small_disk: Path) -> None:
    proc = _kubetrain("builtin:digits", "--out", str(small_disk / "digits"), cache=tmp_path / "cache")
    _one_line(proc, ExitCode.INFRASTRUCTURE, "no space left on the device")
    assert list(small_disk.iterdir()) == []  # neither the output nor its temporary directory


def test_a_download_that_fills_the_disk_removes_its_partial_file(tmp_path: Path, small_disk: Path) -> None:
    buf = io.BytesIO()
    rng = np.random.default_rng(0)
    np.savez(buf, x=rng.random((400, 64)), y=np.arange(400) % 10)  # ~200 KB: more than the disk holds
    with serving({"data.npz": buf.getvalue()}) as server:
        proc = _kubetrain(server.url("data.npz"), "--out", str(tmp_path / "out"), cache=small_disk)
    _one_line(proc, ExitCode.INFRASTRUCTURE, "no space left on the device")
    assert not [name for name in _left_in(small_disk) if name.endswith(".part")], _left_in(small_disk)
    assert not (tmp_path / "out").exists()


def test_a_cache_dir_that_cannot_take_a_file(tmp_path: Path, no_inodes: Path) -> None:
    with serving({"data.npz": b"PK"}) as server:
        proc = _kubetrain(server.url("data.npz"), "--out", str(tmp_path / "out"), cache=no_inodes)
    _one_line(proc, ExitCode.INFRASTRUCTURE, "no space left on the device", "--cache-dir")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("where", ["under-a-file", "proc"])
def test_an_out_that_cannot_be_written(tmp_path: Path, where: str) -> None:
    if where == "proc":
        if not Path("/proc/self").is_dir():
            pytest.skip("no /proc here")
        out = Path("/proc/kubetrain-test/digits")
    else:
        (tmp_path / "a-file").write_text("mine")
        out = tmp_path / "a-file" / "digits"
    proc = _kubetrain("builtin:digits", "--out", str(out), cache=tmp_path / "cache")
    _one_line(proc, ExitCode.INVALID_INPUT, str(out), "choose another --out")
    if where == "under-a-file":
        assert (tmp_path / "a-file").read_text() == "mine"


class _Loop(http.server.BaseHTTPRequestHandler):
    """Redirects every request to itself."""

    def do_GET(self) -> None:
        self.send_response(301)
        self.send_header("Location", self.path)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_a_redirect_loop_exits_with_the_network_code(tmp_path: Path) -> None:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Loop)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/data.npz"
        proc = _kubetrain(url, "--out", str(tmp_path / "out"), cache=tmp_path / "cache")
    finally:
        httpd.shutdown()
        httpd.server_close()
    _one_line(proc, ExitCode.INFRASTRUCTURE, "redirect")
    assert not (tmp_path / "out").exists()
