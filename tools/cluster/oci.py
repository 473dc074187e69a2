"""A one-layer OCI image archive written from files, for images too small to need a builder.

The node's pod sandbox image (the pause process) cannot be pulled from registry.k8s.io here; this
writes it as an OCI image layout in a tar, which `ctr images import` loads under the name given.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path


def _blob(data: bytes) -> tuple[str, bytes]:
    return "sha256:" + hashlib.sha256(data).hexdigest(), data


def _add(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, 0
    tar.addfile(info, io.BytesIO(data))


def write_image(archive: Path, name: str, files: dict[str, Path], entrypoint: list[str]) -> None:
    """Write an OCI archive of one layer holding `files` (path in image -> host file), run as `entrypoint`.

    The image runs as uid 65535, so a pod of it passes the "restricted" Pod Security level.
    """
    layer_buffer = io.BytesIO()
    with tarfile.open(fileobj=layer_buffer, mode="w") as layer:
        for target, source in sorted(files.items()):
            _add(layer, target.lstrip("/"), source.read_bytes(), mode=0o755)
    layer_digest, layer_bytes = _blob(layer_buffer.getvalue())
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": entrypoint, "User": "65535:65535"},
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
    }
    config_digest, config_bytes = _blob(json.dumps(config, sort_keys=True).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest,
                   "size": len(config_bytes)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer_digest,
                    "size": len(layer_bytes)}],
    }  # fmt: skip
    manifest_digest, manifest_bytes = _blob(json.dumps(manifest, sort_keys=True).encode())
    index = {
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": manifest_digest,
            "size": len(manifest_bytes), "platform": {"architecture": "amd64", "os": "linux"},
            "annotations": {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": name},
        }],
    }  # fmt: skip
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "w") as out:
        _add(out, "oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode())
        _add(out, "index.json", json.dumps(index).encode())
        for digest, data in ((layer_digest, layer_bytes), (config_digest, config_bytes),
                             (manifest_digest, manifest_bytes)):  # fmt: skip
            _add(out, "blobs/sha256/" + digest.split(":")[1], data)
