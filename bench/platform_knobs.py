"""Benchmark: the Argo settings a platform team can change, each measured on the same backend in one run.

    KUBETRAIN_KFP=1 make cluster-up && .venv/bin/python bench/platform_knobs.py [--rounds N] [--json]

For each setting (KFP's shipped configuration first), the workflow-controller is restarted with it
(tools/cluster/kfp/backend.py: set_argo_knobs) and `mnist_pytorch` runs once through `kfp.Client`
with its defaults; the settings take turns, round after round, so a slow minute on the shared
machine falls on all of them alike. Reported per setting: the median whole run (created ->
SUCCEEDED, polled once a second), the median time from created to the first training pod Running,
and the median of the KFP driver pods' summed time. The harness's settings
(backend.harness_argo_knobs) are restored at the end.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from kfp_backend import on_backend

from tools.cluster import controlplane
from tools.cluster.kfp import backend

# (label, the workflow-controller's environment, the executor's environment)
SETTINGS: list[tuple[str, dict[str, str], dict[str, str]]] = [
    ("shipped", {}, {}),
    ("DEFAULT_REQUEUE_TIME=2s", {"DEFAULT_REQUEUE_TIME": "2s"}, {}),
    ("RECENTLY_STARTED_POD_DURATION=2s", {"RECENTLY_STARTED_POD_DURATION": "2s"}, {}),
    ("ALL_POD_CHANGES_SIGNIFICANT=true", {"ALL_POD_CHANGES_SIGNIFICANT": "true"}, {}),
    ("all three", {"DEFAULT_REQUEUE_TIME": "2s", "RECENTLY_STARTED_POD_DURATION": "2s",
                   "ALL_POD_CHANGES_SIGNIFICANT": "true"}, {}),
]  # fmt: skip


def main() -> int:
    """Every setting, --rounds times each, taking turns; a table (or --json)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    cluster = controlplane.attach()  # the running cluster (`make cluster-up`), as it runs
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label, _, _ in SETTINGS}
    try:
        for _ in range(args.rounds):
            for label, controller, executor in SETTINGS:
                backend.set_argo_knobs(cluster, controlplane.STATE, controller, executor)
                runs[label].append(on_backend("mnist_pytorch", {}))
    finally:
        backend.set_argo_knobs(cluster, controlplane.STATE, backend.harness_argo_knobs(), {})  # as cluster-up left it
    rows = []
    for label, measured in runs.items():
        first = [r["created_to_first_training_pod_running"] for r in measured]
        rows.append({
            "setting": label, "runs": len(measured),
            "whole_run": statistics.median(r["whole_run"] for r in measured),
            "to_first_training_pod": statistics.median(x for x in first if x is not None),
            "driver_pods": statistics.median(r["driver_pods_seconds"] for r in measured),
            "all_whole_runs": [round(r["whole_run"], 1) for r in measured],
        })  # fmt: skip
    if args.json:
        print(json.dumps(rows))
        return 0
    base = rows[0]["whole_run"]
    print("| setting | runs | whole run (median) | vs shipped | created -> first training pod Running | "
          "driver pods (sum) | every run |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['setting']} | {r['runs']} | {r['whole_run']:.0f} s | {r['whole_run'] / base:.2f} "
              f"| {r['to_first_training_pod']:.0f} s | {r['driver_pods']:.0f} s "
              f"| {', '.join(f'{x:.0f}' for x in r['all_whole_runs'])} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
