"""Benchmark: a shipped pipeline on the real KFP 2.17 backend vs the same pipeline under `kfp.local`, in one run.

    KUBETRAIN_KFP=1 make cluster-up && .venv/bin/python bench/kfp_backend.py [--pipeline NAME ...] [--json]

Every shipped pipeline by default, one after the other, each with its defaults.

Backend side: `kfp.Client.create_run_from_pipeline_package` of the committed YAML against the
e2e cluster's backend (tools/cluster/kfp/backend.py), polled once a second: run created -> the
first training pod Running, the training pods' end -> run SUCCEEDED, and the whole run. Where the
time goes comes from the run's Argo Workflow: each pod's start and finish (the API server's times,
one-second resolution), summed by role: KFP's driver pods, the launcher pods (kubetrain's steps,
training included), and the rest (Argo's scheduling between pods). Local side: `kubetrain run` of
the same pipeline with the same parameters (kfp.local, the local backend), its wall time.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import kfp

from kubetrain.names import LABEL_RUN_ID
from tools.cluster import controlplane
from tools.cluster.kfp import backend

REPO = Path(__file__).resolve().parents[1]


def _kubectl(*args: str) -> Any:
    kubectl = controlplane.STATE / "bin" / "kubectl"
    done = subprocess.run([str(kubectl), "--kubeconfig", str(controlplane.STATE / "kubeconfig"), "-n", "kubeflow",
                           *args, "-o", "json"], capture_output=True, text=True, check=True, timeout=60)  # fmt: skip
    return json.loads(done.stdout)


def _time(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def on_backend(pipeline: str, arguments: dict[str, Any]) -> dict[str, float]:
    """One run on the backend; its phases in seconds."""
    client = kfp.Client(host=f"http://127.0.0.1:{backend.API_HTTP_PORT}")
    start = time.time()
    run_id = client.create_run_from_pipeline_package(
        str(REPO / "pipelines" / f"{pipeline}.yaml"), arguments=arguments, run_name=f"bench-{int(start)}",
        experiment_name="kubetrain-bench").run_id  # fmt: skip
    first_running = training_end = 0.0
    while True:
        pods = _kubectl("get", "pods", "-l", f"{LABEL_RUN_ID}={run_id}")["items"]
        now = time.time()
        if any(p["status"].get("phase") == "Running" for p in pods):
            first_running, training_end = first_running or now, 0.0
        elif first_running and not training_end:
            training_end = now  # every training pod ended (or is gone)
        state = str(client.get_run(run_id).state)
        if state in ("SUCCEEDED", "FAILED", "CANCELED"):
            break
        time.sleep(1)
    done = time.time()
    if state != "SUCCEEDED":
        raise SystemExit(f"{pipeline}: the run ended {state}")
    workflow = _kubectl("get", "workflows", "-l", f"pipeline/runid={run_id}")["items"][0]
    roles = {"driver": 0.0, "launcher": 0.0}
    for node in workflow["status"]["nodes"].values():
        if node.get("type") != "Pod" or not node.get("finishedAt"):
            continue
        role = "driver" if "driver" in node["templateName"] else "launcher"
        roles[role] += _time(node["finishedAt"]) - _time(node["startedAt"])
    return {
        "created_to_first_training_pod_running": first_running - start,
        "training_end_to_succeeded": done - training_end,
        "whole_run": done - start,
        "driver_pods_seconds": roles["driver"],
        "launcher_pods_seconds": roles["launcher"],
    }


def locally(pipeline: str, arguments: dict[str, Any]) -> float:
    """The same pipeline under `kubetrain run` (kfp.local); its wall time."""
    params = [arg for key, value in arguments.items() for arg in ("--param", f"{key}={value}")]
    with tempfile.TemporaryDirectory() as work:
        start = time.time()
        subprocess.run([sys.executable, "-m", "kubetrain", "run", pipeline, *params], cwd=work, check=True,
                       capture_output=True, timeout=1800)  # fmt: skip
        return time.time() - start


PIPELINES = ("mnist_pytorch", "mnist_chainermn", "mnist_ps", "compare_frameworks")


def main() -> int:
    """Both sides of each pipeline, one after the other; a table (or --json, one object per pipeline)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pipeline", action="append", choices=PIPELINES, help="repeatable; default: all four")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = []
    for pipeline in args.pipeline or PIPELINES:
        remote = on_backend(pipeline, {})
        local = locally(pipeline, {})
        results.append({"pipeline": pipeline, "backend": remote, "kfp_local_whole_run": local,
                        "ratio_backend_to_local": remote["whole_run"] / local})  # fmt: skip
    if args.json:
        for result in results:
            print(json.dumps(result))
        return 0
    print(
        "| pipeline | backend whole run | kfp.local whole run | ratio | created -> first training pod Running "
        "| training pods end -> SUCCEEDED | KFP driver pods (sum) | launcher pods (sum, training included) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        b = r["backend"]
        print(f"| {r['pipeline']} | {b['whole_run']:.0f} s | {r['kfp_local_whole_run']:.0f} s "
              f"| {r['ratio_backend_to_local']:.1f} | {b['created_to_first_training_pod_running']:.0f} s "
              f"| {b['training_end_to_succeeded']:.0f} s | {b['driver_pods_seconds']:.0f} s "
              f"| {b['launcher_pods_seconds']:.0f} s |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
