"""N concurrent launchers against one real API server, next to N concurrent 15 s pollers.

Against the e2e tier's real control plane (real kube-apiserver, controller-manager, scheduler and
training-operator; kwok runs the pods on fake nodes): N master-only PyTorchJobs, each awaited by
its own launcher, all started together as the parallel steps of a pipeline would be. A launcher is
`run_job` with the Kubernetes backend and its own API client and connection pool (the rank-0 log
followed, pods and events looked at while pending, the job deleted at the end), exactly what one
KFP step runs. The launchers run as threads, `--per-process` of them in each of N/per-process
worker processes: 1,000 Python processes of ~60 MB would not fit in this machine's memory, and
the API server sees the same thing either way (N clients, N watches). The pollers do what the
Training Operator SDK does: create, GET every 15 s until a terminal condition, delete.

Measured per N and method, in one run:
- notice: from the job's terminal condition, as an independent admin watch receives it, to the
  launcher's return (p50 / p99 / max; CLOCK_MONOTONIC is shared by all processes), and for
  kubetrain in two parts: the end reaching the launcher's own watch, then its finish (the rest of
  the log, the delete);
- API requests per job and per second from the audit log (each side runs as a user of its own);
- open watches (the API server's `apiserver_longrunning_requests{verb="WATCH"}`, peak);
- the API server's CPU (seconds and average cores over the run) and peak resident memory;
- resident memory of the worker processes, and of one `kubetrain launch` process awaiting one job.

    .venv/bin/python bench/scale.py                      # N = 10, 100, 1000; both methods
    .venv/bin/python bench/scale.py --n 10 --json
    .venv/bin/python bench/scale.py --n 1000 --methods kubetrain --apf both --fresh-cluster   # deploy/apf.yaml's effect
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _cluster import (
    ProcessSampler,
    TerminalObserver,
    apiserver_pid,
    apply_apf,
    audit_requests,
    await_by_polling,
    cleanup,
    cluster,
    open_watches,
    pytorchjob,
    user_kubeconfig,
)

from kubetrain.backends.kubernetes import KubernetesBackend
from kubetrain.launcher import AwaitOptions, run_job
from kubetrain.status import JobStatus
from tools.cluster import controlplane
from tools.cluster.controlplane import NAMESPACE, Cluster

POLL_SECONDS = 15.0
PODS_PER_NODE = 250


# --- the worker processes ------------------------------------------------------------------------


def _launcher(
    kubeconfig: Path, name: str, run_seconds: float, returned: dict[str, float], errors: list[str],
    delivered: dict[str, float],
) -> None:  # fmt: skip
    backend = KubernetesBackend(namespace=NAMESPACE, kubeconfig=str(kubeconfig))

    def on_status(status: JobStatus) -> None:
        if status.phase.terminal:
            delivered.setdefault(name, time.monotonic())  # the launcher's own watch brought the end

    try:
        run_job(pytorchjob(name, run_seconds), backend=backend, options=AwaitOptions(timeout_seconds=1800),
                log_sink=lambda line: None, on_status=on_status)  # fmt: skip
        returned[name] = time.monotonic()
    except Exception as e:  # noqa: BLE001 - a benchmark records every failure and carries on
        errors.append(f"{name}: {type(e).__name__}: {e}")
    finally:
        backend.close()


def _poller(
    kubeconfig: Path, name: str, run_seconds: float, returned: dict[str, float], errors: list[str],
    delivered: dict[str, float],
) -> None:  # fmt: skip
    try:
        await_by_polling(kubeconfig, pytorchjob(name, run_seconds), POLL_SECONDS)
        returned[name] = time.monotonic()
    except Exception as e:  # noqa: BLE001 - a benchmark records every failure and carries on
        errors.append(f"{name}: {type(e).__name__}: {e}")


def worker(method: str, kubeconfig: Path, names: list[str], run_seconds: float, start_at: float) -> dict[str, Any]:
    """One worker process: a thread per job, all released at `start_at` (monotonic)."""
    returned: dict[str, float] = {}
    delivered: dict[str, float] = {}
    errors: list[str] = []
    target = _launcher if method == "kubetrain" else _poller
    threads = [
        threading.Thread(target=target, args=(kubeconfig, n, run_seconds, returned, errors, delivered)) for n in names
    ]
    time.sleep(max(0.0, start_at - time.monotonic()))  # a common start for every process
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {"returned": returned, "delivered": delivered, "errors": errors, "max_rss_mib": usage.ru_maxrss / 1024,
            "launchers": len(names),
            "cpu_seconds": usage.ru_utime + usage.ru_stime}  # fmt: skip


# --- the driver --------------------------------------------------------------------------------------


def ensure_nodes(where: Cluster, pods: int) -> None:
    """Enough fake kwok nodes for `pods` pods next to the e2e node."""
    nodes = [
        {"apiVersion": "v1", "kind": "Node",
         "metadata": {"name": f"kwok-bench-{i}", "annotations": {"kwok.x-k8s.io/node": "fake"},
                      "labels": {"kubernetes.io/hostname": f"kwok-bench-{i}", "type": "kwok"}},
         "status": {"allocatable": {"cpu": "1000", "memory": "4Ti", "pods": str(PODS_PER_NODE)},
                    "capacity": {"cpu": "1000", "memory": "4Ti", "pods": str(PODS_PER_NODE)}}}
        for i in range(math.ceil(pods / PODS_PER_NODE))
    ]  # fmt: skip
    where.kubectl("apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all(nodes))


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0..1) by the nearest-rank method."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def single_launch_rss(where: Cluster, run_seconds: float) -> float:
    """Peak resident memory (MiB) of one `kubetrain launch` process awaiting one job to its end."""
    kube = user_kubeconfig(where, f"bench-scale-single-{int(time.time())}")
    path = where.kubeconfig.parent / "bench-single.yaml"
    path.write_text(yaml.safe_dump(pytorchjob(f"scale-single-{int(time.time()) % 100000}", run_seconds)))
    proc = subprocess.Popen([sys.executable, "-m", "kubetrain", "launch", "-f", str(path)],
                            env={**os.environ, "KUBECONFIG": str(kube)}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"kubetrain launch exited {os.waitstatus_to_exitcode(status)}")
    return usage.ru_maxrss / 1024


def one_run(
    where: Cluster, method: str, n: int, per_process: int, run_seconds: float, apf: str = "none"
) -> dict[str, Any]:
    """N jobs awaited concurrently one way, with API Priority and Fairness's defaults or deploy/apf.yaml."""
    apply_apf(where, apf == "deploy")
    stamp = int(time.time())
    user = f"bench-scale-{'kt' if method == 'kubetrain' else 'poll'}-{n}-{stamp}"
    kube = user_kubeconfig(where, user, poller=method != "kubetrain")
    names = [f"scale-{'kt' if method == 'kubetrain' else 'poll'}-{stamp % 100000}-{i}" for i in range(n)]
    observer = TerminalObserver(where.kubeconfig)
    observer.start()
    sampler = ProcessSampler(apiserver_pid())
    watches: list[float] = []
    stop = threading.Event()

    def sample_watches() -> None:
        while not stop.wait(1.0):
            watches.append(open_watches(where.kubeconfig))

    chunks = [names[i : i + per_process] for i in range(0, n, per_process)]
    start_at = time.monotonic() + 3.0 + 0.3 * len(chunks)  # every process imported and ready by then
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--worker",
                method,
                "--kubeconfig",
                str(kube),
                "--run-seconds",
                str(run_seconds),
                "--start-at",
                str(start_at),
                "--names",
                ",".join(chunk),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for chunk in chunks
    ]
    sampler_thread = threading.Thread(target=sample_watches, daemon=True)
    with sampler.sampling():
        sampler_thread.start()
        results = [json.loads(p.communicate()[0]) for p in procs]
        ended = time.monotonic()
    stop.set()
    observer.stop()
    returned: dict[str, float] = {}
    delivered: dict[str, float] = {}
    errors: list[str] = []
    for result in results:
        returned.update(result["returned"])
        delivered.update(result["delivered"])
        errors += result["errors"]
    notice = [returned[n] - observer.seen[n] for n in names if n in returned and n in observer.seen]
    # The notice in two parts (kubetrain only): the end reaching the launcher's watch, then the
    # launcher's own finish (the rest of the log, the delete).
    both = [n for n in names if n in returned and n in observer.seen and n in delivered]
    watch_lag = [delivered[n] - observer.seen[n] for n in both]
    finish = [returned[n] - delivered[n] for n in both]
    # Left behind: not deleted at all (a job in foreground deletion, its pods going, was deleted).
    listed = json.loads(where.kubectl("get", "pytorchjobs.kubeflow.org", "-n", NAMESPACE, "-o", "json"))["items"]
    remaining = {j["metadata"]["name"] for j in listed if not j["metadata"].get("deletionTimestamp")}
    left = [n for n in names if n in remaining]
    time.sleep(1.0)  # the last requests' audit entries
    requests = audit_requests(where, {user})
    throttled = requests.pop("of which throttled (429)", 0)
    total = sum(requests.values())
    wall = ended - start_at
    cpu = sampler.cpu_end - sampler.cpu_start
    return {
        "method": method, "apf": apf, "n": n, "processes": len(chunks), "succeeded": len(returned),
        "errors": errors[:10],
        "jobs_left_behind": len(left),
        "error_count": len(errors), "wall_seconds": wall,
        "notice_p50": statistics.median(notice) if notice else None,
        "notice_p99": percentile(notice, 0.99) if notice else None, "notice_max": max(notice) if notice else None,
        "watch_lag_p50_p99_max": _spread(watch_lag), "finish_p50_p99_max": _spread(finish),
        "requests_total": total, "throttled_429": throttled,
        "requests_per_job": total / n, "requests_per_second": total / wall,
        "requests_by_kind": dict(sorted(requests.items())),
        "open_watches_peak": max(watches) if watches else None,
        "apiserver_cpu_seconds": cpu, "apiserver_cores_avg": cpu / wall, "apiserver_peak_rss_mib": sampler.peak_rss_mib,
        "launchers_cpu_seconds": sum(r["cpu_seconds"] for r in results),
        "worker_max_rss_mib": max(r["max_rss_mib"] for r in results),
        "worker_rss_per_launcher_mib": max(r["max_rss_mib"] / r["launchers"] for r in results),
    }  # fmt: skip


def _spread(values: list[float]) -> list[float] | None:
    return [statistics.median(values), percentile(values, 0.99), max(values)] if values else None


def wait_for_cleanup(where: Cluster, timeout: float = 600) -> None:
    """Until no PyTorchJob or pod of a benchmark is left (the garbage collector's pace at large N)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        jobs = where.kubectl("get", "pytorchjobs.kubeflow.org", "-n", NAMESPACE, "-o", "name")
        pods = where.kubectl("get", "pods", "-n", NAMESPACE, "-l", "training.kubeflow.org/job-name", "-o", "name")
        if not jobs.strip() and not pods.strip():
            return
        time.sleep(2)  # the garbage collector's own pace; nothing to be told about
    raise RuntimeError("jobs or pods of the benchmark are still there after 600 s")


def main(argv: list[str] | None = None) -> int:
    """The driver (or, with --worker, one worker process)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--n", default="10,100,1000", help="numbers of concurrent launchers")
    parser.add_argument("--methods", default="kubetrain,poll-15s")
    parser.add_argument(
        "--apf", default="none", choices=("none", "deploy", "both"),
        help="none (API Priority and Fairness's defaults), deploy (deploy/apf.yaml), or both",
    )  # fmt: skip
    parser.add_argument("--per-process", type=int, default=10, help="launcher threads per worker process")
    parser.add_argument("--run-seconds", type=float, default=5.0, help="how long kwok keeps each job Running")
    parser.add_argument(
        "--fresh-cluster", action="store_true",
        help="a new control plane for every run: a cluster that has just run N = 1,000 jobs keeps their "
        "events for an hour and a grown API server, which slows the next run whatever it measures",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--kubeconfig", help=argparse.SUPPRESS)
    parser.add_argument("--names", help=argparse.SUPPRESS)
    parser.add_argument("--start-at", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        result = worker(args.worker, Path(args.kubeconfig), args.names.split(","), args.run_seconds, args.start_at)
        print(json.dumps(result))
        return 0
    where = cluster()
    cleanup(where)  # what an interrupted run left
    wait_for_cleanup(where)
    sizes = [int(x) for x in args.n.split(",")]
    ensure_nodes(where, max(sizes))
    rows: list[dict[str, Any]] = []
    single = single_launch_rss(where, args.run_seconds)
    apfs = ["none", "deploy"] if args.apf == "both" else [args.apf]
    for n in sizes:
        for method, apf in [(m, a) for m in args.methods.split(",") for a in apfs]:
            if args.fresh_cluster and rows:
                controlplane.down()
                where = cluster()
                ensure_nodes(where, max(sizes))
            print(f"scale: N={n} {method} apf={apf} ...", file=sys.stderr, flush=True)
            rows.append(one_run(where, method, n, args.per_process, args.run_seconds, apf))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)  # kept even if a later run fails
            cleanup(where)  # jobs an awaiting side failed to delete (counted in the row)
            wait_for_cleanup(where)
    if args.json:
        print(json.dumps({"single_launch_rss_mib": single, "rows": rows}, indent=2))
        return 0
    print(f"one `kubetrain launch` process awaiting one job: peak RSS {single:.0f} MiB\n")
    print(
        "| N | awaiting | APF | ok | notice p50 / p99 / max s | requests per job (429s) | requests/s | "
        "peak open watches | API server CPU s (avg cores) | API server peak RSS MiB | launchers' CPU s | "
        "worker RSS MiB (per launcher) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        notice = "–"
        if r["notice_p50"] is not None:
            notice = f"{r['notice_p50']:.2f} / {r['notice_p99']:.2f} / {r['notice_max']:.2f}"
        cells = [
            str(r["n"]), r["method"], "deploy/apf.yaml" if r["apf"] == "deploy" else "defaults",
            f"{r['succeeded']}/{r['n']}", notice,
            f"{r['requests_per_job']:.1f} ({r['throttled_429']})", f"{r['requests_per_second']:.1f}",
            f"{r['open_watches_peak']:.0f}", f"{r['apiserver_cpu_seconds']:.0f} ({r['apiserver_cores_avg']:.2f})",
            f"{r['apiserver_peak_rss_mib']:.0f}", f"{r['launchers_cpu_seconds']:.0f}",
            f"{r['worker_max_rss_mib']:.0f} ({r['worker_rss_per_launcher_mib']:.1f})",
        ]  # fmt: skip
        print("| " + " | ".join(cells) + " |")
    for r in rows:
        print(f"  N={r['n']} {r['method']} apf={r['apf']}: wall {r['wall_seconds']:.0f}s, {r['requests_by_kind']}")
        for error in r["errors"]:
            print(f"    {error}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
