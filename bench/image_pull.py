"""Benchmark: a cold pull of kubetrain's images on the e2e cluster's real node, as a node that never ran one.

    KUBETRAIN_KFP=1 make cluster-up && .venv/bin/python bench/image_pull.py [NAME ...]  (default: launcher)

Every kubetrain image is removed from the node's containerd first (its content is garbage
collected with it), so nothing of them is left to share: then each NAME is pulled through the
node's own registry mirror configuration (what the kubelet does on a pod's first start), timed,
with its layers' size as pushed (images/build.sh pushes them uncompressed: what crossed the wire
here). A second pull of each, with the others present, shows what sharing the base saves. The
kubelet re-pulls what pods need next.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kubetrain.images import image_ref
from tools.cluster import controlplane
from tools.cluster.node import paths as node_paths

NAMES = ("launcher", "pytorch", "chainermn", "ps")


def _ctr(*args: str) -> str:
    bins = controlplane.build(real_node=True)
    socket = node_paths(controlplane.STATE, bins).containerd_socket
    done = subprocess.run([str(bins / "ctr"), "--address", str(socket), "--namespace", "k8s.io", *args],
                          capture_output=True, text=True, check=True, timeout=900)  # fmt: skip
    return done.stdout


def _remove(names: tuple[str, ...]) -> None:
    present = set(_ctr("images", "ls", "-q").split())
    refs = [r for r in present if any(r.startswith(image_ref(n).split(":")[0]) for n in names)]
    if refs:
        _ctr("images", "rm", "--sync", *refs)


def _pull(name: str) -> dict[str, float]:
    hosts = node_paths(controlplane.STATE, controlplane.build(real_node=True)).run / "containerd" / "certs.d"
    start = time.monotonic()
    _ctr("images", "pull", "--hosts-dir", str(hosts), "--plain-http", image_ref(name))
    seconds = time.monotonic() - start
    manifest = json.loads(_ctr("content", "get", _digest(name)))
    layers = manifest.get("layers") or []
    return {"seconds": seconds, "layers_mb": sum(layer["size"] for layer in layers) / 1e6}


def _digest(name: str) -> str:
    for line in _ctr("images", "ls").splitlines()[1:]:
        parts = line.split()
        if parts and parts[0] == image_ref(name):
            return parts[2]
    raise SystemExit(f"{image_ref(name)} is not on the node after its pull")


def main() -> int:
    """Cold pulls, then pulls with the other images present; a table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", default=["launcher"], help=f"any of {', '.join(NAMES)}")
    args = parser.parse_args()
    if unknown := set(args.names) - set(NAMES):
        parser.error(f"not kubetrain images: {sorted(unknown)}; choose from {', '.join(NAMES)}")
    print("| image | cold pull (nothing of kubetrain on the node) | layers as pushed (uncompressed) "
          "| pull with the other images present |")  # fmt: skip
    print("|---|---|---|---|")
    for name in args.names:
        _remove(NAMES)
        cold = _pull(name)
        for other in NAMES:
            if other != name:
                _pull(other)
        _remove((name,))
        shared = _pull(name)
        print(f"| {name} | {cold['seconds']:.1f} s | {cold['compressed_mb']:.0f} MB | {shared['seconds']:.1f} s |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
