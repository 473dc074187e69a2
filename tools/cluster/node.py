"""A real node in the e2e cluster: containerd, runc, the kubelet, CNI, CoreDNS, kube-proxy and a registry.

Beside the kwok node (which the API-level tests and bench/scale.py use) this node runs pods for
real: images pulled from the local registry (containerd resolves `ghcr.io/...` through it), one
bridge network, cluster DNS, `kubernetes.default` reachable from pods. The settings that make it
work on a VM without a container engine are in tools/cluster/node_config.py; the mount namespace
that keeps the host unchanged is tools/cluster/node_namespace.py.

The node is tainted and labelled (node_config.NODE_TAINT / NODE_LABEL): only namespaces made for
real pods (`real_namespace`) select and tolerate it, through the PodNodeSelector and
PodTolerationRestriction admission plugins, so no other pod lands on it by chance.

`down()` leaves the host as it was: pods are deleted through the API first (the kubelet tears
down their network), then every process is stopped, containers left in the kubelet's cgroups
are killed and the cgroups removed, the bridge and the mount points made here go, and the
firewall gets back exactly its rules from before (tools/cluster/netfilter.py). Kernel settings
were never changed. The image store and the registry stay in the cache (~/.cache/kubetrain).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Protocol

import yaml

from tools.cluster import manifests, netfilter, node_config, oci, operators, processes
from tools.cluster.node_config import NODE_NAME, NodePaths

REPO_ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kubetrain" / "node"
# Host paths the node's namespace mounts over; created here when missing and removed by down().
MOUNT_POINTS = ("/run/containerd", "/var/lib/cni", "/var/lib/kubelet")
CGROUP_ROOT = Path("/sys/fs/cgroup")
HOST_TOOLS = {"/usr/sbin/runc": "runc", "iptables": "iptables", "nft": "nftables", "unshare": "util-linux",
              "ip": "iproute2", "mount": "mount"}  # fmt: skip


# The namespace whose pods run on this node, and its workspace claim (the name the components default to).
REAL_NAMESPACE = "kubetrain-real"
WORKSPACE_CLAIM = "kubetrain-workspace"


class NodeError(RuntimeError):
    """The real node could not start or stop cleanly; the message says what and where its logs are."""


class Control(Protocol):
    """What the node needs of the control plane (tools.cluster.controlplane.Cluster)."""

    @property
    def bin_dir(self) -> Path: ...

    @property
    def kubeconfig(self) -> Path: ...

    def kubectl(self, *args: str, as_launcher: bool = False, stdin: str | None = None) -> str: ...

    def kwokctl(self, *args: str) -> str: ...

    @property
    def pki(self) -> Path: ...


def paths(state: Path, bin_dir: Path) -> NodePaths:
    """The node's directories for a cluster whose state directory is `state`."""
    return NodePaths(state=state, cache=CACHE, bin_dir=bin_dir)


def ports() -> dict[int, str]:
    """Every host port the node's processes bind, and which binds it."""
    return {
        node_config.KUBELET_PORT: "the real node's kubelet",
        node_config.KUBELET_HEALTHZ: "the real node's kubelet (health)",
        node_config.KUBE_PROXY_HEALTHZ: "kube-proxy (health)",
        node_config.KUBE_PROXY_METRICS: "kube-proxy (metrics)",
        node_config.REGISTRY_PORT: "the local image registry",
        node_config.COREDNS_HEALTH: "CoreDNS (health)",
    }


def host_ip() -> str:
    """The address of the interface the default route leaves by: the node's InternalIP."""
    done = subprocess.run(["ip", "-j", "route", "get", "192.0.2.255"], capture_output=True, text=True, check=True)
    routes = json.loads(done.stdout)
    return str(routes[0]["prefsrc"])


def check_host() -> None:
    """NodeError naming what is missing when this machine cannot run the node (root, tools, cgroups)."""
    if os.geteuid() != 0:
        raise NodeError("the real node needs root (mounts, cgroups, the bridge); run `make e2e` as root")
    missing = [pkg for tool, pkg in HOST_TOOLS.items() if not (Path(tool).exists() or shutil.which(tool))]
    if missing:
        raise NodeError(f"the real node needs Debian's {', '.join(sorted(set(missing)))}: "
                        f"apt-get install {' '.join(sorted(set(missing)))}")  # fmt: skip


def start_registry(state: Path, bin_dir: Path) -> None:
    """The local registry (the images `images/build.sh --mirror` pushes), unless it is running."""
    p = paths(state, bin_dir)
    if any(r.name == "registry" and processes.running(r) for r in processes.records(p.run)):
        return
    processes.require_free({node_config.REGISTRY_PORT: "the local image registry"})
    p.run.mkdir(parents=True, exist_ok=True)
    p.registry_root.mkdir(parents=True, exist_ok=True)
    config = p.run / "registry.yaml"
    config.write_text(node_config.registry_config(p))
    # Each image build after a source change pushes new layers under the same tags; the old ones
    # would pile up in the cache. The registry is not running yet, so its offline collector is safe.
    subprocess.run([str(bin_dir / "registry"), "garbage-collect", "--delete-untagged", str(config)],
                   capture_output=True, check=False, timeout=600)  # fmt: skip
    processes.start(p.run, "registry", [str(bin_dir / "registry"), "serve", str(config)], env=os.environ,
                    log=p.run / "registry.log", cwd=p.run)  # fmt: skip
    registry = f"http://127.0.0.1:{node_config.REGISTRY_PORT}/v2/"
    operators.wait_for("the image registry", lambda: _http_ok(registry), 30, p.run / "registry.log")


def up(cluster: Control, state: Path) -> None:
    """Start the node's processes and wait until the node is Ready; NodeError or TimeoutError if not."""
    check_host()
    p = paths(state, cluster.bin_dir)
    p.run.mkdir(parents=True, exist_ok=True)
    processes.require_free({port: what for port, what in ports().items() if port != node_config.REGISTRY_PORT})
    netfilter.snapshot(p.run / "netfilter-baseline.json")
    _record_mount_points(p)
    _bridge(p)
    start_registry(state, cluster.bin_dir)
    _write_configs(cluster, p)
    spec = p.run / "namespace.json"
    spec.write_text(json.dumps({
        "run": str(p.run), "socket": str(p.containerd_socket), "ctr": str(cluster.bin_dir / "ctr"),
        "archives": [str(p.run / "pause.tar"), str(p.run / "busybox.tar")],
        "containerd": [str(cluster.bin_dir / "containerd"), "--config", str(p.run / "containerd.toml")],
        "kubelet": [
            str(cluster.bin_dir / "kubelet"), "--config", str(p.run / "kubelet.yaml"),
            "--kubeconfig", str(p.run / "kubelet.kubeconfig"), "--hostname-override", NODE_NAME,
            "--node-ip", host_ip(), "--root-dir", "/var/lib/kubelet", "--v", "1",
            "--node-labels", "=".join(node_config.NODE_LABEL),
        ],
    }))  # fmt: skip
    env = {**os.environ, "PATH": f"{cluster.bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    holder = ["unshare", "--mount", "--propagation", "private", "--fork", "--",
              sys.executable, "-m", "tools.cluster.node_namespace", str(spec)]  # fmt: skip
    processes.start(p.run, "node", holder, env=env, log=p.run / "node.log", cwd=REPO_ROOT)
    proxy = [str(cluster.bin_dir / "kube-proxy"), "--config", str(p.run / "kube-proxy.yaml")]
    processes.start(p.run, "kube-proxy", proxy, env=env, log=p.run / "kube-proxy.log", cwd=p.run)
    processes.start(p.run, "coredns", [str(cluster.bin_dir / "coredns"), "-conf", str(p.run / "Corefile")],
                    env=env, log=p.run / "coredns.log", cwd=p.run)  # fmt: skip
    operators.wait_for("the real node", lambda: _node_ready(cluster, p), 180, p.run / "kubelet.log")
    health = f"http://127.0.0.1:{node_config.COREDNS_HEALTH}/health"
    operators.wait_for("CoreDNS", lambda: _http_ok(health), 60, p.run / "coredns.log")
    _real_namespace(cluster, p)


def _real_namespace(cluster: Control, p: NodePaths) -> None:
    """REAL_NAMESPACE with its workspace claim (a host directory, shared by every pod) and the launcher's Role."""
    p.workspace.mkdir(parents=True, exist_ok=True)
    p.workspace.chmod(0o1777)  # pods run as uid 1000; a hostPath volume ignores fsGroup
    cluster.kubectl("apply", "--server-side", "-f", "-", stdin=real_namespace(REAL_NAMESPACE))
    claim = manifests.workspace_claim(REAL_NAMESPACE, WORKSPACE_CLAIM, host_path=str(p.workspace), size="10Gi",
                                      storage_class="kubetrain-real", path_must_exist=True)  # fmt: skip
    cluster.kubectl("apply", "--server-side", "-f", "-", stdin=claim)
    cluster.kubectl("apply", "--server-side", "-n", REAL_NAMESPACE, "-f", str(REPO_ROOT / "deploy" / "rbac.yaml"))


def _write_configs(cluster: Control, p: NodePaths) -> None:
    run = p.run
    node_kubeconfig = cluster.kwokctl("get", "kubeconfig", "--user", f"system:node:{NODE_NAME}",
                                      "--group", "system:nodes")  # fmt: skip
    (run / "kubelet.kubeconfig").write_text(node_kubeconfig)
    (run / "containerd.toml").write_text(node_config.containerd_config(p))
    for registry in node_config.MIRRORED_REGISTRIES:
        hosts = run / "containerd" / "certs.d" / registry / "hosts.toml"
        hosts.parent.mkdir(parents=True, exist_ok=True)
        hosts.write_text(node_config.registry_hosts(registry))
    (run / "cni" / "net.d").mkdir(parents=True, exist_ok=True)
    (run / "cni" / "net.d" / "10-kubetrain.conflist").write_text(node_config.cni_config(p))
    p.cni_bin.mkdir(parents=True, exist_ok=True)
    for plugin in ("bridge", "host-local", "loopback", "portmap"):
        link = p.cni_bin / plugin
        link.unlink(missing_ok=True)
        link.symlink_to(cluster.bin_dir / f"cni-{plugin}")
    (run / "kubelet.yaml").write_text(node_config.kubelet_config(p, cluster.pki / "ca.crt"))
    (run / "kube-proxy.yaml").write_text(node_config.kube_proxy_config(cluster.kubeconfig))
    (run / "Corefile").write_text(node_config.corefile(cluster.kubeconfig))
    oci.write_image(run / "pause.tar", node_config.PAUSE_IMAGE, {"/pause": cluster.bin_dir / "pause"}, ["/pause"])
    busybox = _busybox()
    applets = {f"/bin/{applet}": busybox for applet in node_config.BUSYBOX_APPLETS}
    oci.write_image(run / "busybox.tar", node_config.INIT_IMAGE, applets, ["/bin/sh"])


def _busybox() -> Path:
    """Debian's static BusyBox (package busybox-static), downloaded once into the cache."""
    binary = CACHE / "busybox" / "bin" / "busybox"
    if binary.exists():
        return binary
    work = CACHE / "busybox-download"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    for step in ("download", "extract"):
        if step == "download":
            argv = ["apt-get", "download", "busybox-static"]
        else:
            argv = ["dpkg-deb", "-x", str(next(work.glob("busybox-static_*.deb"))), "extracted"]
        done = subprocess.run(argv, cwd=work, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise NodeError(f"{' '.join(argv)} (for the init container image): {done.stderr.strip()[-1000:]}")
    binary.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(work / "extracted" / "bin" / "busybox", binary)
    shutil.rmtree(work)
    return binary


def _record_mount_points(p: NodePaths) -> None:
    """Create the empty host directories the namespace mounts over, remembering which were made here."""
    made = []
    for point in MOUNT_POINTS:
        if not Path(point).exists():
            Path(point).mkdir(parents=True)
            made.append(point)
    record = p.run / "mount-points.json"
    if not record.exists():
        record.write_text(json.dumps(made))


def _bridge(p: NodePaths) -> None:
    """The pod bridge with its gateway address, made before CoreDNS binds that address."""
    if subprocess.run(["ip", "link", "show", node_config.BRIDGE], capture_output=True, check=False).returncode == 0:
        return
    prefix = node_config.POD_SUBNET.split("/")[1]
    for argv in (["ip", "link", "add", node_config.BRIDGE, "type", "bridge"],
                 ["ip", "addr", "add", f"{node_config.GATEWAY}/{prefix}", "dev", node_config.BRIDGE],
                 ["ip", "link", "set", node_config.BRIDGE, "up"]):  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise NodeError(f"{' '.join(argv)}: {done.stderr.strip()}")


def _node_ready(cluster: Control, p: NodePaths) -> bool:
    alive = {r.name: processes.running(r) for r in processes.records(p.run)}
    dead = [name for name, ok in alive.items() if not ok]
    if dead:
        raise NodeError(f"{', '.join(dead)} exited; see the logs in {p.run}")
    try:
        node = json.loads(cluster.kubectl("get", "node", NODE_NAME, "-o", "json"))
    except RuntimeError:
        return False
    conditions = {c["type"]: c["status"] for c in node.get("status", {}).get("conditions", [])}
    return conditions.get("Ready") == "True"


def _http_ok(url: str) -> bool:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            return bool(reply.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def real_namespace(name: str) -> str:
    """A namespace whose pods run on the real node: "restricted" enforced, the node selected and tolerated."""
    key, value = node_config.NODE_LABEL
    toleration = [{"key": node_config.NODE_TAINT, "operator": "Exists", "effect": "NoSchedule"}]
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {
            "name": name,
            "labels": {f"pod-security.kubernetes.io/{mode}": "restricted" for mode in ("enforce", "warn", "audit")},
            "annotations": {"scheduler.alpha.kubernetes.io/node-selector": f"{key}={value}",
                            "scheduler.alpha.kubernetes.io/defaultTolerations": json.dumps(toleration)},
        },
    })  # fmt: skip


# --- down -----------------------------------------------------------------------------------------


def drain(cluster_kubectl: Path | None, kubeconfig: Path) -> None:
    """Delete the node's pods through the API (the kubelet then removes their network); best effort."""
    if cluster_kubectl is None or not kubeconfig.exists():
        return
    # An API server too busy to answer in time: clean_host kills what is left once the processes stop.
    with contextlib.suppress(subprocess.TimeoutExpired):
        subprocess.run(
            [str(cluster_kubectl), "--kubeconfig", str(kubeconfig), "delete", "pods", "--all-namespaces",
             "--field-selector", f"spec.nodeName={NODE_NAME}", "--grace-period=2", "--wait=true", "--timeout=60s"],
            capture_output=True, check=False, timeout=90,
        )  # fmt: skip


def clean_host(state: Path) -> list[str]:
    """After the processes are stopped: containers, cgroups, the bridge, mount points and firewall as before.

    Returns one line per thing removed.
    """
    run = state / "node"
    if not (run / "mount-points.json").exists():
        # This cluster never started a node: the bridge, the pod cgroups and the firewall rules on
        # this machine, if any, belong to another cluster's node (one per machine) and stay.
        return []
    killed = _kill_pod_processes()
    done = [f"killed {len(killed)} container process(es) left in pod cgroups: {killed}"] if killed else []
    removed = _remove_pod_cgroups()
    if removed:
        done.append(f"removed the kubelet's {len(removed)} pod cgroups (/kubepods in every hierarchy)")
    if subprocess.run(["ip", "link", "show", node_config.BRIDGE], capture_output=True, check=False).returncode == 0:
        subprocess.run(["ip", "link", "delete", node_config.BRIDGE], capture_output=True, check=False)
        done.append(f"deleted link {node_config.BRIDGE}")
    record = run / "mount-points.json"
    if record.exists():
        for point in json.loads(record.read_text()):
            try:
                Path(point).rmdir()
                done.append(f"removed {point}")
            except OSError:
                pass
    baseline = run / "netfilter-baseline.json"
    if baseline.exists() and (shutil.which("nft") or Path("/usr/sbin/nft").exists()):
        restored = netfilter.restore(baseline)
        if restored:
            done.append(f"firewall as before the node: deleted {'; '.join(restored)}")
    return done


def _pod_cgroups() -> list[Path]:
    """The kubelet's pod cgroups in every hierarchy (cgroupfs driver: `/kubepods` at each root)."""
    found = []
    for hierarchy in sorted(CGROUP_ROOT.iterdir()) if CGROUP_ROOT.is_dir() else []:
        top = hierarchy / "kubepods"
        if top.is_dir():
            found += sorted((d for d in top.rglob("*") if d.is_dir()), key=lambda d: len(d.parts), reverse=True)
            found.append(top)
    return found


def _kill_pod_processes() -> list[int]:
    pids: set[int] = set()
    for group in _pod_cgroups():
        try:
            pids |= {int(x) for x in (group / "cgroup.procs").read_text().split()}
        except OSError:
            continue
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(Path(f"/proc/{pid}").exists() for pid in pids):
        time.sleep(0.1)
    return sorted(pids)


def _remove_pod_cgroups() -> list[Path]:
    removed = []
    for group in _pod_cgroups():  # deepest first
        try:
            group.rmdir()
            removed.append(group)
        except OSError:
            continue
    return removed


def running(state: Path) -> bool:
    """Whether this cluster's node (its namespace holder) is running."""
    return any(r.name == "node" and processes.running(r) for r in processes.records(state / "node"))
