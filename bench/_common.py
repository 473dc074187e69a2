"""What the training-launch benchmarks share: the data set, timed runs, alternation and the table.

Each benchmark starts the same training run two ways, alternating which goes first in each round
(A B, B A, ...) so drift on a shared machine hits both sides alike. The figure compared is the
training program's own `samples_per_second` (records trained by all ranks / seconds rank 0 spent
in training steps), read from the run's metrics.json; the launch-to-exit wall time is reported
beside it. The result is the ratio of medians, kubetrain / the tool a user would use instead.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RunFn = Callable[[Path, list[str]], list[subprocess.Popen[bytes]]]


@dataclass
class Side:
    """One way of starting the run, and what its runs measured."""

    name: str
    start: RunFn
    samples_per_second: list[float] = field(default_factory=list)
    wall_seconds: list[float] = field(default_factory=list)
    accuracy: list[float] = field(default_factory=list)


def digits_dataset(root: Path) -> Path:
    """The built-in digits data set in the kubetrain format (made once under `root`)."""
    from kubetrain.data.download import download

    out = root / "digits"
    if not (out / "dataset.json").exists():
        download("builtin:digits", out)
    return out


def base_env() -> dict[str, str]:
    """The caller's environment, one intra-op thread per process (3 ranks on a small machine)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMI", "PET_"))}
    for var in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK"):
        env.pop(var, None)
    env["OMP_NUM_THREADS"] = "1"
    return env


def run_once(side: Side, *, train_args: list[str], workdir: Path, timeout: float) -> None:
    """Start one run, wait for every process, and record its metrics."""
    out = Path(tempfile.mkdtemp(prefix=f"{side.name}-", dir=workdir))
    args = [*train_args, "--output", str(out)]
    t0 = time.perf_counter()
    procs = side.start(out, args)
    try:
        codes = [p.wait(timeout) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    wall = time.perf_counter() - t0
    if any(codes):
        raise RuntimeError(f"{side.name}: a process failed with exit codes {codes}")
    m = json.loads((out / "metrics.json").read_text())
    side.samples_per_second.append(float(m["samples_per_second"]))
    side.wall_seconds.append(wall)
    side.accuracy.append(float(m["test_accuracy"]))


def alternate(a: Side, b: Side, *, rounds: int, train_args: list[str], workdir: Path, timeout: float) -> None:
    """`rounds` runs of each side, alternating which goes first."""
    for r in range(rounds):
        order = (a, b) if r % 2 == 0 else (b, a)
        for side in order:
            run_once(side, train_args=train_args, workdir=workdir, timeout=timeout)
            print(
                f"round {r + 1}/{rounds} {side.name:>10}: "
                f"{side.samples_per_second[-1]:9.0f} samples/s, {side.wall_seconds[-1]:5.2f} s wall",
                file=sys.stderr,
                flush=True,
            )


def summary(kubetrain: Side, other: Side, *, command: str, workload: str) -> dict[str, Any]:
    """Medians, the ratios kubetrain / other, and where it ran."""

    def med(xs: list[float]) -> float:
        return float(statistics.median(xs))

    return {
        "command": command,
        "workload": workload,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.python_version()}",
        "rounds": len(kubetrain.samples_per_second),
        kubetrain.name: {
            "samples_per_second_median": med(kubetrain.samples_per_second),
            "wall_seconds_median": med(kubetrain.wall_seconds),
            "samples_per_second": kubetrain.samples_per_second,
            "test_accuracy": kubetrain.accuracy,
        },
        other.name: {
            "samples_per_second_median": med(other.samples_per_second),
            "wall_seconds_median": med(other.wall_seconds),
            "samples_per_second": other.samples_per_second,
            "test_accuracy": other.accuracy,
        },
        "ratio_samples_per_second": med(kubetrain.samples_per_second) / med(other.samples_per_second),
        "ratio_wall_seconds": med(kubetrain.wall_seconds) / med(other.wall_seconds),
        # Each round's two runs ran back to back, so their ratio sees the same machine load.
        "paired_ratio_median": med(
            [k / o for k, o in zip(kubetrain.samples_per_second, other.samples_per_second, strict=True)]
        ),
        "load_average_at_end": list(os.getloadavg()),
    }


def markdown(result: dict[str, Any], kubetrain: str, other: str) -> str:
    """The result as the table docs/benchmarks.md shows."""
    k, o = result[kubetrain], result[other]
    return "\n".join(
        [
            "| launcher | median samples/s | median wall s | test accuracy (all rounds) |",
            "|---|---|---|---|",
            f"| {kubetrain} | {k['samples_per_second_median']:.0f} | "
            f"{k['wall_seconds_median']:.2f} | {min(k['test_accuracy']):.4f}–"
            f"{max(k['test_accuracy']):.4f} |",
            f"| {other} | {o['samples_per_second_median']:.0f} | "
            f"{o['wall_seconds_median']:.2f} | {min(o['test_accuracy']):.4f}–"
            f"{max(o['test_accuracy']):.4f} |",
            "",
            f"ratio of median samples/s, {kubetrain} / {other}: "
            f"**{result['ratio_samples_per_second']:.3f}** "
            f"(median of per-round ratios {result['paired_ratio_median']:.3f}; wall time ratio "
            f"{result['ratio_wall_seconds']:.3f}; {result['rounds']} rounds each, alternating; "
            f"{result['machine']}; load average at the end {result['load_average_at_end'][0]:.1f})",
        ]
    )
