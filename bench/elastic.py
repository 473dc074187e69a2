"""Benchmark: ElasticDL's elastic-scheduling experiment at one node's scale, elastic vs static PS jobs.

    make cluster-up && .venv/bin/python bench/elastic.py [--epochs 12] [--peak 40] [--json]

On the real node of the e2e cluster (tools/cluster/node.py), in one run, twice: an "online"
Deployment at a high priority (a small HTTP server, `python -m http.server`) whose replicas follow
a fixed day/night pattern (0, then most of the node, then 0 again), beside two parameter-server
training jobs of the same size at the default (low) priority:

- elastic: `ps_train` with min_workers=1, max_workers=W (dynamic sharding: the survivors of a
  preemption take its tasks; a pod that cannot be placed waits and joins later);
- static: the same jobs with workers=W and the master's static sharding (each worker owns a fixed
  slot of every epoch, as a DistributedSampler or a static TFJob split would; a preempted worker's
  slot waits for its replacement), which is what a user would pick without elasticity.

Every pod requests a slice of the node's allocatable CPU, so the kube-scheduler's own preemption
decides who gives way. Reported per side: each job's completion time and the pair's, the node's
CPU requests in use as a share of allocatable (sampled every 2 s while the jobs run; and while
both jobs of the pair still run, the window ElasticDL's utilisation figure describes), the
training pods' Pending pod-seconds (sampled likewise), records lost (`records_untrained`), test
accuracy, preemptions and re-queued tasks (the masters' metrics.json).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kubetrain.presets import image_ref
from tests.cluster import jobs, real_pods
from tests.cluster.real_pods import RESTRICTED_CONTAINER, RealNode
from tools.cluster import controlplane, node
from tools.cluster.node_config import NODE_NAME

ONLINE = "online-web"
ONLINE_CLASS = "kubetrain-bench-online"
SAMPLE_SECONDS = 2.0


def _millicores(quantity: str) -> int:
    return int(quantity[:-1]) if quantity.endswith("m") else int(float(quantity) * 1000)


def allocatable_millicores(real: RealNode) -> int:
    """The real node's allocatable CPU."""
    status = json.loads(real.cluster.kubectl("get", "node", NODE_NAME, "-o", "json"))["status"]
    return _millicores(str(status["allocatable"]["cpu"]))


def requested_millicores(real: RealNode) -> tuple[int, int]:
    """(CPU requested by the pods bound to the real node and not ended, training pods Pending)."""
    pods = json.loads(real.cluster.kubectl("get", "pods", "-A", "-o", "json"))["items"]
    used = pending = 0
    for pod in pods:
        phase = pod["status"].get("phase")
        if phase == "Pending" and "jobset.sigs.k8s.io/jobset-name" in pod["metadata"].get("labels", {}):
            pending += 1
        if pod["spec"].get("nodeName") != NODE_NAME or phase in ("Succeeded", "Failed"):
            continue
        for container in pod["spec"]["containers"]:
            cpu = container.get("resources", {}).get("requests", {}).get("cpu")
            used += _millicores(str(cpu)) if cpu else 0
    return used, pending


def online_deployment(real: RealNode, cpu: str) -> None:
    """The online service at 0 replicas, and its PriorityClass (above every training pod)."""
    priority_class = {
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": ONLINE_CLASS},
        "value": 100000, "preemptionPolicy": "PreemptLowerPriority", "description": "kubetrain bench: online work",
    }  # fmt: skip
    real.cluster.kubectl("apply", "--server-side", "-f", "-", stdin=yaml.safe_dump(priority_class))
    container = {
        "name": "web", "image": image_ref("launcher"), "securityContext": RESTRICTED_CONTAINER,
        "command": ["python", "-m", "http.server", "8080"],
        "resources": {"requests": {"cpu": cpu, "memory": "32Mi"}, "limits": {"memory": "64Mi"}},
    }  # fmt: skip
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": ONLINE},
        "spec": {
            "replicas": 0, "selector": {"matchLabels": {"app": ONLINE}},
            "template": {"metadata": {"labels": {"app": ONLINE}}, "spec": {
                "priorityClassName": ONLINE_CLASS, "terminationGracePeriodSeconds": 1,
                "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000,
                                    "seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [container]}},
        },
    }  # fmt: skip
    real.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(deployment))


def play_pattern(real: RealNode, pattern: list[tuple[float, int]], stop: threading.Event) -> None:
    """Scale the online Deployment to each (after seconds, replicas) of `pattern` in turn."""
    start = time.monotonic()
    for at, replicas in pattern:
        if stop.wait(max(0.0, at - (time.monotonic() - start))):
            return
        real.kubectl("scale", "deployment", ONLINE, f"--replicas={replicas}")


def _manifest(name: str, side: str, *, workers: int, epochs: int, cpu: str) -> dict[str, Any]:
    size = ["--min-workers", "1", "--max-workers", str(workers)] if side == "elastic" else ["--workers", str(workers)]
    manifest = real_pods.render("psjob", name, *size, "--ps-replicas", "2", "--epochs", str(epochs),
                                "--cpu", cpu, "--memory", "512Mi")  # fmt: skip
    if side == "static":
        # The master deals each epoch into one fixed slot per worker (a bench-only edit: static
        # sharding is the runtime's baseline mode, not a component input).
        master = manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
        master["args"] += ["--sharding", "static", "--num-workers", str(workers)]
    return manifest


def run_side(real: RealNode, side: str, ns: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """Two jobs of one side under the online pattern; what the table reports."""
    names = [f"el-{side[:3]}-{i}" for i in (1, 2)]
    for name in names:
        real.fresh_run(name)
    real.kubectl("scale", "deployment", ONLINE, "--replicas=0")
    procs, started = {}, time.monotonic()
    for name in names:
        manifest = _manifest(name, side, workers=ns.workers, epochs=ns.epochs, cpu=ns.pod_cpu)
        # The start timeout spans the peak: a static job's pods may wait that long for room.
        procs[name] = jobs.launch(real.cluster, manifest, tmp, "--start-timeout", "3600", "--timeout", "3600")
    stop = threading.Event()
    pattern = [(ns.quiet, ns.peak_replicas), (ns.quiet + ns.peak, 0)]
    player = threading.Thread(target=play_pattern, args=(real, pattern, stop), daemon=True)
    player.start()
    allocatable = allocatable_millicores(real)
    shares: list[float] = []
    shares_both: list[float] = []  # while every job of the pair still runs
    pending_pod_seconds = 0.0
    ended: dict[str, float] = {}
    codes: dict[str, int] = {}
    while len(ended) < len(names):
        used, pending = requested_millicores(real)
        shares.append(used / allocatable)
        if not ended:
            shares_both.append(used / allocatable)
        pending_pod_seconds += pending * SAMPLE_SECONDS
        for name, proc in procs.items():
            if name not in ended and proc.poll() is not None:
                ended[name] = time.monotonic() - started
                codes[name] = proc.returncode
        time.sleep(SAMPLE_SECONDS)
    stop.set()
    player.join(10)
    real.kubectl("scale", "deployment", ONLINE, "--replicas=0")
    for name, proc in procs.items():
        if codes[name] != 0:
            _, _, err = jobs.finish(proc)
            sys.exit(f"bench/elastic.py: {name} ({side}) failed, exit {codes[name]}:\n{err[-3000:]}")
    written = [real_pods.metrics(real, name) for name in names]
    return {
        "side": side,
        "exit_codes": codes,
        "job_seconds": {name: round(ended[name], 1) for name in names},
        "pair_seconds": round(max(ended.values()), 1),
        "cpu_requested_share_mean": round(sum(shares) / len(shares), 3),
        "cpu_requested_share_p50": round(sorted(shares)[len(shares) // 2], 3),
        "cpu_requested_share_both_running_mean": round(sum(shares_both) / max(1, len(shares_both)), 3),
        "pending_pod_seconds": round(pending_pod_seconds, 1),
        "records_lost": sum(int(w.get("records_untrained", -1)) for w in written),
        "test_accuracy": [round(float(w.get("test_accuracy", 0.0)), 4) for w in written],
        "preemptions": sum(int(w.get("preemptions", 0)) for w in written),
        "tasks_requeued": sum(int(w.get("tasks_requeued", 0)) for w in written),
        "max_workers_seen": [int(w.get("max_workers_seen", 0)) for w in written],
    }


def main() -> int:
    """Run both sides and print the table (markdown, or JSON with --json)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--workers", type=int, default=3, help="W: each job's (maximum) workers")
    p.add_argument("--pod-cpu", default="150m", help="CPU request of every training pod")
    p.add_argument("--online-cpu", default="300m", help="CPU request of one online replica")
    p.add_argument("--peak-replicas", type=int, default=3, help="online replicas at the peak ('day')")
    p.add_argument("--quiet", type=float, default=30.0, help="seconds of 'night' before the peak")
    p.add_argument("--peak", type=float, default=90.0, help="seconds the peak lasts")
    p.add_argument("--json", action="store_true")
    ns = p.parse_args()
    if not node.running(controlplane.STATE):
        sys.exit("bench/elastic.py needs the e2e cluster's real node: make cluster-up")
    cluster = controlplane.attach()  # as it runs: `up` would start the KFP tier it may have been left without
    real = real_pods.prepare(cluster, ["launcher", "ps"])
    online_deployment(real, ns.online_cpu)
    with tempfile.TemporaryDirectory() as tmp:
        sides = [run_side(real, side, ns, Path(tmp)) for side in ("elastic", "static")]
    real.kubectl("delete", "deployment", ONLINE, "--ignore-not-found")
    elastic, static = sides
    result = {
        "command": "bench/elastic.py " + " ".join(sys.argv[1:]),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "allocatable_millicores": allocatable_millicores(real),
        "sides": sides,
        "pair_speedup": round(static["pair_seconds"] / elastic["pair_seconds"], 3),
    }
    if ns.json:
        print(json.dumps(result, indent=2))
        return 0
    rows = [
        ("each job's completion (s)", "job_seconds"), ("the pair's completion (s)", "pair_seconds"),
        ("CPU requested / allocatable, mean", "cpu_requested_share_mean"),
        ("CPU requested / allocatable, median", "cpu_requested_share_p50"),
        ("CPU requested / allocatable while both jobs run, mean", "cpu_requested_share_both_running_mean"),
        ("training pods Pending (pod-s)", "pending_pod_seconds"), ("records lost", "records_lost"),
        ("test accuracy", "test_accuracy"), ("preemptions", "preemptions"), ("tasks re-queued", "tasks_requeued"),
        ("most workers at once", "max_workers_seen"),
    ]  # fmt: skip
    print(f"`{result['command']}` ({result['machine']}, allocatable {result['allocatable_millicores']}m)\n")
    print("| | elastic | static |\n|---|---|---|")
    for label, key in rows:
        print(f"| {label} | {elastic[key]} | {static[key]} |")
    print(f"\nstatic pair / elastic pair: **{result['pair_speedup']}×**")
    return 0


if __name__ == "__main__":
    sys.exit(main())
