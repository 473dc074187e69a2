"""Benchmark: dynamic vs static sharding on the PS runtime, one of three workers 4x slower.

    .venv/bin/python bench/ps_stragglers.py [--rounds 2] [--epochs 12] [--slowdown 4] [--json]

The complaint in the PaddlePaddle post: with data split statically, the slowest trainer sets the
pace of the whole job. Both sides run the same job on the built-in digits data set (1 master,
2 PS, 3 workers on their own 127.x addresses, the `mlp`, async Adam, batch 32, 64 records per
task), with worker 2 started with `--slowdown 4`: every batch it trains takes 4 times its median
batch time over its first steps (measured while its peers run), so it stays 4x slower than its
peers for the whole job, as a slow node would, instead of speeding up once its peers finish and
free this 2-core machine's CPUs.

Dynamic: the master hands tasks to whichever worker asks, so fast workers take more. Static: the
master deals each epoch into three fixed blocks, one per worker (as a DistributedSampler would),
and a worker only gets tasks of its block. The figure compared is the training time, from the
first task handed out to the last one reported (the master's `train_seconds`), plus the job's
launch-to-exit wall time; the sides alternate in one run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kubetrain.data.download import download
from kubetrain.ps.harness.localrun import LocalPSJob

SIDES = ("dynamic", "static")


def run_side(
    sharding: str,
    *,
    data: Path,
    workdir: Path,
    epochs: int,
    slowdown: float,
    batch: int,
    per_task: int,
    model_args: str,
) -> dict[str, Any]:
    """One job; its timings, accuracy and how many records each worker trained."""
    static = ["--sharding", "static", "--num-workers", "3"] if sharding == "static" else []
    t0 = time.perf_counter()
    with LocalPSJob(
        workdir=workdir,
        data=data,
        epochs=epochs,
        records_per_task=per_task,
        master_args=["--batch-size", str(batch), "--model-args", model_args, *static],
        ps_args=["--optimizer", "adam", "--lr", "0.004", "--lr-half-life", "100"],
    ) as job:
        job.add_worker(0)
        job.add_worker(1)
        job.add_worker(2, ["--slowdown", str(slowdown)])
        job.start_all()
        codes = job.wait_all(deadline_s=1200)
        wall = time.perf_counter() - t0
        if any(codes.values()):
            raise RuntimeError(f"{sharding}: exit codes {codes}\n{job.tail('master')}")
        m = job.metrics()
        per_worker = {}
        for path in job.trained_logs():
            with open(path) as f:
                per_worker[path.stem] = sum(int(json.loads(x)["end"]) - int(json.loads(x)["start"]) for x in f)
    return {
        "train_seconds": float(m["train_seconds"]),
        "wall_seconds": wall,
        "test_accuracy": float(m["test_accuracy"]),
        "records_per_worker": per_worker,
    }


def main(argv: list[str] | None = None) -> int:
    """Run both sides `--rounds` times, alternating; print the table (or JSON)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--slowdown", type=float, default=4.0)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--records-per-task", type=int, default=32)
    p.add_argument("--model-args", default="{}", help='JSON, e.g. a wider MLP: {"hidden": [512, 512]}')
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in SIDES}
    with tempfile.TemporaryDirectory(prefix="ps-stragglers-") as tmp:
        data = Path(tmp) / "digits"
        download("builtin:digits", data, shards=2, quiet=True)
        for r in range(args.rounds):
            for side in SIDES if r % 2 == 0 else SIDES[::-1]:
                res = run_side(
                    side,
                    data=data,
                    workdir=Path(tmp) / f"{side}-{r}",
                    epochs=args.epochs,
                    slowdown=args.slowdown,
                    batch=args.batch_size,
                    per_task=args.records_per_task,
                    model_args=args.model_args,
                )
                runs[side].append(res)
                print(
                    f"round {r + 1} {side:>8}: train {res['train_seconds']:6.2f} s, wall {res['wall_seconds']:6.2f} s, "
                    f"accuracy {res['test_accuracy']:.4f}, records {res['records_per_worker']}",
                    file=sys.stderr,
                )

    def med(side: str, key: str) -> float:
        return float(statistics.median(r[key] for r in runs[side]))

    result: dict[str, Any] = {
        "command": "bench/ps_stragglers.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "runs": runs,
        "speedup_train_seconds": med("static", "train_seconds") / med("dynamic", "train_seconds"),
        "speedup_wall_seconds": med("static", "wall_seconds") / med("dynamic", "wall_seconds"),
        "load_average_at_end": list(os.getloadavg()),
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    total = sum(runs["dynamic"][0]["records_per_worker"].values())
    print("| sharding | median training s | median job wall s | test accuracy | records trained by the slow worker |")
    print("|---|---|---|---|---|")
    for side in SIDES:
        accs = [r["test_accuracy"] for r in runs[side]]
        slow = [r["records_per_worker"].get("worker-2", 0) for r in runs[side]]
        print(
            f"| {side} | {med(side, 'train_seconds'):.2f} | {med(side, 'wall_seconds'):.2f} | "
            f"{min(accs):.4f}–{max(accs):.4f} | {min(slow)}–{max(slow)} of {total} |"
        )
    print(
        f"\nstatic / dynamic: **{result['speedup_train_seconds']:.2f}x** training time, "
        f"{result['speedup_wall_seconds']:.2f}x job wall time ({args.rounds} rounds each, alternating; "
        f"{result['machine']}; load average at the end {result['load_average_at_end'][0]:.1f})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
