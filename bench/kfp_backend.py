"""Benchmark: a shipped pipeline on the real KFP 2.17 backend vs KFP's floor and `kfp.local`, in one run.

    KUBETRAIN_KFP=1 make cluster-up && .venv/bin/python bench/kfp_backend.py [--pipeline NAME ...] [--json]

KFP's floor (bench/floor_pipelines.py, compiled here at bench time): the same DAG made of plain
lightweight components on the same backend, each training step one container training in its own
pod with one process. The headline is kubetrain / floor, whole run. Per kubetrain training step,
from the objects recorded while the run goes (a watch on pods and job kinds, so the jobs deleted on
success are still seen) and the step pod's log read through the API server's pods/log: the spans
of bench/floor_timeline.py and the launcher's own CPU time (its `launcher: cpu` line).

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
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import kfp
from floor_pipelines import IMAGES, compile_floor
from floor_timeline import (
    container_finished,
    container_started,
    job_of_step_log,
    pods_of_job,
    step_timeline,
    take_objects,
)

from kubetrain.kfp_runtime.usage import parse_usage_line
from kubetrain.names import LABEL_RUN_ID
from tools.cluster import controlplane
from tools.cluster.kfp import backend

REPO = Path(__file__).resolve().parents[1]


def _kubectl(*args: str) -> Any:
    kubectl = controlplane.STATE / "bin" / "kubectl"
    done = subprocess.run([str(kubectl), "--kubeconfig", str(controlplane.STATE / "kubeconfig"), "-n", "kubeflow",
                           *args, "-o", "json"], capture_output=True, text=True, check=True, timeout=60)  # fmt: skip
    return json.loads(done.stdout)


def _kubectl_argv(*args: str) -> list[str]:
    kubectl = controlplane.STATE / "bin" / "kubectl"
    return [str(kubectl), "--kubeconfig", str(controlplane.STATE / "kubeconfig"), "-n", "kubeflow", *args]


def _pod_log(pod: str, container: str = "main") -> str:
    """A pod's log through the API server's pods/log."""
    argv = _kubectl_argv("logs", pod, "-c", container)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)
    return done.stdout + done.stderr


# What the recorder watches: the pods, and every job kind a shipped pipeline submits.
WATCHED = ("pods", "pytorchjobs.kubeflow.org", "mpijobs.kubeflow.org", "jobsets.jobset.x-k8s.io",
           "trainjobs.trainer.kubeflow.org")  # fmt: skip


class Recorder:
    """The last version of every pod and job seen in the namespace while a run goes (jobs deleted on
    success, and their pods, included): one `kubectl get --watch -o json` per resource."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self._procs: list[subprocess.Popen[str]] = []
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def __enter__(self) -> Recorder:
        for resource in WATCHED:
            proc = subprocess.Popen(_kubectl_argv("get", resource, "--watch", "-o", "json"),
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)  # fmt: skip
            self._procs.append(proc)
            thread = threading.Thread(target=self._read, args=(resource, proc), daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def _read(self, resource: str, proc: subprocess.Popen[str]) -> None:
        buffer = ""
        assert proc.stdout is not None
        for line in proc.stdout:
            objects, buffer = take_objects(buffer + line)
            with self._lock:
                for obj in objects:
                    self.objects[(resource, obj["metadata"]["name"])] = obj

    def __exit__(self, *exc: object) -> None:
        for proc in self._procs:
            proc.terminate()
            proc.wait(timeout=10)

    def get(self, resource_prefix: str) -> list[dict[str, Any]]:
        """The objects of the resources whose name starts with `resource_prefix` ("pods", "pytorchjobs"...)."""
        with self._lock:
            return [o for (r, _), o in self.objects.items() if r.startswith(resource_prefix)]

    def job(self, name: str) -> dict[str, Any] | None:
        """The job called `name`, of whatever kind."""
        with self._lock:
            found = [o for (r, n), o in self.objects.items() if n == name and r != "pods"]
        return found[0] if found else None


def step_rows(workflow: dict[str, Any], recorder: Recorder) -> list[dict[str, Any]]:
    """Per step pod of the run's workflow (KFP's executor pods, main container): what it did and cost."""
    name = workflow["metadata"]["name"]
    pods = _kubectl("get", "pods", "-l", f"workflows.argoproj.io/workflow={name}")["items"]
    rows: list[dict[str, Any]] = []
    for pod in pods:
        containers = {c["name"]: c for c in pod["spec"]["containers"]}
        # KFP marks the pods that execute a component (not its drivers) with this role.
        role = (pod["metadata"].get("annotations") or {}).get("pipelines.kubeflow.org/runtime-role")
        if "main" not in containers or role != "launcher":
            continue
        start, end = container_started(pod, "main"), container_finished(pod, "main")
        if start is None or end is None:
            continue
        log = _pod_log(pod["metadata"]["name"])
        usage = parse_usage_line(log)
        row: dict[str, Any] = {
            "pod": pod["metadata"]["name"],
            "image": containers["main"]["image"],
            "step_wall": end - start,
            "launcher_cpu": usage.cpu_seconds if usage else None,
        }
        job_name = job_of_step_log(log)
        job = recorder.job(job_name) if job_name else None
        if job_name and job is not None:
            timeline = step_timeline(pod, job, pods_of_job(recorder.get("pods"), job_name))
            row.update(job=job_name, kubetrain_share=timeline.kubetrain_share, **timeline.__dict__)
        elif containers["main"]["image"] in IMAGES.values():
            row["floor_training"] = True
        rows.append(row)
    return rows


def _time(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def on_backend(pipeline: str, arguments: dict[str, Any], *, package: Path | None = None) -> dict[str, Any]:
    """One run on the backend (the shipped YAML, or `package`); its phases in seconds and its steps."""
    client = kfp.Client(host=f"http://127.0.0.1:{backend.API_HTTP_PORT}")
    with Recorder() as recorder:
        start = time.time()
        run_id = client.create_run_from_pipeline_package(
            str(package or REPO / "pipelines" / f"{pipeline}.yaml"), arguments=arguments,
            run_name=f"bench-{int(start)}", experiment_name="kubetrain-bench").run_id  # fmt: skip
        first_running = training_end = 0.0
        while True:
            # kubetrain's training pods carry the run's label; the floor has none (it trains in its step pods).
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
        "created_to_first_training_pod_running": first_running - start if first_running else None,
        "training_end_to_succeeded": done - training_end if training_end else None,
        "whole_run": done - start,
        "driver_pods_seconds": roles["driver"],
        "launcher_pods_seconds": roles["launcher"],
        "steps": step_rows(workflow, recorder),
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
    with tempfile.TemporaryDirectory() as floors:
        for pipeline in args.pipeline or PIPELINES:
            remote = on_backend(pipeline, {})
            floor = on_backend(pipeline, {}, package=compile_floor(pipeline, Path(floors)))
            local = locally(pipeline, {})
            results.append({"pipeline": pipeline, "backend": remote, "floor": floor, "kfp_local_whole_run": local,
                            "ratio_backend_to_local": remote["whole_run"] / local,
                            "ratio_kubetrain_to_floor": remote["whole_run"] / floor["whole_run"]})  # fmt: skip
    if args.json:
        for result in results:
            print(json.dumps(result))
        return 0
    print("| pipeline | kubetrain whole run | KFP floor whole run | kubetrain / floor |")
    print("|---|---|---|---|")
    for r in results:
        print(f"| {r['pipeline']} | {r['backend']['whole_run']:.0f} s | {r['floor']['whole_run']:.0f} s "
              f"| {r['ratio_kubetrain_to_floor']:.2f} |")  # fmt: skip
    print()
    print("| pipeline | step | step wall | start -> job created | job created -> all Running | training "
          "| pods end -> job Succeeded | job Succeeded -> step Completed | kubetrain share | launcher CPU "
          "| floor step wall |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        floor_steps = {s["image"]: s for s in r["floor"]["steps"] if s.get("floor_training")}
        for s in (s for s in r["backend"]["steps"] if "job" in s):
            framework = s["job"].split("-", 1)[0]
            twin = floor_steps.get(IMAGES.get(framework, ""), {})
            cpu = f"{s['launcher_cpu']:.2f} s" if s.get("launcher_cpu") is not None else "-"
            floor_wall = f"{twin['step_wall']:.0f} s" if twin else "-"
            print(f"| {r['pipeline']} | {s['job']} | {s['step_wall']:.0f} s | {s['start_to_job_created']:.0f} s "
                  f"| {s['job_created_to_all_running']:.0f} s | {s['training']:.0f} s "
                  f"| {s['pods_end_to_job_succeeded']:.0f} s | {s['job_succeeded_to_step_completed']:.0f} s "
                  f"| {s['kubetrain_share']:.0f} s | {cpu} | {floor_wall} |")  # fmt: skip
    print()
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
