"""Benchmark: samples/s of the PS runtime (async and sync) against PyTorch DDP, same model and data.

    .venv/bin/python bench/ps_vs_ddp.py [--rounds 2] [--epochs 10] [--json]

All three train the `mlp` of kubetrain (64-128-128-10, the same layers in both programs) on the
built-in digits data set, 3 trainer processes with batch 32 each, Adam, OMP_NUM_THREADS=1:

- ps-async: 1 master + 2 PS + 3 workers (`kubetrain.ps.*`), async updates;
- ps-sync: the same with `--mode sync --grads-to-wait 3`;
- ddp: `python -m kubetrain.train.torch_ddp`, 3 ranks over gloo, each started with the
  environment a PyTorchJob's replicas get (as kubetrain's local backend starts them).

Each figure is the program's own `samples_per_second` from its metrics.json: records trained by
all trainers / training seconds (PS: the master's first task handed out to the last training
task reported; DDP: the seconds rank 0 spent in training steps). The sides rotate their order
every round in one run; the job's launch-to-exit wall time is reported beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kubetrain.data.download import download
from kubetrain.ps.harness.localrun import LocalPSJob
from kubetrain.train.topology import pytorchjob_env

SIDES = ("ps-async", "ps-sync", "ddp")
RANKS = 3


def _ps(mode: str, *, data: Path, workdir: Path, epochs: int) -> dict[str, Any]:
    ps_args = ["--optimizer", "adam"]
    ps_args += ["--lr", "0.004", "--lr-half-life", "100"] if mode == "async" else ["--lr", "0.005"]
    ps_args += ["--grads-to-wait", "3"] if mode == "sync" else []
    t0 = time.perf_counter()
    with LocalPSJob(
        workdir=workdir,
        data=data,
        mode=mode,
        epochs=epochs,
        records_per_task=64,
        num_workers=RANKS,
        master_args=["--batch-size", "32"],
        ps_args=ps_args,
    ) as job:
        job.start_all()
        codes = job.wait_all(deadline_s=1200)
        if any(codes.values()):
            raise RuntimeError(f"ps-{mode}: exit codes {codes}\n{job.tail('master')}")
        m = job.metrics()
    return {"metrics": m, "wall_seconds": time.perf_counter() - t0}


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _ddp(*, data: Path, workdir: Path, epochs: int) -> dict[str, Any]:
    host = "127.0.88.1"
    port = _free_port(host)
    out = workdir / "output"
    out.mkdir(parents=True)
    args = ["--data", str(data), "--output", str(out), "--epochs", str(epochs), "--batch-size", "32"]
    args += ["--model", "mlp", "--threads", "1", "--eval-every", str(epochs)]
    base = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK")}
    base["OMP_NUM_THREADS"] = "1"
    t0 = time.perf_counter()
    procs = []
    for rank in range(RANKS):
        env = base | pytorchjob_env(
            replica_index=0 if rank == 0 else rank - 1,
            is_master=rank == 0,
            replicas=RANKS,
            master_addr=host,
            master_port=port,
        )
        with open(workdir / f"rank{rank}.log", "wb") as log:
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "kubetrain.train.torch_ddp", *args], env=env, stdout=log, stderr=log
                )
            )
    try:
        codes = [p.wait(timeout=1200) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    if any(codes):
        raise RuntimeError(f"ddp: exit codes {codes}; see {workdir}")
    return {"metrics": json.loads((out / "metrics.json").read_text()), "wall_seconds": time.perf_counter() - t0}


def main(argv: list[str] | None = None) -> int:
    """Run every side `--rounds` times, rotating the order; print the table (or JSON)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in SIDES}
    with tempfile.TemporaryDirectory(prefix="ps-vs-ddp-") as tmp:
        data = Path(tmp) / "digits"
        download("builtin:digits", data, shards=2, quiet=True)
        for r in range(args.rounds):
            order = SIDES[r % 3 :] + SIDES[: r % 3]
            for side in order:
                wd = Path(tmp) / f"{side}-{r}"
                if side == "ddp":
                    res = _ddp(data=data, workdir=wd, epochs=args.epochs)
                else:
                    res = _ps(side.removeprefix("ps-"), data=data, workdir=wd, epochs=args.epochs)
                m = res["metrics"]
                runs[side].append(
                    {
                        "samples_per_second": float(m["samples_per_second"]),
                        "wall_seconds": res["wall_seconds"],
                        "test_accuracy": float(m["test_accuracy"]),
                    }
                )
                print(
                    f"round {r + 1} {side:>8}: {m['samples_per_second']:8.0f} samples/s, "
                    f"wall {res['wall_seconds']:6.2f} s, accuracy {m['test_accuracy']:.4f}",
                    file=sys.stderr,
                )

    def med(side: str, key: str) -> float:
        return float(statistics.median(r[key] for r in runs[side]))

    result: dict[str, Any] = {
        "command": "bench/ps_vs_ddp.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "runs": runs,
        "median_samples_per_second": {s: med(s, "samples_per_second") for s in SIDES},
        "load_average_at_end": list(os.getloadavg()),
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    ddp = med("ddp", "samples_per_second")
    print("| trainer | median samples/s | vs DDP | median job wall s | test accuracy |")
    print("|---|---|---|---|---|")
    for side in SIDES:
        accs = [r["test_accuracy"] for r in runs[side]]
        print(
            f"| {side} | {med(side, 'samples_per_second'):.0f} | {med(side, 'samples_per_second') / ddp:.2f} | "
            f"{med(side, 'wall_seconds'):.2f} | {min(accs):.4f}–{max(accs):.4f} |"
        )
    print(
        f"\n{args.rounds} rounds each, order rotating; {result['machine']}; "
        f"load average at the end {result['load_average_at_end'][0]:.1f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
