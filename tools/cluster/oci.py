"""One-layer OCI images made from files, for images too small to need a builder.

The node's pod sandbox image (the pause process) cannot be pulled from registry.k8s.io here, nor
can the Kubeflow Pipelines and Argo images of the backend's pods (driver, launcher, executor,
persistence agent): each is a static binary, so one layer holding it is the whole image.
`write_image` writes an OCI image layout in a tar (`ctr images import` loads it);
`push_image` puts the same image into the local registry under a repository and tag, where the
node's containerd finds it through its mirror configuration.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


class RegistryError(RuntimeError):
    """The local registry refused an upload; the message names the image and the registry's answer."""


@dataclass(frozen=True)
class ImageSpec:
    """What goes into a one-layer image: files (path in image -> host file), writable dirs, how it runs."""

    files: dict[str, Path]
    entrypoint: list[str]
    user: str = "65535:65535"
    dirs: tuple[str, ...] = ()  # made world-writable and sticky, as /tmp
    workdir: str = "/"


@dataclass(frozen=True)
class _Blobs:
    layer: tuple[str, bytes]
    config: tuple[str, bytes]
    manifest: tuple[str, bytes]


def _blob(data: bytes) -> tuple[str, bytes]:
    return "sha256:" + hashlib.sha256(data).hexdigest(), data


def _add(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, 0
    tar.addfile(info, io.BytesIO(data))


def _blobs(spec: ImageSpec) -> _Blobs:
    layer_buffer = io.BytesIO()
    with tarfile.open(fileobj=layer_buffer, mode="w") as layer:
        for directory in spec.dirs:
            info = tarfile.TarInfo(directory.strip("/"))
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o1777, 0
            layer.addfile(info)
        for target, source in sorted(spec.files.items()):
            _add(layer, target.lstrip("/"), source.read_bytes(), mode=0o755)
    layer_blob = _blob(layer_buffer.getvalue())
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": spec.entrypoint, "User": spec.user, "Env": [f"PATH={DEFAULT_PATH}"],
                   "WorkingDir": spec.workdir},
        "rootfs": {"type": "layers", "diff_ids": [layer_blob[0]]},
    }  # fmt: skip
    config_blob = _blob(json.dumps(config, sort_keys=True).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_blob[0],
                   "size": len(config_blob[1])},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer_blob[0],
                    "size": len(layer_blob[1])}],
    }  # fmt: skip
    return _Blobs(layer_blob, config_blob, _blob(json.dumps(manifest, sort_keys=True).encode()))


def write_image(archive: Path, name: str, files: dict[str, Path], entrypoint: list[str]) -> None:
    """Write an OCI archive of one layer holding `files` (path in image -> host file), run as `entrypoint`.

    The image runs as uid 65535, so a pod of it passes the "restricted" Pod Security level.
    """
    blobs = _blobs(ImageSpec(files=files, entrypoint=entrypoint))
    index = {
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": MANIFEST_TYPE, "digest": blobs.manifest[0],
            "size": len(blobs.manifest[1]), "platform": {"architecture": "amd64", "os": "linux"},
            "annotations": {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": name},
        }],
    }  # fmt: skip
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "w") as out:
        _add(out, "oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode())
        _add(out, "index.json", json.dumps(index).encode())
        for digest, data in (blobs.layer, blobs.config, blobs.manifest):
            _add(out, "blobs/sha256/" + digest.split(":")[1], data)


def push_image(registry: str, repository: str, tag: str, spec: ImageSpec) -> str:
    """Upload the image to `registry` (host:port, plain HTTP) as repository:tag; returns its manifest digest.

    A blob the registry already holds is not sent again, so pushing an unchanged image costs three
    small requests.
    """
    blobs = _blobs(spec)
    base = f"http://{registry}/v2/{repository}"
    for digest, data in (blobs.layer, blobs.config):
        if _request("HEAD", f"{base}/blobs/{digest}", ok=(200, 404)) == 200:
            continue
        location = _start_upload(f"{base}/blobs/uploads/")
        separator = "&" if "?" in location else "?"
        _request("PUT", f"{location}{separator}digest={digest}", data=data, ok=(201,),
                 headers={"Content-Type": "application/octet-stream"})  # fmt: skip
    _request("PUT", f"{base}/manifests/{tag}", data=blobs.manifest[1], ok=(201,),
             headers={"Content-Type": MANIFEST_TYPE})  # fmt: skip
    return blobs.manifest[0]


def _start_upload(url: str) -> str:
    """POST an upload session; the absolute URL to PUT the blob to."""
    request = urllib.request.Request(url, data=b"", method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            location = str(reply.headers["Location"])
    except (urllib.error.URLError, OSError) as e:
        raise RegistryError(f"POST {url}: {e}") from e
    return urllib.parse.urljoin(url, location)


def _request(method: str, url: str, *, ok: tuple[int, ...], data: bytes | None = None,
             headers: dict[str, str] | None = None) -> int:  # fmt: skip
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=120) as reply:
            status = int(reply.status)
    except urllib.error.HTTPError as e:
        status = e.code
        if status not in ok:
            raise RegistryError(f"{method} {url}: HTTP {status} {e.read()[:500]!r}") from e
    except (urllib.error.URLError, OSError) as e:
        raise RegistryError(f"{method} {url}: {e}") from e
    if status not in ok:
        raise RegistryError(f"{method} {url}: HTTP {status}, expected {ok}")
    return status
