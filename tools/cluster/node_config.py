"""The real node's configuration files, as pure builders: one function per file, no I/O.

The settings that make a kubelet and containerd run on this kind of machine (a VM with cgroup v1
hybrid, no CAP_SYS_RESOURCE, a disk that is mostly reserved, no registry on the internet) are each
explained where they are set. `tools/cluster/node.py` writes these files and starts the processes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import yaml

NODE_NAME = "kubetrain-node"
# Pods of the real node: the bridge, its gateway (also CoreDNS's address) and the pod subnet.
BRIDGE = "kubetrain0"
POD_SUBNET = "10.244.0.0/24"
GATEWAY = "10.244.0.1"
# The API server's default service range (kwokctl passes none): `kubernetes.default` is its first address.
SERVICE_SUBNET = "10.0.0.0/24"
KUBERNETES_SERVICE_IP = "10.0.0.1"
CLUSTER_DOMAIN = "cluster.local"
# Host ports of the node's processes, beside the operators' 1808x/1944x.
KUBELET_PORT = 18250
KUBELET_HEALTHZ = 18248
KUBE_PROXY_HEALTHZ = 18256
KUBE_PROXY_METRICS = 18249
REGISTRY_PORT = 18500
COREDNS_HEALTH = 18181
# The node carries this label and taint; only the namespaces made for real pods select and tolerate it.
NODE_LABEL = ("kubetrain.dev/node", "real")
NODE_TAINT = "kubetrain.dev/real-node"
PAUSE_IMAGE = "localhost/kubetrain/pause:1"
# The PyTorchJob workers' init container waits for the master's DNS name with `sh`, `nslookup` and
# `seq`; the operator's default image (alpine:3.10) cannot be pulled here, so the training-operator
# is given this one instead (its --pytorch-init-container-image flag): Debian's static BusyBox.
INIT_IMAGE = "localhost/kubetrain/busybox:1.35"
BUSYBOX_APPLETS = ("sh", "nslookup", "grep", "seq", "sleep", "echo")
# Registries whose images the manifests name, pulled from the local registry instead (containerd's
# hosts.toml): kubetrain's and KFP's images on ghcr.io, Argo's executor on quay.io.
MIRRORED_REGISTRIES = ("ghcr.io", "quay.io")


@dataclass(frozen=True)
class NodePaths:
    """Where the node keeps its files: `state` goes with the cluster, `cache` outlives it (images)."""

    state: Path
    cache: Path
    bin_dir: Path

    @property
    def run(self) -> Path:
        """Sockets, configuration and logs of this start."""
        return self.state / "node"

    @property
    def containerd_socket(self) -> Path:
        """containerd's gRPC socket (the kubelet's CRI endpoint, `ctr -a`)."""
        return self.run / "containerd" / "containerd.sock"

    @property
    def containerd_root(self) -> Path:
        """Image content and snapshots: kept across clusters, so a second start pulls nothing."""
        return self.cache / "containerd"

    @property
    def registry_root(self) -> Path:
        """The local registry's storage (the images `images/build.sh` pushes)."""
        return self.cache / "registry"

    @property
    def workspace(self) -> Path:
        """The host directory behind the real pods' ReadWriteMany workspace claim."""
        return self.run / "workspace"

    @property
    def cni_bin(self) -> Path:
        """The CNI plugins (bridge, host-local, loopback, portmap) under their plugin names."""
        return self.run / "cni-bin"


def containerd_config(paths: NodePaths) -> str:
    """containerd's config (version 3): everything under the node's directories, runc from Debian."""
    run = paths.run / "containerd"
    cri_runtime = {
        # Without CAP_SYS_RESOURCE every sandbox fails ("can't get final child's PID from pipe")
        # unless containerd only raises oom_score_adj, never lowers it.
        "restrict_oom_score_adj": True,
        # Pod network namespaces are mounted in the node's private mount namespace, not /run/netns.
        "netns_mounts_under_state_dir": True,
        "containerd": {
            "default_runtime_name": "runc",
            "runtimes": {"runc": {
                "runtime_type": "io.containerd.runc.v2",
                # crun refuses this host's cgroup v1 hybrid; Debian's runc works. cgroupfs: no systemd here.
                "options": {"BinaryName": "/usr/sbin/runc", "SystemdCgroup": False},
            }},
        },
        "cni": {"bin_dirs": [str(paths.cni_bin)], "conf_dir": str(paths.run / "cni" / "net.d")},
    }  # fmt: skip
    config = {
        "version": 3,
        "root": str(paths.containerd_root),
        "state": str(run / "state"),
        "grpc": {"address": str(paths.containerd_socket)},
        "ttrpc": {"address": f"{paths.containerd_socket}.ttrpc"},
        "plugins": {
            "io.containerd.internal.v1.opt": {"path": str(run / "opt")},
            "io.containerd.nri.v1.nri": {"disable": True},
            "io.containerd.grpc.v1.cri": {"disable_tcp_service": True, "stream_server_address": "127.0.0.1",
                                          "stream_server_port": "0"},
            "io.containerd.cri.v1.images": {
                "snapshotter": "overlayfs",
                # registry.k8s.io is unreachable: the sandbox image is built here and never pulled.
                "pinned_images": {"sandbox": PAUSE_IMAGE},
                "registry": {"config_path": str(run / "certs.d")},
            },
            "io.containerd.cri.v1.runtime": cri_runtime,
        },
    }  # fmt: skip
    return _toml(config)


def registry_hosts(registry: str, registry_port: int = REGISTRY_PORT) -> str:
    """containerd's hosts.toml for `registry`: pull through the local registry, so manifests keep their image names."""
    return (
        f'server = "https://{registry}"\n\n'
        f'[host."http://127.0.0.1:{registry_port}"]\n'
        '  capabilities = ["pull", "resolve"]\n'
    )


def cni_config(paths: NodePaths) -> str:
    """The pod network: one bridge on the host, addresses from host-local, no masquerading (pods stay local)."""
    return json.dumps(
        {
            "cniVersion": "1.0.0",
            "name": "kubetrain",
            "plugins": [
                {
                    "type": "bridge", "bridge": BRIDGE, "isGateway": True, "ipMasq": False, "hairpinMode": True,
                    "ipam": {"type": "host-local", "dataDir": str(paths.run / "cni" / "ipam"),
                             "ranges": [[{"subnet": POD_SUBNET, "gateway": GATEWAY}]],
                             "routes": [{"dst": "0.0.0.0/0"}]},
                },
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        },
        indent=2,
    )  # fmt: skip


def kubelet_config(paths: NodePaths, client_ca: Path) -> str:
    """The kubelet's KubeletConfiguration."""
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        # This host mounts cgroup v1 (hybrid); the kubelet refuses v1 unless told it is known.
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "containerRuntimeEndpoint": f"unix://{paths.containerd_socket}",
        "address": "0.0.0.0",
        "port": KUBELET_PORT,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": KUBELET_HEALTHZ,
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(client_ca)}},
        "authorization": {"mode": "Webhook"},
        "podLogsDir": str(paths.run / "varlog" / "pods"),
        "clusterDNS": [GATEWAY],
        "clusterDomain": CLUSTER_DOMAIN,
        "resolvConf": "/etc/resolv.conf",
        "failSwapOn": False,
        # Most of this disk is reserved: percentages would call disk pressure with tens of GiB free.
        "evictionHard": {"memory.available": "200Mi", "nodefs.available": "2Gi", "imagefs.available": "2Gi",
                         "nodefs.inodesFree": "5%", "imagefs.inodesFree": "5%"},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "registerWithTaints": [{"key": NODE_TAINT, "value": "true", "effect": "NoSchedule"}],
        "serializeImagePulls": False,
        "maxPods": 40,
    }  # fmt: skip
    return yaml.safe_dump(config, sort_keys=False)


def kube_proxy_config(kubeconfig: Path) -> str:
    """kube-proxy in iptables mode, changing no host-wide kernel setting (conntrack, route_localnet)."""
    config = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": NODE_NAME,
        "mode": "iptables",
        "clusterCIDR": POD_SUBNET,
        "bindAddress": "127.0.0.1",
        "healthzBindAddress": f"127.0.0.1:{KUBE_PROXY_HEALTHZ}",
        "metricsBindAddress": f"127.0.0.1:{KUBE_PROXY_METRICS}",
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        "iptables": {"localhostNodePorts": False},
    }  # fmt: skip
    return yaml.safe_dump(config, sort_keys=False)


def corefile(kubeconfig: Path) -> str:
    """CoreDNS on the bridge's gateway: cluster names from the API server, the rest from the host's resolver."""
    return (
        f"{CLUSTER_DOMAIN}:53 in-addr.arpa:53 {{\n"
        f"  bind {GATEWAY}\n"
        f"  kubernetes {CLUSTER_DOMAIN} in-addr.arpa {{\n"
        f"    kubeconfig {kubeconfig}\n"
        "    pods insecure\n"
        "    ttl 5\n"
        "  }\n"
        "  errors\n"
        "}\n"
        ".:53 {\n"
        f"  bind {GATEWAY}\n"
        "  forward . /etc/resolv.conf\n"
        "  cache 30\n"
        "  errors\n"
        f"  health 127.0.0.1:{COREDNS_HEALTH}\n"
        "}\n"
    )


def registry_config(paths: NodePaths, port: int = REGISTRY_PORT) -> str:
    """The local image registry (distribution v3): plain HTTP on the loopback, storage in the cache."""
    config = {
        "version": 0.1,
        "log": {"level": "warn"},
        "storage": {"filesystem": {"rootdirectory": str(paths.registry_root)}, "delete": {"enabled": True}},
        "http": {"addr": f"127.0.0.1:{port}"},
    }
    return yaml.safe_dump(config, sort_keys=False)


def _toml(value: dict[str, object], prefix: str = "") -> str:
    """The small TOML subset containerd's config needs: tables, strings, numbers, booleans, lists of strings."""
    scalars, tables = [], []
    for key, item in value.items():
        name = f'"{key}"' if "." in key else key
        if isinstance(item, dict):
            tables.append(_toml(item, f"{prefix}.{name}" if prefix else name))
        else:
            scalars.append(f"{name} = {_toml_value(item)}")
    head = [f"[{prefix}]"] if prefix and scalars else []
    return "\n".join([*head, *scalars, "", *tables]).strip() + "\n"


def _toml_value(item: object) -> str:
    if isinstance(item, bool):
        return "true" if item else "false"
    if isinstance(item, int | float):
        return str(item)
    if isinstance(item, str):
        return json.dumps(item)
    if isinstance(item, list):
        return "[" + ", ".join(_toml_value(x) for x in item) + "]"
    raise TypeError(f"cannot write {item!r} as TOML")
