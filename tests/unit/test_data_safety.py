"""The data layer never deletes what it did not write, reads formats by their signatures, and fails
in one clear line (with the exit code that says why) on damaged data and local I/O errors."""

from __future__ import annotations

import errno
import http.server
import io
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from kubetrain.data.dataset_format import DATASET_JSON, load_split
from kubetrain.data.download import download
from kubetrain.data.errors import DataError, DiskFullError, DownloadUnavailableError
from kubetrain.data.formats import LocalFile, load_files
from kubetrain.data.idx import decode_idx
from kubetrain.errors import ExitCode
from tests.data_helpers import tar_bytes


def test_download_refuses_a_users_directory_that_holds_a_dataset_json(tmp_path: Path) -> None:
    mine = tmp_path / "mydir"
    (mine / "src").mkdir(parents=True)
    (mine / DATASET_JSON).write_text("{}")
    (mine / "thesis.txt").write_text("years of work")
    (mine / "src" / "main.py").write_text("print()")
    with pytest.raises(DataError, match="is not a kubetrain data set"):
        download("builtin:digits", mine, quiet=True)
    assert (mine / "thesis.txt").read_text() == "years of work" and (mine / "src" / "main.py").exists()


def test_download_refuses_a_real_dataset_with_stray_files_and_names_them(tmp_path: Path) -> None:
    out = tmp_path / "digits"
    download("builtin:digits", out, quiet=True)
    (out / "notes.md").write_text("mine")
    with pytest.raises(DataError, match=r"holds files that are not part of its data set \(notes.md\)"):
        download("builtin:digits", out, quiet=True)
    assert (out / "notes.md").read_text() == "mine"
    (out / "notes.md").unlink()
    download("builtin:digits", out, quiet=True, shards=2)  # a data set alone is replaced
    assert sorted(p.name for p in out.iterdir())[:2] == [DATASET_JSON, "test-00000-of-00001.npz"]


def _npz() -> bytes:
    buf = io.BytesIO()
    rng = np.random.default_rng(0)
    np.savez(buf, x_train=rng.random((20, 4)), y_train=np.arange(20) % 2, x_test=rng.random((6, 4)),
             y_test=np.arange(6) % 2)  # fmt: skip
    return buf.getvalue()


@pytest.mark.parametrize("compression", ["", "gz"])
def test_a_tar_holding_an_npz_reads_as_a_tar(tmp_path: Path, compression: str) -> None:
    """A plain .tar used to pass zipfile.is_zipfile (it finds the inner npz) and be read as an npz."""
    archive = tmp_path / "data.tar"
    archive.write_bytes(tar_bytes({"data.npz": _npz()}, compression=compression))
    (tmp_path / "work").mkdir()
    raw = load_files([LocalFile(archive, archive.name, "http://x/data.tar")], tmp_path / "work")
    assert len(raw.y_train) == 20


def test_a_truncated_shard_is_a_data_error_naming_it(tmp_path: Path) -> None:
    out = tmp_path / "digits"
    download("builtin:digits", out, quiet=True)
    shard = out / "train-00000-of-00001.npz"
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    with pytest.raises(DataError, match=r"shard train-00000-of-00001.npz of split 'train' is damaged"):
        load_split(out, "train")
    with pytest.raises(DataError, match="sha256 mismatch"):
        load_split(out, "train", verify=True)


def test_an_idx_file_with_a_wrong_magic_says_so() -> None:
    header = b"\x00\x00\x08\x04" + (2).to_bytes(4, "big") + (28).to_bytes(4, "big") * 2
    with pytest.raises(DataError, match="wrong idx magic number 00000804"):
        decode_idx(header + bytes(2 * 28 * 28), "images")


class _Loop(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(302)
        self.send_header("Location", self.path)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def looping_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Loop)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/data.npz"
    server.shutdown()
    server.server_close()


def test_a_redirect_loop_is_a_network_error_not_invalid_input(tmp_path: Path, looping_server: str) -> None:
    with pytest.raises(DownloadUnavailableError, match="redirects do not lead to the file") as failed:
        download(looping_server, tmp_path / "out", cache_dir=tmp_path / "cache", quiet=True)
    assert failed.value.exit_code == ExitCode.INFRASTRUCTURE


def test_a_full_disk_is_an_infrastructure_error_and_leaves_nothing_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_space(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(np.lib.format, "write_array", no_space)  # what writes each shard member
    with pytest.raises(DiskFullError, match="no space left on the device") as failed:
        download("builtin:digits", tmp_path / "out", quiet=True)
    assert failed.value.exit_code == ExitCode.INFRASTRUCTURE
    assert list(tmp_path.iterdir()) == []  # no output dir, no half-written temporary one


def test_an_output_under_a_file_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(DataError, match=r"cannot be written: .*choose another --out") as failed:
        download("builtin:digits", tmp_path / "a-file" / "out", quiet=True)
    assert failed.value.exit_code == ExitCode.INVALID_INPUT


def test_an_unwritable_training_output_fails_before_training_in_one_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    data = tmp_path / "digits"
    download("builtin:digits", data, quiet=True)
    (tmp_path / "a-file").write_text("x")
    done = subprocess.run(
        [sys.executable, "-m", "kubetrain.train.torch_ddp", "--data", str(data), "--output",
         str(tmp_path / "a-file" / "out"), "--epochs", "1"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == ExitCode.INVALID_INPUT, done.stderr[-2000:]
    assert "--output" in done.stderr and "Traceback" not in done.stderr
