"""kubetrain's images for the real node: built by images/build.sh and pushed to the node's registry.

The node's containerd pulls `ghcr.io/kubetrain/<name>:<version>` from the local registry (a mirror
in its hosts.toml), so pods use the image names the manifests carry. Without a Docker daemon the
images are built with buildah on a base made from Debian packages (`--base local`); buildah's
layer cache makes a second build of unchanged sources take seconds. torch comes from
`TORCH_INDEX_URL` (default PyPI: the CPU index is unreachable on the machines this runs on).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tools.cluster import node_config

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TORCH_INDEX = "https://pypi.org/simple"
# Four images with two torch layers take about 13 GiB; each source change adds about 1 GiB.
STORAGE_LIMIT_BYTES = 24 * 2**30
MIN_FREE_BYTES = 12 * 2**30  # a cold build of the four needs about this much


class ImageBuildError(RuntimeError):
    """images/build.sh failed; the message carries the tail of its output."""


@dataclass(frozen=True)
class Built:
    """What one call built and pushed, and how long it took."""

    names: tuple[str, ...]
    seconds: float
    log: Path


def ensure(names: list[str], log: Path) -> Built:
    """Build `names` (what is unchanged comes from the layer cache) and push them to the node's registry."""
    env = {**os.environ, "TORCH_INDEX_URL": os.environ.get("TORCH_INDEX_URL", DEFAULT_TORCH_INDEX)}
    argv = ["bash", str(REPO_ROOT / "images" / "build.sh"), "--mirror", f"127.0.0.1:{node_config.REGISTRY_PORT}"]
    if not _docker_daemon():
        argv += ["--base", "local"]
        env["BUILDER"] = env.get("BUILDER", "buildah")
    log.parent.mkdir(parents=True, exist_ok=True)
    if env.get("BUILDER") == "buildah":
        _limit_storage(log)
    start = time.monotonic()
    with log.open("w") as out:
        done = subprocess.run([*argv, *names], stdout=out, stderr=subprocess.STDOUT, env=env, check=False,
                              cwd=REPO_ROOT)  # fmt: skip
    if done.returncode != 0:
        raise ImageBuildError(f"images/build.sh {' '.join(names)} failed (exit {done.returncode}); "
                              f"{log}:\n{log.read_text()[-3000:]}")  # fmt: skip
    return Built(tuple(names), time.monotonic() - start, log)


def _limit_storage(log: Path) -> None:
    """Empty buildah's storage when it outgrows STORAGE_LIMIT_BYTES or the disk runs short.

    Every source change leaves the previous build's kubetrain layers behind (buildah keeps the
    intermediate images its layer cache needs, and cannot tell them from stale ones); emptying
    it costs one cold build (a few minutes, torch downloaded again) instead of a full disk.
    """
    storage = Path(os.environ.get("BUILDAH_STORAGE") or Path.home() / ".cache" / "kubetrain" / "images")
    if not storage.is_dir():
        return
    used = sum(f.stat().st_size for f in storage.rglob("*") if f.is_file() and not f.is_symlink())
    free = shutil.disk_usage(storage).free
    if used > STORAGE_LIMIT_BYTES or free < MIN_FREE_BYTES:
        with log.open("a") as out:
            out.write(f"images: buildah storage {used / 2**30:.1f} GiB, {free / 2**30:.1f} GiB free: emptied\n")
            subprocess.run(["buildah", "--root", str(storage / "storage"), "--runroot", str(storage / "runroot"),
                            "rmi", "--all", "--force"], stdout=out, stderr=subprocess.STDOUT, check=False)  # fmt: skip


def _docker_daemon() -> bool:
    try:
        done = subprocess.run(["docker", "version", "--format", "{{.Server.Version}}"], capture_output=True,
                              check=False, timeout=20)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0
