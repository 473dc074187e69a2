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
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from kubetrain.images import image_ref
from tools.cluster import node_config
from tools.cluster.file_lock import locked

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TORCH_INDEX = "https://pypi.org/simple"
# Four images with two torch layers take about 13 GiB; each source change adds about 1 GiB, and a
# change of the base image another 13 GiB until the old one's layers go. Emptying costs a cold
# build (about 16 min on 2 cores), which CI cannot afford on top of its run: the free space left
# (MIN_FREE_BYTES) is the real guard, the size only bounds the leftovers.
STORAGE_LIMIT_BYTES = 48 * 2**30
MIN_FREE_BYTES = 12 * 2**30  # a cold build of the four needs about this much


class ImageBuildError(RuntimeError):
    """images/build.sh failed; the message carries the tail of its output."""


@dataclass(frozen=True)
class Built:
    """What one call built and pushed, and how long it took."""

    names: tuple[str, ...]
    seconds: float
    log: Path


def ensure(names: list[str], log: Path, *, node: node_config.NodePaths | None = None) -> Built:
    """Build `names` (what is unchanged comes from the layer cache) and push them to the node's registry.

    With `node` (a running real node), the node then forgets its copy of any of them it holds from
    an earlier build (refresh_node), so its pods run what was just built.
    """

    def forget_old_copies() -> None:
        if node is not None:
            refresh_node([image_ref(n) for n in names], ctr=node.bin_dir / "ctr", socket=node.containerd_socket)

    return _build(names, log, ["--mirror", f"127.0.0.1:{node_config.REGISTRY_PORT}"], then=forget_old_copies)


def prebuild(names: list[str], log: Path) -> Built:
    """Build `names` into the layer cache and push nothing: no registry needs to run yet.

    `make e2e` calls it before the cluster starts, so that a cold build (torch's 5 GB layer unpacked
    and committed) overlaps the cluster's start and the scenarios that need no image; the
    scenarios' own ensure() then finds every layer cached and only pushes.
    """
    return _build(names, log, [])


def _build(names: list[str], log: Path, extra: list[str], then: Callable[[], None] | None = None) -> Built:
    """images/build.sh with `extra` arguments for `names`, then `then` while this build's lock is still held."""
    env = {**os.environ, "TORCH_INDEX_URL": os.environ.get("TORCH_INDEX_URL", DEFAULT_TORCH_INDEX)}
    argv = ["bash", str(REPO_ROOT / "images" / "build.sh"), *extra]
    if not _docker_daemon():
        argv += ["--base", "local"]
        env["BUILDER"] = env.get("BUILDER", "buildah")
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    # One build at a time on this machine: two at once push the same layers to one registry (which
    # answers HTTP 500) and one's storage clean-up empties the layer cache under the other. The
    # e2e tier's two test sessions both prepare images; the second waits, then finds them built.
    with locked(_storage() / "ensure.lock"):
        with log.open("w") as out:
            if env.get("BUILDER") == "buildah":
                _tidy_storage(out)
            out.flush()  # the build's output follows in the same file
            done = subprocess.run([*argv, *names], stdout=out, stderr=subprocess.STDOUT, env=env, check=False,
                                  cwd=REPO_ROOT)  # fmt: skip
        if done.returncode != 0:
            raise ImageBuildError(f"images/build.sh {' '.join(names)} failed (exit {done.returncode}); "
                                  f"{log}:\n{log.read_text()[-3000:]}")  # fmt: skip
        if then is not None:
            then()
    return Built(tuple(names), time.monotonic() - start, log)


def _storage() -> Path:
    return Path(os.environ.get("BUILDAH_STORAGE") or Path.home() / ".cache" / "kubetrain" / "images")


def _tidy_storage(out: IO[str]) -> None:
    """Before a build (under the build lock, so none runs): drop what killed builds left, and keep room.

    A build killed half-way (its session stopped, a full disk) leaves its working container, which
    holds an overlay mount and its layers' space; no build is running, so every one is stale.
    Then buildah's storage is emptied when it outgrows STORAGE_LIMIT_BYTES or the disk runs short:
    every source change leaves the previous build's kubetrain layers behind (buildah keeps the
    intermediate images its layer cache needs, and cannot tell them from stale ones); emptying it
    costs one cold build (a few minutes, torch downloaded again) instead of a full disk.
    """
    storage = _storage()
    if not storage.is_dir():
        return
    buildah = ["buildah", "--root", str(storage / "storage"), "--runroot", str(storage / "runroot")]
    subprocess.run([*buildah, "rm", "--all"], stdout=out, stderr=subprocess.STDOUT, check=False)
    used = sum(_size(f) for f in storage.rglob("*"))
    free = shutil.disk_usage(storage).free
    if used > STORAGE_LIMIT_BYTES or free < MIN_FREE_BYTES:
        out.write(f"images: buildah storage {used / 2**30:.1f} GiB, {free / 2**30:.1f} GiB free: emptied\n")
        out.flush()
        subprocess.run([*buildah, "rmi", "--all", "--force"], stdout=out, stderr=subprocess.STDOUT, check=False)


MANIFEST_TYPES = ", ".join([
    "application/vnd.oci.image.manifest.v1+json", "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json", "application/vnd.docker.distribution.manifest.list.v2+json",
])  # fmt: skip


def registry_digest(ref: str) -> str | None:
    """The digest the node's registry holds for `ref` (`ghcr.io/kubetrain/<name>:<tag>`), None if it holds none."""
    repository, tag = ref.split("/", 1)[1].rsplit(":", 1)
    url = f"http://127.0.0.1:{node_config.REGISTRY_PORT}/v2/{repository}/manifests/{tag}"
    request = urllib.request.Request(url, method="HEAD", headers={"Accept": MANIFEST_TYPES})
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            digest: str | None = reply.headers.get("Docker-Content-Digest")
            return digest
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return None
        raise ImageBuildError(f"{url}: HTTP {e.code}") from e
    except OSError as e:
        raise ImageBuildError(f"{url}: the node's registry does not answer ({e})") from e


def refresh_node(refs: list[str], *, ctr: Path, socket: Path) -> list[str]:
    """Make the node forget its copy of each image whose tag now names another build; the refs forgotten.

    Pods pull a version tag only if the node lacks it (`IfNotPresent`), so a node that ran an earlier
    build of `ghcr.io/kubetrain/launcher:0.1.0` would run it on and on; without its copy, the kubelet
    pulls the tag again from the registry, what changed of it only.
    """
    argv = [str(ctr), "--address", str(socket), "--namespace", "k8s.io", "images"]
    listed = subprocess.run([*argv, "ls"], capture_output=True, text=True, check=True, timeout=60).stdout
    forget = stale_refs(listed, refs, registry_digest)
    for names in forget.values():
        subprocess.run([*argv, "rm", *names], capture_output=True, check=True, timeout=60)
    return list(forget)


def stale_refs(listing: str, refs: list[str], digest_of: Callable[[str], str | None]) -> dict[str, list[str]]:
    """Of `refs`, those the node holds (`ctr images ls` output) as another build than `digest_of(ref)`.

    Each maps to every name of that build to remove: the kubelet's digest-named ref of the same
    build goes too, or the tag would still resolve to it.
    """
    held = {parts[0]: parts[2] for parts in (line.split() for line in listing.splitlines()[1:]) if len(parts) > 2}
    stale = {}
    for ref in refs:
        digest = held.get(ref)
        if digest is not None and digest != digest_of(ref):
            repository = ref.split(":")[0]
            names = [r for r, d in held.items() if d == digest and r.split("@")[0].split(":")[0] == repository]
            stale[ref] = sorted({ref, *names})
    return stale


def _size(path: Path) -> int:
    # Another build may remove a layer while this walks the storage: what is gone takes no room.
    try:
        return path.stat().st_size if path.is_file() and not path.is_symlink() else 0
    except FileNotFoundError:
        return 0


def _docker_daemon() -> bool:
    try:
        done = subprocess.run(["docker", "version", "--format", "{{.Server.Version}}"], capture_output=True,
                              check=False, timeout=20)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0
