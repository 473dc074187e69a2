"""What a KFP step's process imports before it does anything: `python -X importtime`, median of N runs.

A KFP step on the real backend runs `python -m kfp.dsl.executor_main`, which imports kfp (and,
through kfp.client, the Kubernetes client) before it loads the component's source; the
component's body then imports one kubetrain module. Two figures per step, each the median over
fresh interpreters of the cumulative import time Python reports:

- `alone`: the kubetrain module in an interpreter that imported nothing else;
- `after kfp`: the same module after `kfp.dsl.executor_main`, i.e. what kubetrain adds to what
  KFP's executor already costs (the step's real situation).

    .venv/bin/python bench/step_imports.py            # 5 runs each
    .venv/bin/python bench/step_imports.py --runs 9 --json
    # before/after in one run, alternating, so a loaded machine's drift hits both alike:
    .venv/bin/python bench/step_imports.py --tree before=/tmp/old/src --tree after=src
    .venv/bin/python bench/step_imports.py --cpu ...   # CPU seconds of the import: steadier under load
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

# The module each component body imports first (components/*.py).
STEPS = {
    "download_dataset": "kubetrain.kfp_runtime.download_step",
    "pytorch/chainermn/ps_train": "kubetrain.kfp_runtime.frameworks",
    "compare_summary": "kubetrain.kfp_runtime.summary",
}
KFP_EXECUTOR = "kfp.dsl.executor_main"


def cumulative_us(module: str, *, after: str | None, src: str | None = None, cpu: bool = False) -> int:
    """One fresh interpreter's cumulative import time of `module` in microseconds (kubetrain from `src`).

    With `cpu`, the CPU time the import took (time.process_time) instead of -X importtime's wall
    time: far steadier on a loaded machine, where wall time mostly measures the other processes.
    """
    env = {**os.environ, "PYTHONPATH": src} if src else None
    if cpu:
        code = (f"import time; import {after}; " if after else "import time; ") + (
            f"t = time.process_time(); import {module}; print(round((time.process_time() - t) * 1e6))"
        )
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
        return int(done.stdout.split()[-1])
    code = (f"import {after}; " if after else "") + f"import {module}"
    argv = [sys.executable, "-X", "importtime", "-c", code]
    done = subprocess.run(argv, capture_output=True, text=True, check=True, env=env)
    for line in done.stderr.splitlines():
        # "import time: self [us] | cumulative | imported package"
        parts = [p.strip() for p in line.removeprefix("import time:").split("|")]
        if len(parts) == 3 and parts[2] == module:
            return int(parts[1])
    raise SystemExit(f"step_imports: no import line for {module} (already imported by {after}?)")


def measure(runs: int, trees: dict[str, str | None], *, cpu: bool = False) -> dict[str, dict[str, float]]:
    """Median seconds per step and tree, alone and after KFP's executor, plus the executor itself.

    The trees are measured alternately within each run, so load on the machine hits them alike.
    """
    samples: dict[str, list[int]] = {}

    def sample(key: str, value: int) -> None:
        samples.setdefault(key, []).append(value)

    for _ in range(runs):
        sample("kfp executor (not kubetrain's)|alone", cumulative_us(KFP_EXECUTOR, after=None, cpu=cpu))
        for step, module in STEPS.items():
            for label, src in trees.items():
                sample(f"{step} [{label}]|alone", cumulative_us(module, after=None, src=src, cpu=cpu))
                sample(f"{step} [{label}]|after kfp", cumulative_us(module, after=KFP_EXECUTOR, src=src, cpu=cpu))
    table: dict[str, dict[str, float]] = {}
    for key, values in samples.items():
        row, column = key.split("|")
        table.setdefault(row, {})[column] = statistics.median(values) / 1e6
    return table


def main() -> None:
    """Print the table (or JSON)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--tree", action="append", default=[], metavar="LABEL=SRC", help="a kubetrain source tree to measure"
    )
    parser.add_argument("--cpu", action="store_true", help="CPU seconds of the import instead of wall seconds")
    ns = parser.parse_args()
    trees: dict[str, str | None] = {"current": None}
    if ns.tree:
        trees = {label: os.path.abspath(src) for label, _, src in (t.partition("=") for t in ns.tree)}
    table = measure(ns.runs, trees, cpu=ns.cpu)
    if ns.json:
        print(json.dumps(table, indent=2))
        return
    print(f"| step | module imports alone (s) | after KFP's executor (s) |  (median of {ns.runs})")
    print("|---|---|---|")
    for step, row in table.items():
        after = f"{row['after kfp']:.3f}" if "after kfp" in row else "-"
        print(f"| {step} | {row['alone']:.3f} | {after} |")


if __name__ == "__main__":
    main()
