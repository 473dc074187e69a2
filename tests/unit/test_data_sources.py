"""Sources without a network: paths, file:// URLs, fsspec stores, npz/archives, bad input."""

from __future__ import annotations

import dataclasses
import gzip
import io
from collections.abc import Iterator
from pathlib import Path

import fsspec
import numpy as np
import numpy.typing as npt
import pytest

from kubetrain.data.dataset_format import load_split, read_dataset_info
from kubetrain.data.download import download, parse_source
from kubetrain.data.errors import ChecksumError
from kubetrain.data.fetch import normalize_sha256, split_checksum, url_name
from kubetrain.data.formats import mnist_role
from kubetrain.data.sources import Source, check_source
from kubetrain.errors import DataError, ExitCode
from tests.data_helpers import (
    idx_bytes,
    mnist_arrays,
    mnist_files,
    sha256_hex,
    tar_bytes,
    write_files,
    zip_bytes,
)


def _npz(**arrays: npt.ArrayLike) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _assert_no_output(tmp_path: Path) -> None:
    # Neither the output dir nor a temporary sibling of it survives a failed download.
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith((".out", "out"))) == []


@pytest.fixture
def memfs() -> Iterator[fsspec.AbstractFileSystem]:
    fs = fsspec.filesystem("memory")
    yield fs
    fs.rm("/kt", recursive=True)


def test_parse_source_and_names() -> None:
    assert parse_source("a, b,\nc") == ["a", "b", "c"]
    assert parse_source(["a", "b,c"]) == ["a", "b", "c"]
    with pytest.raises(DataError, match="got nothing"):
        parse_source(" , ")
    digest = "AB" * 32
    assert split_checksum(f"http://h/f.gz#sha256={digest}") == ("http://h/f.gz", digest.lower())
    assert split_checksum("http://h/f.gz#frag") == ("http://h/f.gz#frag", None)
    with pytest.raises(DataError, match="not 64 hexadecimal"):
        normalize_sha256("abc", "x")
    assert url_name("http://h/d/t10k-images-idx3-ubyte.gz?x=1") == "t10k-images-idx3-ubyte.gz"
    assert url_name("file:///tmp/a%20b.npz") == "a b.npz"
    assert mnist_role("t10k-images-idx3-ubyte.gz") == ("test", "images")
    assert mnist_role("train-labels.idx1-ubyte") == ("train", "labels")
    assert mnist_role("README") is None


def test_a_source_is_parsed_once_into_a_frozen_value() -> None:
    source = Source("a, b,\nc")
    assert (source.urls, source.label) == (("a", "b", "c"), "a, b, c")
    assert Source(("a", "b,c")).urls == ("a", "b", "c")
    assert check_source(source) == parse_source(source) == ["a", "b", "c"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        source.urls = ("d",)  # type: ignore[misc]


def test_mnist_directory_and_file_urls(tmp_path: Path) -> None:
    files, arrays = mnist_files(120, 40, gz=False)
    write_files(tmp_path / "raw", files)
    info = download(str(tmp_path / "raw"), tmp_path / "out", shards=2, quiet=True)
    assert info.name == "mnist"
    assert info.feature_shape == (1, 28, 28)
    assert (info.num_records("train"), info.num_records("test")) == (120, 40)
    x, y = load_split(tmp_path / "out", "train", verify=True)
    np.testing.assert_array_equal(y, arrays["train", "labels"])
    norm = info.normalization
    restored = (x * norm["std"] + norm["mean"]) / norm["scale"]
    np.testing.assert_allclose(restored[:, 0], arrays["train", "images"], atol=1e-3)
    # The same files as a list of file:// URLs with per-file checksums.
    urls = [f"{(tmp_path / 'raw' / n).as_uri()}#sha256={sha256_hex(d)}" for n, d in files.items()]
    again = download(urls, tmp_path / "out2", shards=2, quiet=True)
    assert again.splits == info.splits


def test_npz_layouts_gz_and_archives(tmp_path: Path) -> None:
    x, y = mnist_arrays(60, seed=4, rows=6, cols=6)
    keras = _npz(x_train=x[:50], y_train=y[:50], x_test=x[50:], y_test=y[50:])
    plain = _npz(x=x, y=y)
    cases = {
        "keras.npz": keras,
        "plain.npz": plain,
        "plain.npz.gz": gzip.compress(plain),
        "bundle.zip": zip_bytes({"data/keras.npz": keras, "README": b"hi"}),
        "mnist.tgz": tar_bytes(
            {f"mnist/{k}": v for k, v in mnist_files(30, 10, seed=2)[0].items()} | {"mnist/README.txt": b"about"}
        ),
    }
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        out = tmp_path / f"out-{name}"
        info = download(str(tmp_path / name), out, quiet=True)
        if name.startswith("mnist"):
            assert (info.num_records("train"), info.num_records("test")) == (30, 10)
        elif name.startswith("plain"):
            # No test split in the file: a seeded 80/20 split of the 60 records.
            assert (info.num_records("train"), info.num_records("test")) == (48, 12)
        else:
            assert (info.num_records("train"), info.num_records("test")) == (50, 10)
        assert read_dataset_info(out).feature_shape[0] == 1


def test_fsspec_store(tmp_path: Path, memfs: fsspec.AbstractFileSystem) -> None:
    files, _ = mnist_files(50, 20)
    for name, data in files.items():
        memfs.pipe(f"/kt/mnist/{name}", data)
    cache = tmp_path / "cache"
    info = download("memory://kt/mnist/", tmp_path / "out", cache_dir=cache, quiet=True)
    assert (info.num_records("train"), info.num_records("test")) == (50, 20)
    assert len(list(cache.iterdir())) == 4  # the four files: no `.lock` left per URL (issue 34)
    assert not list(cache.glob("*.lock"))
    x, y = mnist_arrays(20, seed=1, rows=4, cols=4)
    data = _npz(x=x, y=y)
    memfs.pipe("/kt/d.npz", data)
    download("memory://kt/d.npz", tmp_path / "o2", sha256=sha256_hex(data), cache_dir=cache)
    with pytest.raises(ChecksumError, match=r"expected 0{64}, got"):
        download("memory://kt/d.npz", tmp_path / "o3", sha256="0" * 64, cache_dir=cache)
    with pytest.raises(DataError, match="not found in the store"):
        download("memory://kt/missing.npz", tmp_path / "o4", cache_dir=cache)
    assert not (tmp_path / "o3").exists()
    assert not (tmp_path / "o4").exists()


@pytest.mark.parametrize(
    ("source", "match"),
    [
        ("foo://bucket/x.npz", "unknown scheme 'foo'"),
        ("s3://bucket/x.npz", r"s3:// driver is not installed.*kubetrain\[s3\]"),
        ("builtin:digits,builtin:digits", "stands alone"),
        # urlsplit's ValueError was a traceback; the URL is shown as redact_url cuts it by hand
        # (its userinfo and query values hidden even where urlsplit cannot read it).
        ("http://[::1/x.npz", r"^http://\[::1/x\.npz: not a valid URL: Invalid IPv6 URL; fix the URL"),
        ("https://user:pw@[::1/x.npz", r"^https://REDACTED@\[::1/x\.npz: not a valid URL"),
    ],
)
def test_bad_sources(tmp_path: Path, source: str, match: str) -> None:
    with pytest.raises(DataError, match=match) as err:
        download(source, tmp_path / "out", cache_dir=tmp_path / "cache")
    assert err.value.exit_code == ExitCode.INVALID_INPUT
    _assert_no_output(tmp_path)
    assert not (tmp_path / "cache").exists()


def test_bad_files(tmp_path: Path) -> None:
    files, _ = mnist_files(20, 10, gz=True)
    images = files["train-images-idx3-ubyte.gz"]
    empty_x, empty_y = mnist_arrays(0, seed=0)
    bad = {
        "html": (b"<html>404 page</html>", "unrecognised format"),
        "zero": (b"", "the file is empty"),
        "single.gz": (images, "a single idx file holds only images"),
        "trunc.npz.gz": (gzip.compress(_npz(x=np.zeros((9, 2)), y=np.zeros(9, int)))[:40], "truncated gzip"),
        "keys.npz": (_npz(a=np.zeros(3)), r"npz has arrays \['a'\]"),
        "emptyset.npz": (_npz(x=empty_x, y=empty_y), "empty"),
        "strings.npz": (_npz(x=np.array(["a", "1"]), y=np.zeros(2, int)), r"inputs have dtype <U1; expected numbers"),
        "evil.tar.gz": (tar_bytes({"../evil": b"x"}), "path traversal"),
    }
    for name, (data, match) in bad.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(DataError, match=match) as err:
            download(str(tmp_path / name), tmp_path / "out")
        assert str(tmp_path / name) in str(err.value)  # the message names the source
        _assert_no_output(tmp_path)
    assert not (tmp_path.parent / "evil").exists()
    # The MNIST set with a non-idx file where the labels should be, and a truncated gzip.
    write_files(tmp_path / "m1", {**files, "train-labels-idx1-ubyte.gz": b"<html></html>"})
    with pytest.raises(DataError, match=r"train-labels-idx1-ubyte.gz: not an MNIST idx file"):
        download(str(tmp_path / "m1"), tmp_path / "out")
    write_files(tmp_path / "m2", {**files, "train-images-idx3-ubyte.gz": images[:-20]})
    with pytest.raises(DataError, match=r"train-images-idx3-ubyte.gz: truncated gzip"):
        download(str(tmp_path / "m2"), tmp_path / "out")
    swapped = {
        "train-images-idx3-ubyte": idx_bytes(mnist_arrays(5, seed=0)[1]),
        "train-labels-idx1-ubyte": idx_bytes(mnist_arrays(5, seed=0)[1]),
    }
    write_files(tmp_path / "m3", swapped)
    with pytest.raises(DataError, match="expected images"):
        download(str(tmp_path / "m3"), tmp_path / "out")
    with pytest.raises(DataError, match="nothing-here/: does not exist"):
        download(str(tmp_path / "m1") + "/nothing-here/", tmp_path / "out")
    (tmp_path / "m4").mkdir()
    with pytest.raises(DataError, match=r"m4: has no train-images-idx3-ubyte: tried .*gz and"):
        download(str(tmp_path / "m4"), tmp_path / "out")
    _assert_no_output(tmp_path)


def test_checksum_on_local_file_never_deletes_it(tmp_path: Path) -> None:
    x, y = mnist_arrays(20, seed=1, rows=4, cols=4)
    path = tmp_path / "d.npz"
    path.write_bytes(_npz(x=x, y=y))
    with pytest.raises(DataError, match="sha256 mismatch"):
        download(str(path), tmp_path / "out", sha256="1" * 64)
    assert path.exists()
    with pytest.raises(DataError, match="shards: got 0"):
        download(str(path), tmp_path / "out", shards=0)
    with pytest.raises(DataError, match="checks a single file"):
        download(f"{path},{path}", tmp_path / "out", sha256="1" * 64)
    _assert_no_output(tmp_path)


def test_the_cache_lock_excludes_a_second_holder_and_is_removed(tmp_path: Path) -> None:
    """Two fetchers of one URL still take turns; the lock file goes with the last holder."""
    import threading

    from kubetrain.data.fetch import _locked

    entry = tmp_path / "entry"
    order: list[str] = []
    first_in, release = threading.Event(), threading.Event()

    def first() -> None:
        with _locked(entry):
            order.append("first in")
            first_in.set()
            release.wait(30)
            order.append("first out")

    def second() -> None:
        first_in.wait(30)
        with _locked(entry):
            order.append("second in")

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    first_in.wait(30)
    release.set()
    for t in threads:
        t.join(30)
    assert order == ["first in", "first out", "second in"]
    assert not (tmp_path / "entry.lock").exists()


@pytest.mark.parametrize(
    ("source", "what"),
    [
        ("https://h/x y.npz?X-Amz-Signature=planted1", "a space"),
        ("https://h/x.npz?X-Amz-Signature=plan ted1", "a space"),
        ("https://h/x\ty.npz?sig=planted1", "a tab"),
        ("https://h/x.npz?sig=plan\tted1", "a tab"),
        ("https://h/x.npz?sig=plan\rted1", "a carriage return"),
        ("https://h/x\x01y.npz?sig=planted1", "a control character (\\x01)"),
        ("s3://bucket/x\x7f.npz?token=planted1", "a control character (\\x7f)"),
        ("file:///data/my data.npz", "a space"),
    ],
)
def test_a_url_with_a_space_or_control_character_is_refused_before_any_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], source: str, what: str
) -> None:
    from kubetrain.cli import main

    code = main(["download", source, "--out", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "cache")])
    err = capsys.readouterr().err
    assert code == ExitCode.INVALID_INPUT
    assert err.count("\n") == 1, err  # one line: no retries, no progress
    assert f"the URL has {what} in it" in err and "%20" in err
    assert "planted" not in err and "ted1" not in err
    assert not (tmp_path / "cache").exists()


def test_a_space_is_part_of_an_object_stores_key_and_a_local_path(tmp_path: Path) -> None:
    assert parse_source("s3://bucket/my data.npz") == ["s3://bucket/my data.npz"]
    assert parse_source(str(tmp_path / "my data.npz")) == [str(tmp_path / "my data.npz")]
