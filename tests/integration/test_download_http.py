"""Downloads from a real loopback HTTP server: resume, retries, checksums, cache, archives."""

from __future__ import annotations

import io
import socket
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import numpy.typing as npt
import pytest

from kubetrain.data.dataset_format import DatasetInfo, load_split, read_dataset_info
from kubetrain.data.download import download
from kubetrain.data.errors import ChecksumError, CorruptFileError, DownloadUnavailableError, HTTPStatusError
from kubetrain.data.http import RetryPolicy
from kubetrain.errors import DataError, ExitCode
from tests.data_helpers import LoopbackServer, mnist_files, sha256_hex, tar_bytes

FAST = RetryPolicy(attempts=4, base_delay=0.01, max_delay=0.05, timeout=10)
IMAGES = "train-images-idx3-ubyte.gz"


# MNIST's files by name, and its arrays by (split, "images" or "labels").
Mnist = tuple[dict[str, bytes], dict[tuple[str, str], npt.NDArray[Any]]]


@pytest.fixture
def mnist() -> Mnist:
    return mnist_files(300, 100)


def _get(
    server: LoopbackServer,
    tmp_path: Path,
    source: str | list[str],
    *,
    sha256: str | None = None,
    shards: int = 1,
    refresh: bool = False,
    retry: RetryPolicy = FAST,
    quiet: bool = True,
    progress_stream: TextIO | None = None,
) -> DatasetInfo:
    return download(
        source, tmp_path / "out", sha256=sha256, shards=shards, cache_dir=tmp_path / "cache", refresh=refresh,
        retry=retry, quiet=quiet, progress_stream=progress_stream,
    )  # fmt: skip


def _cache_files(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in (tmp_path / "cache").iterdir() if not p.name.endswith(".lock"))


def _assert_no_output(tmp_path: Path) -> None:
    assert not (tmp_path / "out").exists()
    assert [p for p in tmp_path.iterdir() if p.name.startswith(".out")] == []


def test_base_url_gives_sharded_mnist(tmp_path: Path, mnist: Mnist) -> None:
    files, arrays = mnist
    with LoopbackServer(files) as server:
        info = _get(server, tmp_path, server.url(), shards=3)
        assert len(server.requests) == 4
    assert info == read_dataset_info(tmp_path / "out")
    assert info.feature_shape == (1, 28, 28)
    assert [s.records for s in info.shards("train")] == [100, 100, 100]
    assert info.num_records("test") == 100
    assert info.num_classes == 10
    x, y = load_split(tmp_path / "out", "train", verify=True)
    _xt, yt = load_split(tmp_path / "out", "test", verify=True)
    np.testing.assert_array_equal(y, arrays["train", "labels"])
    np.testing.assert_array_equal(yt, arrays["test", "labels"])
    norm = info.normalization
    np.testing.assert_allclose((x[:, 0] * norm["std"] + norm["mean"]) * 255, arrays["train", "images"], atol=1e-3)
    assert abs(float(x.mean())) < 1e-4  # standardised with the train split's own statistics
    cached = _cache_files(tmp_path)
    assert sorted(name.split("-", 1)[1] for name in cached) == sorted(files)


def test_list_of_raw_urls_with_checksums_seeded_split(tmp_path: Path) -> None:
    files, arrays = mnist_files(200, 50, gz=False)
    train = {k: v for k, v in files.items() if k.startswith("train")}
    with LoopbackServer(train) as server:
        urls = [f"{server.url(name)}#sha256={sha256_hex(data)}" for name, data in train.items()]
        info = _get(server, tmp_path, ",".join(urls))
        again = download(urls, tmp_path / "again", cache_dir=tmp_path / "cache2", quiet=True)
    # No t10k files: a deterministic, seeded 80/20 split of the 200 training records.
    assert (info.num_records("train"), info.num_records("test")) == (160, 40)
    _, y = load_split(tmp_path / "out", "train")
    _, yt = load_split(tmp_path / "out", "test")
    assert sorted(np.concatenate([y, yt]).tolist()) == sorted(arrays["train", "labels"].tolist())
    assert again.splits == info.splits


def test_connection_cut_mid_file_resumes_with_range(tmp_path: Path, mnist: Mnist) -> None:
    files, _arrays = mnist
    size = len(files[IMAGES])
    with LoopbackServer(files) as server:
        server.cut(IMAGES, size // 3)
        _get(server, tmp_path, server.url())
        first, second = server.requests_for(IMAGES)
    assert first.range is None
    assert second.range == f"bytes={size // 3}-"
    assert second.if_range is not None  # guards against splicing a changed file
    x, _ = load_split(tmp_path / "out", "train")
    assert x.shape == (300, 1, 28, 28)


def test_partial_file_from_a_failed_run_is_resumed(tmp_path: Path) -> None:
    files, _ = mnist_files(300, 100)
    size = len(files[IMAGES])
    once = RetryPolicy(attempts=1, base_delay=0.0, max_delay=0.0)
    with LoopbackServer(files) as server:
        server.cut(IMAGES, size // 2)
        with pytest.raises(DownloadUnavailableError, match="giving up after 1") as err:
            _get(server, tmp_path, server.url(), retry=once)
        assert err.value.exit_code == ExitCode.INFRASTRUCTURE
        _assert_no_output(tmp_path)
        # What arrived is kept under a .part name, never under the final one.
        parts = [n for n in _cache_files(tmp_path) if n.endswith(".part")]
        assert [n.removesuffix(".part").split("-", 1)[1] for n in parts] == [IMAGES]
        assert (tmp_path / "cache" / parts[0]).stat().st_size == size // 2
        _get(server, tmp_path, server.url(), sha256=None)
        assert server.requests_for(IMAGES)[-1].range == f"bytes={size // 2}-"
    assert not any(n.endswith(".part") for n in _cache_files(tmp_path))


def test_changed_file_restarts_instead_of_splicing(tmp_path: Path) -> None:
    old = bytes(range(256)) * 4000
    new = bytes(reversed(range(256))) * 4100
    once = RetryPolicy(attempts=1, base_delay=0.0, max_delay=0.0)
    with LoopbackServer({"blob.bin": old}) as server:
        server.cut("blob.bin", 10_000)
        with pytest.raises(DownloadUnavailableError):
            _get(server, tmp_path, server.url("blob.bin"), retry=once)
        server.put("blob.bin", new)
        # The new content fails as a data set, but only after a complete, verified fetch of it.
        with pytest.raises(ChecksumError, match=f"got {sha256_hex(new)}"):
            _get(server, tmp_path, server.url("blob.bin"), sha256="0" * 64)
        last = server.requests_for("blob.bin")[-1]
        assert last.range == "bytes=10000-"  # it asked to resume, the ETag no longer matched


def _npz(fill: float) -> bytes:
    buf = io.BytesIO()
    rng = np.random.default_rng(int(fill))  # random pixels: deflate leaves the file about this size
    np.savez_compressed(buf, x=rng.random((400, 8, 8)).astype(np.float32) + fill, y=np.arange(400) % 10)
    return buf.getvalue()


def test_a_part_without_validators_is_started_over_not_spliced(tmp_path: Path) -> None:
    # The server gives neither ETag nor Last-Modified: a Range request could not tell the new
    # file from the old, and the spliced npz would fail every later run with "Bad CRC-32".
    old, new = _npz(0.0), _npz(1.0)
    once = RetryPolicy(attempts=1, base_delay=0.0, max_delay=0.0)
    with LoopbackServer({"d.npz": old}, validators=False) as server:
        server.cut("d.npz", len(old) // 2)
        with pytest.raises(DownloadUnavailableError):
            _get(server, tmp_path, server.url("d.npz"), retry=once)
        server.put("d.npz", new)
        _get(server, tmp_path, server.url("d.npz"))
        assert [r.range for r in server.requests_for("d.npz")] == [None, None]
    x, _ = load_split(tmp_path / "out", "train")
    info = read_dataset_info(tmp_path / "out")
    # The new file's values (1 + [0, 1)), not a mix: the mean before standardisation says so.
    assert 1.0 < info.normalization["mean"] < 2.0
    assert x.shape[1:] == (1, 8, 8)


def test_a_damaged_cached_copy_says_to_refresh(tmp_path: Path) -> None:
    data = _npz(0.0)
    with LoopbackServer({"d.npz": data}) as server:
        _get(server, tmp_path, server.url("d.npz"))
        (cached,) = [tmp_path / "cache" / n for n in _cache_files(tmp_path)]
        damaged = bytearray(cached.read_bytes())
        damaged[len(damaged) // 2] ^= 0xFF  # as a splice or a bad disk leaves it
        cached.write_bytes(bytes(damaged))
        with pytest.raises(CorruptFileError) as failed:
            download(server.url("d.npz"), tmp_path / "again", cache_dir=tmp_path / "cache", retry=FAST, quiet=True)
        assert failed.value.exit_code == ExitCode.INVALID_INPUT
        message = str(failed.value)
        assert message.startswith(f"{server.url('d.npz')}: cannot read npz: ")
        assert f"the cached download {cached} may be damaged" in message
        assert message.endswith("download it again with --refresh (refresh=True)")
        # What it says works.
        download(
            server.url("d.npz"), tmp_path / "again", cache_dir=tmp_path / "cache", retry=FAST, quiet=True, refresh=True
        )
    assert cached.read_bytes() == data


def test_a_damaged_file_pinned_by_its_checksum_is_not_blamed_on_the_cache(tmp_path: Path) -> None:
    damaged = bytearray(_npz(0.0))
    damaged[len(damaged) // 2] ^= 0xFF  # damaged at the source: the checksum pins these very bytes
    with LoopbackServer({"d.npz": bytes(damaged)}) as server, pytest.raises(CorruptFileError) as failed:
        _get(server, tmp_path, server.url("d.npz"), sha256=sha256_hex(bytes(damaged)))
    assert "--refresh" not in str(failed.value)


def test_a_path_outside_ascii_is_sent_percent_encoded(tmp_path: Path) -> None:
    with LoopbackServer({"données/é1.npz": _npz(0.0)}) as server:
        info = _get(server, tmp_path, server.url("données/é1.npz"))
        (request,) = server.requests
    assert request.path == "données/é1.npz"  # the server decoded what was sent as UTF-8 %XX
    assert info.source == server.url("données/é1.npz")
    assert info.name == "é1"


def test_500_500_200_is_retried(tmp_path: Path, mnist: Mnist) -> None:
    files, _ = mnist
    with LoopbackServer(files) as server:
        server.fail(IMAGES, 500, 500)
        server.fail("train-labels-idx1-ubyte.gz", 429, 503)
        stream = io.StringIO()
        _get(server, tmp_path, server.url(), quiet=False, progress_stream=stream)
        assert len(server.requests_for(IMAGES)) == 3
        assert len(server.requests_for("train-labels-idx1-ubyte.gz")) == 3
    log = stream.getvalue()
    assert f"{IMAGES}: HTTP 500 Internal Server Error; retry 1/3" in log
    assert "HTTP 429 Too Many Requests; retry 1/3" in log
    assert (tmp_path / "out" / "dataset.json").is_file()


def test_persistent_5xx_gives_up(tmp_path: Path, mnist: Mnist) -> None:
    files, _ = mnist
    with LoopbackServer(files) as server:
        server.fail(IMAGES, *([502] * 10))
        with pytest.raises(DownloadUnavailableError, match=r"giving up after 4 .*HTTP 502"):
            _get(server, tmp_path, server.url())
        assert len(server.requests_for(IMAGES)) == 4
    _assert_no_output(tmp_path)


@pytest.mark.parametrize("status", [404, 403, 400])
def test_other_4xx_is_not_retried(tmp_path: Path, status: int) -> None:
    with LoopbackServer({"d.npz": b"x"}) as server:
        server.fail("d.npz", status)
        with pytest.raises(HTTPStatusError, match=f"d.npz: HTTP {status}") as err:
            _get(server, tmp_path, server.url("d.npz"))
        assert len(server.requests) == 1
    assert err.value.exit_code == ExitCode.INVALID_INPUT
    _assert_no_output(tmp_path)


def test_connection_refused_is_retried_then_reported(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again below: nothing listens there
    with pytest.raises(DownloadUnavailableError, match=r"cannot connect.*Connection refused"):
        download(
            f"http://127.0.0.1:{port}/d.npz", tmp_path / "out", cache_dir=tmp_path / "cache", retry=FAST, quiet=True
        )
    _assert_no_output(tmp_path)


def test_wrong_checksum_deletes_the_download(tmp_path: Path) -> None:
    data = b"some bytes that are not what was promised" * 100
    with LoopbackServer({"d.npz": data}) as server, pytest.raises(ChecksumError) as err:
        _get(server, tmp_path, server.url("d.npz"), sha256="ab" * 32)
    message = str(err.value)
    assert server.url("d.npz") in message
    assert "ab" * 32 in message
    assert sha256_hex(data) in message
    assert err.value.exit_code == ExitCode.INVALID_INPUT
    assert _cache_files(tmp_path) == []
    _assert_no_output(tmp_path)


def test_cache_reuse_and_refresh(tmp_path: Path) -> None:
    files, _ = mnist_files(100, 20)
    archive = tar_bytes(files)
    digest = sha256_hex(archive)
    with LoopbackServer({"mnist.tar.gz": archive}) as server:
        url = server.url("mnist.tar.gz")
        _get(server, tmp_path, url, sha256=digest)
        _get(server, tmp_path, url, sha256=digest)
        _get(server, tmp_path, url)
        assert len(server.requests) == 1  # both repeats used the cached, verified file
        _get(server, tmp_path, url, sha256=digest, refresh=True)
        assert len(server.requests) == 2
        # A different expected checksum does not trust the cache: it downloads and fails.
        with pytest.raises(ChecksumError):
            _get(server, tmp_path, url, sha256="cd" * 32)
        assert len(server.requests) == 3
    info = read_dataset_info(tmp_path / "out")
    assert (info.num_records("train"), info.num_records("test")) == (100, 20)


def test_traversal_archive_over_http(tmp_path: Path) -> None:
    evil = tar_bytes({"mnist/../../escaped.txt": b"gotcha"})
    with (
        LoopbackServer({"evil.tar.gz": evil}) as server,
        pytest.raises(DataError, match=r"evil.tar.gz: archive entry .*path traversal"),
    ):
        _get(server, tmp_path, server.url("evil.tar.gz"))
    _assert_no_output(tmp_path)
    assert not list(tmp_path.rglob("escaped.txt"))


def test_non_idx_and_missing_base_files(tmp_path: Path, mnist: Mnist) -> None:
    files, _ = mnist
    with LoopbackServer({**files, "train-labels-idx1-ubyte.gz": b"<html>oops</html>"}) as server:
        with pytest.raises(DataError, match=r"train-labels-idx1-ubyte.gz: not an MNIST idx file"):
            _get(server, tmp_path, server.url())
        with pytest.raises(DataError, match="has no train-images-idx3-ubyte: tried"):
            _get(server, tmp_path, server.url("elsewhere/"))
        # .gz missing, raw present: the base URL falls back to the raw name.
        paths = [r.path for r in server.requests_for("elsewhere/train-images-idx3-ubyte")]
        assert paths == ["elsewhere/train-images-idx3-ubyte"]
    _assert_no_output(tmp_path)
