"""API cost of awaiting one job, counted by the real kube-apiserver's audit log, next to 15 s polling.

Against the e2e tier's real control plane (real kube-apiserver and training-operator; kwok runs
the pods): a master-only PyTorchJob that kwok keeps Running for 10 s or 10 min, awaited either by
kubetrain's launcher (`run_job` with the Kubernetes backend: create, watch, pods and events while
pending, the rank-0 log, delete) or by the Training Operator SDK's default (GET every 15 s). Each
round runs as a user of its own, so the audit log attributes every request exactly.

Time can be scaled (`--scale 0.05`: a 10 min job runs 30 s): the job's length, the 15 s poll, the
launcher's 300 s watch window and server-side watch timeout and its 5 s pending poll all shrink by
the same factor, so the request counts are those of the unscaled run. Notice = from the job's
terminal condition (seen by an independent admin watch) to the awaiting function's return; the
poll's is reported in unscaled seconds.

    .venv/bin/python bench/api_cost.py            # 10 s and 600 s jobs at scale 0.05, 10 s at scale 1
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _cluster import (
    TerminalObserver,
    audit_requests,
    await_by_polling,
    cluster,
    pytorchjob,
    user_kubeconfig,
)

from kubetrain.backends.kubernetes import KubernetesBackend
from kubetrain.launcher import AwaitOptions, run_job
from kubetrain.launcher.options import Tuning
from tools.cluster.controlplane import NAMESPACE, Cluster

POLL_SECONDS = 15.0
WATCH_WINDOW_SECONDS = 300.0
SERVER_WATCH_SECONDS = 300.0
PENDING_POLL_SECONDS = 5.0


def await_with_launcher(kubeconfig: Path, manifest: dict[str, Any], scale: float) -> float:
    """kubetrain's launcher, its waits scaled; returns when run_job returned."""
    backend = KubernetesBackend(namespace=NAMESPACE, kubeconfig=str(kubeconfig),
                                server_watch_seconds=max(1, round(SERVER_WATCH_SECONDS * scale)))  # fmt: skip
    tuning = Tuning(
        watch_window_seconds=WATCH_WINDOW_SECONDS * scale, pending_poll_seconds=PENDING_POLL_SECONDS * scale
    )
    try:
        run_job(manifest, backend=backend, options=AwaitOptions(timeout_seconds=3600, tuning=tuning),
                log_sink=lambda line: None)  # fmt: skip
    finally:
        backend.close()
    return time.monotonic()


def one_round(
    where: Cluster, method: str, length: float, scale: float, index: int, observer: TerminalObserver
) -> dict[str, Any]:
    """One job awaited one way; its requests from the audit log and its notice time."""
    tag = f"{'kt' if method == 'kubetrain' else 'poll'}-{int(length)}-{str(scale).replace('.', '')}-{index}"
    stamp = int(time.time())
    user = f"bench-cost-{tag}-{stamp}"
    kube = user_kubeconfig(where, user, poller=method != "kubetrain")
    manifest = pytorchjob(f"cost-{tag}-{stamp % 100000}", length * scale)
    name = manifest["metadata"]["name"]
    if method == "kubetrain":
        returned = await_with_launcher(kube, manifest, scale)
    else:
        returned = await_by_polling(kube, manifest, POLL_SECONDS * scale)
    deadline = time.monotonic() + 30
    while name not in observer.seen and time.monotonic() < deadline:
        time.sleep(0.05)  # the observer's watch may deliver the event a moment after the launcher's
    notice = returned - observer.seen[name]
    if method != "kubetrain":
        notice /= scale  # a poll's latency is a fraction of its (scaled) interval
    time.sleep(1.0)  # the audit log is written as each request completes: let the last DELETE land
    requests = audit_requests(where, {user})
    return {"method": method, "job_seconds": length, "scale": scale, "notice_seconds": notice,
            "requests": sum(requests.values()), "by_kind": dict(sorted(requests.items()))}  # fmt: skip


def summarize(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Median and max per (method, length, scale)."""
    rows = []
    for key in sorted({(r["scale"], r["job_seconds"], r["method"]) for r in runs}):
        group = [r for r in runs if (r["scale"], r["job_seconds"], r["method"]) == key]
        kinds: Counter[str] = Counter()
        for r in group:
            kinds.update(r["by_kind"])
        rows.append({
            "method": key[2], "job_seconds": key[1], "scale": key[0], "rounds": len(group),
            "notice_median": statistics.median(r["notice_seconds"] for r in group),
            "notice_max": max(r["notice_seconds"] for r in group),
            "requests_median": statistics.median(r["requests"] for r in group),
            "requests_min": min(r["requests"] for r in group), "requests_max": max(r["requests"] for r in group),
            "by_kind_total": dict(sorted(kinds.items())),
        })  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    """Run the rounds and print the table (or JSON)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--scale", type=float, default=0.05)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lengths", default="10,600", help="job lengths in (unscaled) seconds")
    parser.add_argument("--no-real", action="store_true", help="skip the 10 s job at scale 1")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    where = cluster()
    observer = TerminalObserver(where.kubeconfig)
    observer.start()
    plan = [(m, float(length), args.scale) for length in args.lengths.split(",") for m in ("kubetrain", "poll-15s")]
    if not args.no_real:
        plan += [("kubetrain", 10.0, 1.0), ("poll-15s", 10.0, 1.0)]
    try:
        runs = [
            one_round(where, m, length, scale, i, observer) for i in range(args.rounds) for m, length, scale in plan
        ]
    finally:
        observer.stop()
    rows = summarize(runs)
    if args.json:
        print(json.dumps({"rows": rows, "runs": runs}, indent=2))
        return 0
    print("| job length | scale | awaiting | notice s (median / max) | requests per job (median, min–max) |")
    print("|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['job_seconds']:g} s | {row['scale']:g} | {row['method']} | {row['notice_median']:.2f} / "
            f"{row['notice_max']:.2f} | {row['requests_median']:g} ({row['requests_min']}–{row['requests_max']}) |"
        )
    for row in rows:
        print(f"  {row['method']} {row['job_seconds']:g}s x{row['scale']:g}, all rounds: {row['by_kind_total']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
