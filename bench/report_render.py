"""What a training step spends on its HTML report after the job: one `report.training_report`.

A fresh interpreter per sample (the step renders once, so the first render counts), the report
module imported beforehand as the step has it; CPU and wall seconds of the call, median of N, one
or several kubetrain trees measured alternately (a tree from before the SVG charts drew with
matplotlib, which its report module imports when it draws):

    .venv/bin/python bench/report_render.py
    .venv/bin/python bench/report_render.py --runs 5 --tree before=/tmp/old/src --tree after=src
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

# 300 steps, an accuracy point per epoch: a 5-epoch run of the digits as the pipelines make it.
CHILD = r"""
import json, time
from kubetrain.kfp_runtime import report
if hasattr(report, "load_plotting"):  # a tree that still drew with matplotlib, loaded during the job
    report.load_plotting()
history = [{"step": i, "epoch": i // 60, "loss": 1 / (i + 1)} for i in range(300)]
for h in history[::60]:
    h["test_accuracy"] = 0.5 + h["step"] / 1000
metrics = {"test_accuracy": 0.9, "test_loss": 0.3, "train_loss": 0.2, "samples_per_second": 1000.0, "world_size": 2,
           "wall_seconds": 10.0, "epochs": 5, "global_step": 300, "history": history}
cpu, wall = time.process_time(), time.perf_counter()
report.training_report(title="bench", metrics=metrics, details=[("job", "bench")])
print(json.dumps([time.process_time() - cpu, time.perf_counter() - wall]))
"""


def sample(src: str | None) -> tuple[float, float]:
    """(CPU, wall) seconds of one report in a fresh interpreter, kubetrain from `src`."""
    env = {**os.environ, "MPLBACKEND": "Agg", **({"PYTHONPATH": src} if src else {})}
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=True, env=env)
    cpu, wall = json.loads(done.stdout.splitlines()[-1])
    return float(cpu), float(wall)


def main() -> None:
    """Print median CPU and wall seconds per tree."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--tree", action="append", default=[], metavar="LABEL=SRC")
    ns = parser.parse_args()
    trees: dict[str, str | None] = {"current": None}
    if ns.tree:
        trees = {label: os.path.abspath(src) for label, _, src in (t.partition("=") for t in ns.tree)}
    samples: dict[str, list[tuple[float, float]]] = {label: [] for label in trees}
    for _ in range(ns.runs):
        for label, src in trees.items():
            samples[label].append(sample(src))
    for label, values in samples.items():
        cpu = statistics.median(v[0] for v in values)
        wall = statistics.median(v[1] for v in values)
        print(f"{label}: report CPU {cpu:.3f} s, wall {wall:.3f} s (median of {ns.runs})")


if __name__ == "__main__":
    main()
