"""The real node's containerd and kubelet in a mount namespace of their own (`-m tools.cluster.node_namespace SPEC`).

`tools/cluster/node.py` runs this under `unshare --mount --propagation private`, so nothing mounted
here reaches the host and everything goes when the namespace's last process ends:

- the kubelet writes `vm.overcommit_memory=1`, `kernel.panic=10` and `kernel.panic_on_oops=1`
  (and the CNI bridge plugin `net.ipv4.ip_forward=1`); here those files are bind mounts of files
  holding those values, so the host's settings never change (pods on one bridge need no forwarding:
  pod-to-pod is layer 2, and the API server and CoreDNS are host addresses);
- the paths the kubelet and containerd hard-code (`/var/lib/kubelet` for certificates and device
  plugins, `/var/log/containers`, `/var/lib/cni`, `/run/containerd` for shim sockets and runc state)
  are bind mounts of the node's run directory or a tmpfs.

Then containerd starts, the local images (pause, init) are imported, and the kubelet starts. This process stays as
their parent: SIGTERM stops the kubelet, then containerd, then exits.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

# Kernel settings the kubelet and the CNI bridge plugin write, and the values they want to read.
FAKE_SYSCTLS = {
    "vm/overcommit_memory": "1",
    "kernel/panic": "10",
    "kernel/panic_on_oops": "1",
    "net/ipv4/ip_forward": "1",
}
# Host path -> directory of the node's run directory mounted over it.
BIND_MOUNTS = {
    "/var/lib/kubelet": "kubelet-root",
    "/var/log": "varlog",
    "/var/lib/cni": "cni/cache",
}
TMPFS = "/run/containerd"


def _run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"node namespace: {' '.join(argv)} failed: {done.stderr.strip()}")


def prepare(run: Path) -> None:
    """Mount the fake kernel settings and the node's directories over the hard-coded host paths."""
    fakes = run / "sysctl"
    fakes.mkdir(parents=True, exist_ok=True)
    for name, value in FAKE_SYSCTLS.items():
        fake = fakes / name.replace("/", "_")
        fake.write_text(value + "\n")
        _run("mount", "--bind", str(fake), f"/proc/sys/{name}")
    _run("mount", "-t", "tmpfs", "-o", "mode=0711", "tmpfs", TMPFS)
    for target, source in BIND_MOUNTS.items():
        (run / source).mkdir(parents=True, exist_ok=True)
        _run("mount", "--bind", str(run / source), target)


def main(spec_path: str) -> int:
    """Prepare the namespace, start containerd, import the pause image, start the kubelet, wait."""
    spec = json.loads(Path(spec_path).read_text())
    run = Path(spec["run"])
    prepare(run)
    children: list[subprocess.Popen[bytes]] = []

    def stop(signum: int, frame: FrameType | None) -> None:
        for child in reversed(children):  # the kubelet first: it stops its pods through containerd
            child.terminate()
            try:
                child.wait(timeout=20)
            except subprocess.TimeoutExpired:
                child.kill()
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    with (run / "containerd.log").open("ab") as log:
        children.append(subprocess.Popen(spec["containerd"], stdout=log, stderr=subprocess.STDOUT))
    socket = Path(spec["socket"])
    ctr = [spec["ctr"], "--address", str(socket), "--namespace", "k8s.io"]
    deadline = time.monotonic() + 60
    while subprocess.run([*ctr, "version"], capture_output=True, check=False).returncode != 0:
        if children[0].poll() is not None or time.monotonic() > deadline:
            print(f"node namespace: containerd did not come up; see {run / 'containerd.log'}", file=sys.stderr)
            stop(signal.SIGTERM, None)
        time.sleep(0.2)
    for archive in spec["archives"]:  # images that are never pulled (the pause image, the init image)
        _run(*ctr, "images", "import", archive)
    with (run / "kubelet.log").open("ab") as log:
        children.append(subprocess.Popen(spec["kubelet"], stdout=log, stderr=subprocess.STDOUT))
    print("node namespace: containerd and kubelet started", flush=True)
    while True:
        signal.pause()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
