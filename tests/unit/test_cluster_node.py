"""The real node's configuration builders, the firewall restore and the pause image archive (no root needed)."""

from __future__ import annotations

import json
import tarfile
import tomllib
from pathlib import Path
from typing import Any

import yaml

from tests.data_helpers import tar_member
from tools.cluster import netfilter, node, node_config, oci
from tools.cluster.node_config import NodePaths


def _paths(tmp_path: Path) -> NodePaths:
    return NodePaths(state=tmp_path / "state", cache=tmp_path / "cache", bin_dir=tmp_path / "bin")


def test_containerd_config_is_toml_with_the_settings_this_host_needs(tmp_path: Path) -> None:
    config = tomllib.loads(node_config.containerd_config(_paths(tmp_path)))
    assert config["version"] == 3
    runtime = config["plugins"]["io.containerd.cri.v1.runtime"]
    assert runtime["restrict_oom_score_adj"] is True  # no CAP_SYS_RESOURCE: every sandbox fails without it
    runc = runtime["containerd"]["runtimes"]["runc"]["options"]
    assert runc == {"BinaryName": "/usr/sbin/runc", "SystemdCgroup": False}
    images = config["plugins"]["io.containerd.cri.v1.images"]
    assert images["pinned_images"]["sandbox"] == node_config.PAUSE_IMAGE
    assert images["registry"]["config_path"].startswith(str(tmp_path / "state"))
    assert config["root"] == str(tmp_path / "cache" / "containerd")  # images outlive the cluster


def test_the_registry_mirror_keeps_the_image_names_of_the_manifests() -> None:
    hosts = tomllib.loads(node_config.registry_hosts("quay.io", 18500))
    assert hosts["server"] == "https://quay.io"
    assert hosts["host"]["http://127.0.0.1:18500"]["capabilities"] == ["pull", "resolve"]


def test_kubelet_config_runs_on_cgroup_v1_with_absolute_disk_thresholds(tmp_path: Path) -> None:
    config = yaml.safe_load(node_config.kubelet_config(_paths(tmp_path), tmp_path / "ca.crt"))
    assert config["failCgroupV1"] is False
    assert config["evictionHard"]["nodefs.available"] == "2Gi"  # not a percentage of a mostly reserved disk
    assert config["authentication"]["anonymous"]["enabled"] is False
    assert config["authorization"]["mode"] == "Webhook"
    assert config["clusterDNS"] == [node_config.GATEWAY]
    assert config["registerWithTaints"][0]["key"] == node_config.NODE_TAINT


def test_kube_proxy_changes_no_host_wide_kernel_setting(tmp_path: Path) -> None:
    config = yaml.safe_load(node_config.kube_proxy_config(tmp_path / "kubeconfig"))
    assert config["conntrack"]["maxPerCore"] == 0 and config["conntrack"]["min"] == 0
    assert config["iptables"]["localhostNodePorts"] is False  # else route_localnet=1 on the host


def test_cni_config_is_one_bridge_without_masquerading(tmp_path: Path) -> None:
    config = json.loads(node_config.cni_config(_paths(tmp_path)))
    bridge = config["plugins"][0]
    assert bridge["bridge"] == node_config.BRIDGE and bridge["ipMasq"] is False
    assert bridge["ipam"]["ranges"][0][0] == {"subnet": node_config.POD_SUBNET, "gateway": node_config.GATEWAY}


def test_real_pod_namespaces_select_and_tolerate_the_node_and_enforce_restricted() -> None:
    ns = yaml.safe_load(node.real_namespace("kubetrain-real"))
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    annotations = ns["metadata"]["annotations"]
    assert annotations["scheduler.alpha.kubernetes.io/node-selector"] == "kubetrain.dev/node=real"
    tolerations = json.loads(annotations["scheduler.alpha.kubernetes.io/defaultTolerations"])
    assert tolerations == [{"key": node_config.NODE_TAINT, "operator": "Exists", "effect": "NoSchedule"}]


def _ruleset(*objects: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"metainfo": {"version": "1.0.6"}}, *objects]


def test_the_firewall_restore_removes_only_what_was_added() -> None:
    table = {"table": {"family": "ip", "name": "filter", "handle": 1}}
    input_chain = {"chain": {"family": "ip", "table": "filter", "name": "INPUT", "handle": 1}}
    kept_rule = {"rule": {"family": "ip", "table": "filter", "chain": "INPUT", "handle": 4, "expr": []}}
    baseline = _ruleset(table, input_chain, kept_rule)
    now = _ruleset(
        table, input_chain, kept_rule,
        {"rule": {"family": "ip", "table": "filter", "chain": "INPUT", "handle": 9, "expr": []}},
        {"chain": {"family": "ip", "table": "filter", "name": "KUBE-FIREWALL", "handle": 7}},
        {"table": {"family": "ip", "name": "nat", "handle": 2}},
        {"chain": {"family": "ip", "table": "nat", "name": "KUBE-SERVICES", "handle": 1}},
    )  # fmt: skip
    extra = netfilter.added(baseline, now)
    assert extra["rule"] == {("ip", "filter", "INPUT", "9")}
    assert extra["chain"] == {("ip", "filter", "KUBE-FIREWALL"), ("ip", "nat", "KUBE-SERVICES")}
    assert extra["table"] == {("ip", "nat")}


def test_the_pause_image_archive_is_an_oci_layout_naming_the_image(tmp_path: Path) -> None:
    binary = tmp_path / "pause"
    binary.write_bytes(b"\x7fELF not really")
    archive = tmp_path / "pause.tar"
    oci.write_image(archive, node_config.PAUSE_IMAGE, {"/pause": binary}, ["/pause"])
    with tarfile.open(archive) as tar:
        index = json.loads(tar_member(tar, "index.json").read())
        entry = index["manifests"][0]
        assert entry["annotations"]["io.containerd.image.name"] == node_config.PAUSE_IMAGE
        manifest = json.loads(tar_member(tar, "blobs/sha256/" + entry["digest"].split(":")[1]).read())
        config = json.loads(tar_member(tar, "blobs/sha256/" + manifest["config"]["digest"].split(":")[1]).read())
        assert config["config"]["User"] == "65535:65535"  # passes "restricted"
        layer = tar_member(tar, "blobs/sha256/" + manifest["layers"][0]["digest"].split(":")[1])
        with tarfile.open(fileobj=layer) as files:
            assert files.getnames() == ["pause"]
