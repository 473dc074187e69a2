"""Benchmark: the DDP program as a PyTorchJob in real pods on the real node vs under `torchrun` on the host.

    make cluster-up && .venv/bin/python bench/pods_vs_host.py [--rounds 3] [--epochs 10] [--json]

Pods side: what the pytorch_train component submits (`kubetrain render pytorchjob`: Master + 2
Workers of ghcr.io/kubetrain/pytorch, gloo between pods over the CNI bridge, the master found by
its service name through CoreDNS, the digits and the output on the workspace claim), launched by
`kubetrain launch` as the launcher user, on the e2e cluster's real node (tools/cluster/node.py).
Host side: `torchrun --nproc_per_node 3` running the same module with the master replica's flags
(paths on the claim mapped to the host directory behind it) and the same data files. Both with
OMP_NUM_THREADS=1 (torchrun's own default for several processes; set in the pods' environment
here, which the rendered manifest does not do), alternating in one run. The cost of containers and
the pod network is the ratio of samples/s. Also measured on the pods side: from `kubetrain launch`
to every container started, and from the job's completion to the launcher's return (the API
server's times have one-second resolution).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import Side, alternate, base_env, markdown, run_processes, summary

from tests.cluster import real_pods
from tools.cluster import controlplane, node

TIMEOUT = 900.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def _stamp(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def main() -> int:
    """Run the benchmark and print the result (markdown, or JSON with --json)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--json", action="store_true")
    ns = p.parse_args()
    if not node.running(controlplane.STATE):
        print("pods_vs_host: start the cluster with its real node first (make cluster-up)", file=sys.stderr)
        return 2
    load_at_start = os.getloadavg()[0]
    cluster = controlplane.attach()  # as it runs: `up` would start the KFP tier it may have been left without
    real = real_pods.prepare(cluster, ["launcher", "pytorch"])
    timings: list[dict[str, float]] = []
    counter = iter(range(1, 10_000))

    def render(name: str) -> dict[str, Any]:
        manifest = real_pods.render("pytorchjob", name, "--workers", "2", "--epochs", str(ns.epochs),
                                    "--cpu", "500m", "--memory", "1Gi")  # fmt: skip
        for replica in manifest["spec"]["pytorchReplicaSpecs"].values():
            container = replica["template"]["spec"]["containers"][0]
            container.setdefault("env", []).append({"name": "OMP_NUM_THREADS", "value": "1"})
        return manifest

    def pods(out: Path) -> str:
        name = f"bench-pods-{os.getpid()}-{next(counter)}"  # a name of an earlier run would resume its checkpoint
        path = out / "job.yaml"
        path.write_text(json.dumps(render(name)))
        start = time.time()
        done = subprocess.run(
            [sys.executable, "-m", "kubetrain", "launch", "-f", str(path), "--json", "--delete-after", "never",
             "--kubeconfig", str(cluster.launcher_kubeconfig)],
            capture_output=True, text=True, check=False, timeout=TIMEOUT,
        )  # fmt: skip
        returned = time.time()
        if done.returncode != 0:
            raise RuntimeError(f"{name}: kubetrain launch exited {done.returncode}:\n{done.stderr[-3000:]}")
        result = json.loads(done.stdout.strip().splitlines()[-1])
        listed = json.loads(real.kubectl("get", "pods", "-l", f"training.kubeflow.org/job-name={name}", "-o", "json"))
        started = [_stamp(p["status"]["containerStatuses"][0]["state"]["terminated"]["startedAt"])
                   for p in listed["items"]]  # fmt: skip
        timings.append({"launch_to_all_started_s": max(started) - start,
                        "completion_to_return_s": returned - _stamp(result["completion_time"])})  # fmt: skip
        (out / "metrics.json").write_text(json.dumps(real_pods.metrics(real, name)))
        real.kubectl("delete", "pytorchjob", name, "--wait=true")
        shutil.rmtree(real.workspace / "runs" / name, ignore_errors=True)
        return f"PyTorchJob {node.REAL_NAMESPACE}/{name} Succeeded in real pods"

    def host(out: Path) -> str:
        master = render("flags")["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
        # The job's own directories become this run's (a checkpoint left by an earlier round would be
        # resumed: nothing to train); the data set is the same files on the host.
        args = [str(a).replace("/workspace/runs/flags/output", str(out))
                .replace("/workspace/runs/flags/checkpoints", str(out / "checkpoints"))
                .replace("/workspace", str(real.workspace)) for a in master["args"]]  # fmt: skip
        program = master["command"][-1]  # python -m kubetrain.train.torch_ddp
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "3", "--master_addr", "127.0.0.1",
               "--master_port", str(_free_port()), "-m", program, *args]  # fmt: skip
        return run_processes(cmd, label="torchrun --nproc_per_node 3", env=base_env(), log=out / "torchrun.log",
                             timeout=TIMEOUT)  # fmt: skip

    pods_side, host_side = Side("pods", pods), Side("torchrun", host)
    with tempfile.TemporaryDirectory(prefix="bench-pods-") as tmp:
        alternate(pods_side, host_side, rounds=ns.rounds, workdir=Path(tmp))
    result = summary(
        pods_side, host_side,
        command=" ".join(["bench/pods_vs_host.py", *sys.argv[1:]]),
        workload=f"builtin digits, mlp, {ns.epochs} epochs, batch 32/rank, 3 ranks, gloo, CPU, OMP_NUM_THREADS=1",
        load_at_start=load_at_start,
    )  # fmt: skip
    result["pod_timings"] = timings
    if ns.json:
        print(json.dumps(result, indent=2))
    else:
        print(markdown(result, "pods", "torchrun"))
        for i, t in enumerate(timings, 1):
            print(f"round {i}: launch to every container started {t['launch_to_all_started_s']:.1f} s, "
                  f"job completion to the launcher's return {t['completion_to_return_s']:.1f} s")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
