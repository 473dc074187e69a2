"""What the launcher adds to a short job: from the job's end to `run_job` returning, and in all.

A PyTorchJob whose only container runs `python -c "print('hi')"`, awaited N times:

- floor: the same `python -c` started directly (no launcher, no backend);
- local: `run_job` on the local backend, in this process;
- kubernetes: `run_job` on the Kubernetes backend against the stand-in API server
  (tests/fake_apiserver.py: a scripted operator marks the pod Running, writes its log line and
  sets Succeeded; it is not a real cluster, so what is measured is the launcher's own reaction);
- cli: `kubetrain launch --local -f job.yaml` as a new user runs it, wall time of the process.

Per run: the job's own runtime (submit → terminal condition seen by the watch), the launcher's wall
time (call → return) and their difference (terminal condition → return, the primary pod's whole
log printed). The terminal condition's moment is when the watch delivers it (`on_status`), which
trails the backend's write by the watch's own latency; that latency is inside the figure.

    .venv/bin/python bench/short_jobs.py            # 20 rounds each
    .venv/bin/python bench/short_jobs.py --rounds 5 --json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from kubetrain.backends.base import Backend  # noqa: E402
from kubetrain.backends.kubernetes import KubernetesBackend, RetryPolicy  # noqa: E402
from kubetrain.backends.local.backend import LocalBackend  # noqa: E402
from kubetrain.launcher import AwaitOptions, run_job  # noqa: E402
from kubetrain.manifests.kinds import PYTORCHJOB  # noqa: E402
from kubetrain.status import JobStatus  # noqa: E402
from tests.fake_apiserver import FakeApiServer, make_pod  # noqa: E402

NS = "bench"
PROGRAM = ["python", "-c", "print('hi')"]


def manifest(name: str) -> dict[str, Any]:
    """The trivial job, exactly as a user would write it."""
    container = {"name": "pytorch", "image": "python:3.11", "command": PROGRAM}
    master = {"replicas": 1, "restartPolicy": "Never", "template": {"spec": {"containers": [container]}}}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"pytorchReplicaSpecs": {"Master": master}},
    }


@dataclass
class Run:
    """One awaited job, in seconds."""

    runtime: float  # submit → terminal condition delivered
    wall: float  # run_job call → return
    after_end: float  # terminal condition delivered → return
    log_complete: bool


def timed_run(backend: Backend, name: str) -> Run:
    """Await one job on `backend` and time it."""
    lines: list[str] = []
    marks: dict[str, float] = {}

    def sink(line: str) -> None:
        if "submitted" in line and "submitted" not in marks:
            marks["submitted"] = time.perf_counter()
        lines.append(line)

    def on_status(status: JobStatus) -> None:
        if status.phase.terminal and "ended" not in marks:
            marks["ended"] = time.perf_counter()

    start = time.perf_counter()
    options = AwaitOptions(timeout_seconds=60)
    run_job(manifest(name), backend=backend, options=options, log_sink=sink, on_status=on_status)
    done = time.perf_counter()
    return Run(
        runtime=marks["ended"] - marks["submitted"],
        wall=done - start,
        after_end=done - marks["ended"],
        log_complete=any(line.endswith("] hi") for line in lines),
    )


def floor_run() -> float:
    """`python -c` started directly."""
    start = time.perf_counter()
    subprocess.run([sys.executable, *PROGRAM[1:]], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def local_runs(rounds: int, root: Path) -> list[Run]:
    """`run_job` on one local backend (as a KFP step would use it: one backend per step)."""
    runs = []
    for i in range(rounds):
        backend = LocalBackend(root=root, stream_logs=False, namespace=NS)
        try:
            runs.append(timed_run(backend, f"hi-local-{i}"))
        finally:
            backend.close()
    return runs


def scripted_operator(api: FakeApiServer, name: str) -> None:
    """What the operator and the kubelet do for the trivial job, as fast as the stand-in allows."""
    api.wait_job(PYTORCHJOB, NS, name, timeout=60)
    api.put_pod(make_pod(name, NS, kind=PYTORCHJOB, replica_type="Master", index=0, phase="Running"))
    api.set_conditions(PYTORCHJOB, NS, name, ("Created", "True", "", ""), ("Running", "True", "PyTorchJobRunning", ""))
    api.append_log(NS, f"{name}-master-0", "pytorch", "hi")
    api.put_pod(make_pod(name, NS, kind=PYTORCHJOB, replica_type="Master", index=0, phase="Succeeded"))
    api.set_conditions(PYTORCHJOB, NS, name, ("Succeeded", "True", "PyTorchJobSucceeded", ""))


def kubernetes_runs(rounds: int, tmp: Path) -> list[Run]:
    """`run_job` on the Kubernetes backend against the stand-in API server."""
    runs = []
    with FakeApiServer() as api:
        kubeconfig = api.write_kubeconfig(tmp / "kubeconfig")
        for i in range(rounds):
            name = f"hi-k8s-{i}"
            player = threading.Thread(target=scripted_operator, args=(api, name), daemon=True)
            player.start()
            backend = KubernetesBackend(namespace=NS, kubeconfig=str(kubeconfig), retry=RetryPolicy())
            try:
                runs.append(timed_run(backend, name))
            finally:
                backend.close()
                player.join(10)
    return runs


def cli_runs(rounds: int, tmp: Path) -> list[float]:
    """`kubetrain launch --local -f job.yaml`, wall time of the whole process."""
    walls = []
    for i in range(rounds):
        path = tmp / f"job-{i}.yaml"
        path.write_text(yaml.safe_dump(manifest(f"hi-cli-{i}")))
        cmd = [str(Path(sys.executable).parent / "kubetrain"), "launch", "--local", "-f", str(path),
               "--local-root", str(tmp / "cli-root")]  # fmt: skip
        start = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        walls.append(time.perf_counter() - start)
    return walls


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summary(runs: list[Run]) -> dict[str, Any]:
    """Medians (and the worst) of a set of runs."""
    return {
        "runtime_median": statistics.median(r.runtime for r in runs),
        "wall_median": statistics.median(r.wall for r in runs),
        "after_end_median": statistics.median(r.after_end for r in runs),
        "after_end_max": max(r.after_end for r in runs),
        "log_complete": all(r.log_complete for r in runs),
    }


def main(argv: list[str] | None = None) -> int:
    """Run every variant and print the table (or JSON)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kubetrain-short-") as tmp_name:
        tmp = Path(tmp_name)
        floor = [floor_run() for _ in range(args.rounds)]
        local = summary(local_runs(args.rounds, tmp / "local"))
        k8s = summary(kubernetes_runs(args.rounds, tmp))
        cli = cli_runs(args.rounds, tmp)
    result = {
        "rounds": args.rounds,
        "cpus": os.cpu_count(),
        "floor_python_c_median": statistics.median(floor),
        "local": local,
        "kubernetes_stand_in": k8s,
        "cli_local_wall_median": statistics.median(cli),
        "cli_local_wall_p90": _p(cli, 0.9),
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"short jobs, {args.rounds} rounds each, {os.cpu_count()} CPUs; medians in seconds")
    print(f"floor: python -c started directly      {result['floor_python_c_median']:.3f}")
    print("| backend | job runtime | launcher wall | end → return (median) | end → return (max) | whole log |")
    print("|---|---:|---:|---:|---:|---|")
    for label, s in (("local", local), ("kubernetes (stand-in API)", k8s)):
        print(f"| {label} | {s['runtime_median']:.3f} | {s['wall_median']:.3f} | {s['after_end_median']:.3f} | "
              f"{s['after_end_max']:.3f} | {'yes' if s['log_complete'] else 'NO'} |")  # fmt: skip
    print(f"`kubetrain launch --local` wall: median {result['cli_local_wall_median']:.3f}, "
          f"p90 {result['cli_local_wall_p90']:.3f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
