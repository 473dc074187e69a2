"""Run every benchmark in bench/, one after another, each printing its own report.

`make bench` calls this. Each benchmark compares kubetrain with the tool a user would pick
instead, in one run; its figure goes into docs/benchmarks.md's table with the command and date,
the printed tables into docs/history/benchmarks-<yyyy-mm>.md (docs/README.md).
Benchmarks run one at a time because two cores cannot time two things at once.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
BENCHMARKS = (
    "download.py",
    "short_jobs.py",
    "kfp_step.py",
    "ddp_vs_torchrun.py",
    "chainermn_vs_mpirun.py",
    "ps_stragglers.py",
    "ps_vs_ddp.py",
    # Against the e2e tier's real control plane (started if needed, built first on a cold machine).
    "api_cost.py",
    "scale.py",
)


def main(argv: list[str] | None = None) -> int:
    """Run the selected benchmarks (all by default); the exit code is the first failure's."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("names", nargs="*", help="benchmarks to run (file names in bench/), default all")
    args = parser.parse_args(argv)
    selected = args.names or list(BENCHMARKS)
    failed = 0
    for name in selected:
        path = BENCH_DIR / name
        if not path.exists():
            print(f"== {name}: not found in {BENCH_DIR}", file=sys.stderr)
            failed = failed or 2
            continue
        print(f"== {name}", flush=True)
        start = time.monotonic()
        rc = subprocess.call([sys.executable, str(path)])
        print(f"== {name}: exit {rc} after {time.monotonic() - start:.0f}s", flush=True)
        failed = failed or rc
    return failed


if __name__ == "__main__":
    sys.exit(main())
