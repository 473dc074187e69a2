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
"""

from __future__ import annotations

import argparse
import json
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


def cumulative_us(module: str, *, after: str | None) -> int:
    """One fresh interpreter's cumulative import time of `module` in microseconds."""
    code = (f"import {after}; " if after else "") + f"import {module}"
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True, check=True)
    for line in done.stderr.splitlines():
        # "import time: self [us] | cumulative | imported package"
        parts = [p.strip() for p in line.removeprefix("import time:").split("|")]
        if len(parts) == 3 and parts[2] == module:
            return int(parts[1])
    raise SystemExit(f"step_imports: no import line for {module} (already imported by {after}?)")


def measure(runs: int) -> dict[str, dict[str, float]]:
    """Median seconds per step, alone and after KFP's executor, plus the executor itself."""
    table: dict[str, dict[str, float]] = {}
    executor = [cumulative_us(KFP_EXECUTOR, after=None) for _ in range(runs)]
    table["kfp executor (not kubetrain's)"] = {"alone": statistics.median(executor) / 1e6}
    for step, module in STEPS.items():
        alone = [cumulative_us(module, after=None) for _ in range(runs)]
        after = [cumulative_us(module, after=KFP_EXECUTOR) for _ in range(runs)]
        table[step] = {"alone": statistics.median(alone) / 1e6, "after kfp": statistics.median(after) / 1e6}
    return table


def main() -> None:
    """Print the table (or JSON)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    ns = parser.parse_args()
    table = measure(ns.runs)
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
