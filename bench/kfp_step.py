"""The KFP step around the launcher: from the step's start to the job's submission, and from the
job's end to the step's exit.

Runs `kubetrain run mnist_pytorch --param epochs=1` (kfp.local, the local backend, builtin digits)
and reads the timestamps of its log: kfp.local's "Executing task 'pytorch-train'" (the step's
process is started), the launcher's "submitted" and "succeeded" lines (timestamped by the step),
and kfp.local's "Task 'pytorch-train' finished" (the step's process has exited and its outputs are
collected). The job's own time (submitted → succeeded) is the training, reported beside it.

    .venv/bin/python bench/kfp_step.py             # 3 rounds
    .venv/bin/python bench/kfp_step.py --rounds 5 --json
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
from datetime import datetime
from pathlib import Path

ANSI = re.compile(r"\x1b\[[0-9;]*m")
STAMP = r"(\d\d:\d\d:\d\d\.\d+)"
PATTERNS = {
    "step_start": re.compile(rf"^{STAMP} - INFO - Executing task 'pytorch-train'"),
    "submitted": re.compile(rf"^\s*{STAMP} PyTorchJob \S+ submitted"),
    "job_end": re.compile(rf"^\s*{STAMP} PyTorchJob \S+ succeeded"),
    "step_exit": re.compile(rf"^{STAMP} - INFO - Task 'pytorch-train' finished"),
}


def _seconds(stamp: str) -> float:
    moment = datetime.strptime(stamp[:12], "%H:%M:%S.%f")
    return moment.hour * 3600 + moment.minute * 60 + moment.second + moment.microsecond / 1e6


def one_round(workdir: Path) -> dict[str, float]:
    """Run the pipeline once and return the step's phases in seconds."""
    kubetrain = str(Path(sys.executable).parent / "kubetrain")
    done = subprocess.run(
        [kubetrain, "run", "mnist_pytorch", "--param", "epochs=1"],
        cwd=workdir, capture_output=True, text=True, check=True,
    )  # fmt: skip
    marks: dict[str, float] = {}
    for raw in (done.stdout + "\n" + done.stderr).splitlines():
        line = ANSI.sub("", raw)
        for key, pattern in PATTERNS.items():
            found = pattern.search(line)
            if found and key not in marks:
                marks[key] = _seconds(found.group(1))
    missing = sorted(set(PATTERNS) - set(marks))
    if missing:
        raise SystemExit(f"kfp_step: no {', '.join(missing)} line in the run's log")
    return {
        "start_to_submit": marks["submitted"] - marks["step_start"],
        "job": marks["job_end"] - marks["submitted"],
        "end_to_exit": marks["step_exit"] - marks["job_end"],
        "step": marks["step_exit"] - marks["step_start"],
    }


def main(argv: list[str] | None = None) -> int:
    """Run the rounds and print medians (or JSON)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kubetrain-kfp-step-") as tmp:
        rounds = [one_round(Path(tmp)) for _ in range(args.rounds)]
    medians = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
    if args.json:
        print(json.dumps({"rounds": rounds, "median": medians}, indent=2))
        return 0
    print(f"pytorch-train step of mnist_pytorch (epochs=1, kfp.local), {args.rounds} rounds; medians in seconds")
    print("| step start → submit | job (submit → end) | job end → step exit | whole step |")
    print("|---:|---:|---:|---:|")
    print(f"| {medians['start_to_submit']:.2f} | {medians['job']:.2f} | {medians['end_to_exit']:.2f} | "
          f"{medians['step']:.2f} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
