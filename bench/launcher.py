"""Launcher benchmark: how fast the end of a job is noticed, and how many API requests a job costs.

Runs against the in-process stand-in for the API server (tests/fake_apiserver.py), NOT a cluster:
the operator's part is a script (pods pending, then running, log lines, then Succeeded). Two ways
of awaiting the same job are compared:

- kubetrain: `kubetrain.launcher.run_job` on the Kubernetes backend (watch with bounded server-side
  timeouts and reconnects, pod and event checks while something is pending, the primary pod's log
  followed, the job deleted at the end);
- poll-15s: what the Training Operator SDK does by default (`wait_for_job_conditions`,
  polling_interval=15): create, GET the job every 15 s until a terminal condition, delete.

Measured per run: the seconds from the moment the script sets the terminal condition to the moment
the launcher returns, and the requests the stand-in received, by kind.

Time is simulated by scaling: with `--scale S` every duration is multiplied by S (job length,
pending time, poll interval, the launcher's watch window and server-side watch timeout, its
pending-poll interval, the stand-in's bookmark period), so request counts are what the unscaled
run would make. The "notice" latency of the watch does not scale (it is a reaction to an event);
the poll's latency is reported in simulated seconds (measured / S). Runs of the 10 s job at scale 1
are added unless `--no-real`. One thing does not scale: a server-side watch timeout is a whole
number of seconds (≥ 1), so in scaled runs the launcher's sub-second pending-phase windows last
1 s and its pod/event checks while pending are under-counted; the scale-1 runs show them.

    .venv/bin/python bench/launcher.py                 # scale 0.05, 5 rounds, plus real-time 10 s runs
    .venv/bin/python bench/launcher.py --json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from kubernetes import client, config  # noqa: E402

from kubetrain.backends.kubernetes import KubernetesBackend, RetryPolicy  # noqa: E402
from kubetrain.launcher import AwaitOptions, Tuning, run_job  # noqa: E402
from kubetrain.manifests import build_pytorchjob  # noqa: E402
from kubetrain.manifests.kinds import PYTORCHJOB  # noqa: E402
from kubetrain.specs import PyTorchJobSpec  # noqa: E402
from kubetrain.specs.common import ReplicaSpec  # noqa: E402
from kubetrain.specs.jobs import JobMeta  # noqa: E402
from tests.fake_apiserver import FakeApiServer, make_pod  # noqa: E402

NS = "bench"
# Simulated scheduling + image pull, drawn per round (the same for both methods in a round), so the
# job's end falls at a random phase of the 15 s poll, as it does for real jobs.
PENDING_SECONDS = (2.0, 17.0)
LOG_EVERY_SECONDS = 10.0  # simulated training log cadence
POLL_SECONDS = 15.0  # the Training Operator SDK's default polling_interval
# The launcher's real defaults (Tuning and KubernetesBackend), scaled with the run.
WATCH_WINDOW_SECONDS = Tuning().watch_window_seconds
PENDING_POLL_SECONDS = Tuning().pending_poll_seconds
SERVER_WATCH_SECONDS = 300
BOOKMARK_SECONDS = 60.0  # about what the API server sends


@dataclass
class Run:
    """One awaited job."""

    method: str
    length_seconds: float
    scale: float
    notice_seconds: float
    requests: Counter[str] = field(default_factory=Counter)

    @property
    def total(self) -> int:
        return sum(self.requests.values())

    @property
    def status_requests(self) -> int:
        """Requests about the job object itself (create/get/list/watch/delete)."""
        return sum(n for k, n in self.requests.items() if k.split()[1].startswith("pytorchjobs"))


def manifest(name: str) -> dict[str, Any]:
    spec = PyTorchJobSpec(meta=JobMeta(name=name, namespace=NS, kfp_run_id="bench", kfp_task_id=name),
                          master=ReplicaSpec(image="example.com/train:1"),
                          worker=ReplicaSpec(image="example.com/train:1", replicas=2))  # fmt: skip
    return build_pytorchjob(spec)


def operator(api: FakeApiServer, name: str, length: float, pending: float, scale: float, ended: list[float]) -> None:
    """Pods pending for `pending`, then running for `length` simulated seconds with log lines, then Succeeded."""
    api.wait_job(PYTORCHJOB, NS, name, timeout=60)
    replicas = [("Master", 0), ("Worker", 0), ("Worker", 1)]
    for rtype, index in replicas:
        api.put_pod(make_pod(name, NS, kind=PYTORCHJOB, replica_type=rtype, index=index))
    api.set_conditions(PYTORCHJOB, NS, name, ("Created", "True", "PyTorchJobCreated", ""))
    time.sleep(pending * scale)  # the simulated job's own timeline, not a wait for the launcher
    for rtype, index in replicas:
        api.put_pod(make_pod(name, NS, kind=PYTORCHJOB, replica_type=rtype, index=index, phase="Running"))
    api.set_conditions(PYTORCHJOB, NS, name, ("Created", "True", "", ""), ("Running", "True", "PyTorchJobRunning", ""))
    start = time.monotonic()
    step = 0
    while (elapsed := time.monotonic() - start) < length * scale:
        api.append_log(NS, f"{name}-master-0", "pytorch", f"step {step} loss {1.0 / (step + 1):.4f}")
        step += 1
        time.sleep(min(LOG_EVERY_SECONDS * scale, length * scale - elapsed))
    for rtype, index in replicas:
        api.put_pod(make_pod(name, NS, kind=PYTORCHJOB, replica_type=rtype, index=index, phase="Succeeded"))
    ended.append(time.monotonic())
    api.set_conditions(PYTORCHJOB, NS, name, ("Succeeded", "True", "PyTorchJobSucceeded", ""))


def await_with_launcher(api: FakeApiServer, kubeconfig: Path, name: str, scale: float) -> float:
    backend = KubernetesBackend(kubeconfig=str(kubeconfig), retry=RetryPolicy(),
                                server_watch_seconds=max(1, round(SERVER_WATCH_SECONDS * scale)))  # fmt: skip
    tuning = Tuning(watch_window_seconds=WATCH_WINDOW_SECONDS * scale,
                    pending_poll_seconds=PENDING_POLL_SECONDS * scale)  # fmt: skip
    try:
        options = AwaitOptions(timeout_seconds=3600, tuning=tuning)
        run_job(manifest(name), backend=backend, options=options, log_sink=lambda line: None)
    finally:
        backend.close()
    return time.monotonic()


def await_by_polling(api: FakeApiServer, kubeconfig: Path, name: str, scale: float) -> float:
    """The Training Operator SDK's way: GET the job every polling interval until a terminal condition."""
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    with client.ApiClient(configuration) as api_client:
        custom = client.CustomObjectsApi(api_client)
        group, version, plural = PYTORCHJOB.group, PYTORCHJOB.version, PYTORCHJOB.plural
        custom.create_namespaced_custom_object(group, version, NS, plural, manifest(name))
        while True:
            job = custom.get_namespaced_custom_object(group, version, NS, plural, name)
            conditions = (job.get("status") or {}).get("conditions") or []
            if any(c["type"] in ("Succeeded", "Failed") and c["status"] == "True" for c in conditions):
                break
            time.sleep(POLL_SECONDS * scale)
        returned = time.monotonic()
        custom.delete_namespaced_custom_object(group, version, NS, plural, name)
    return returned


def one_run(method: str, length: float, scale: float, index: int) -> Run:
    name = f"job-{method.replace('-', '')}-{int(length)}-{index}"
    pending = random.Random(index).uniform(*PENDING_SECONDS)
    ended: list[float] = []
    with FakeApiServer(bookmark_seconds=BOOKMARK_SECONDS * scale) as api, tempfile.TemporaryDirectory() as tmp:
        kubeconfig = api.write_kubeconfig(Path(tmp) / "kubeconfig", namespace=NS)
        script = threading.Thread(target=operator, args=(api, name, length, pending, scale, ended), daemon=True)
        script.start()
        awaiter = await_with_launcher if method == "kubetrain" else await_by_polling
        returned = awaiter(api, kubeconfig, name, scale)
        script.join(30)
        requests = Counter(f"{r.verb} {r.resource}" for r in api.requests)
    notice = returned - ended[0]
    if method != "kubetrain":
        notice /= scale  # polling latency is a fraction of the (scaled) interval
    return Run(method, length, scale, notice, requests)


def summarize(runs: list[Run]) -> list[dict[str, Any]]:
    rows = []
    keys = sorted({(r.method, r.length_seconds, r.scale) for r in runs}, key=lambda k: (k[2], k[1], k[0]))
    for method, length, scale in keys:
        group = [r for r in runs if (r.method, r.length_seconds, r.scale) == (method, length, scale)]
        rows.append({
            "method": method, "job_seconds": length, "scale": scale, "rounds": len(group),
            "notice_seconds_median": statistics.median(r.notice_seconds for r in group),
            "notice_seconds_max": max(r.notice_seconds for r in group),
            "requests_median": statistics.median(r.total for r in group),
            "job_object_requests_median": statistics.median(r.status_requests for r in group),
            "requests_by_kind_first_round": dict(sorted(group[0].requests.items())),
        })  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=0.05, help="simulated-time scale (default 0.05)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--lengths", default="10,600", help="simulated job lengths in seconds")
    parser.add_argument("--no-real", action="store_true", help="skip the real-time runs of the 10 s job")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    lengths = [float(x) for x in args.lengths.split(",")]
    plan = [(m, length, args.scale) for length in lengths for m in ("kubetrain", "poll-15s")]
    if not args.no_real:
        plan += [("kubetrain", 10.0, 1.0), ("poll-15s", 10.0, 1.0)]
    runs = [one_run(m, length, scale, i) for i in range(args.rounds) for m, length, scale in plan]
    rows = summarize(runs)
    if args.json:
        print(json.dumps({"machine": f"{platform.machine()} {os.cpu_count()} CPUs, Python {platform.python_version()}",
                          "results": rows}, indent=2))  # fmt: skip
        return 0
    print(f"{'method':<10} {'job s':>6} {'scale':>6} {'notice s (median/max)':>22} {'requests':>9} {'job-object':>11}")
    for row in rows:
        print(f"{row['method']:<10} {row['job_seconds']:>6g} {row['scale']:>6g} "
              f"{row['notice_seconds_median']:>10.3f} / {row['notice_seconds_max']:<9.3f} "
              f"{row['requests_median']:>9g} {row['job_object_requests_median']:>11g}")  # fmt: skip
    for row in rows:
        print(f"  {row['method']} {row['job_seconds']:g}s x{row['scale']:g}: {row['requests_by_kind_first_round']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
