"""What the training-launch benchmarks share: the data set, timed runs, alternation and the table.

Each benchmark starts the same training run two ways, alternating which goes first in each round
(A B, B A, ...) so drift on a shared machine hits both sides alike: kubetrain's local backend
running a job built by kubetrain.presets (through `kubetrain.launcher.run_job`, as `kubetrain
launch --local` does), and the tool a user would use instead. The figure compared is the training
program's own `samples_per_second` (records trained by all ranks / seconds rank 0 spent in
training steps), read from rank 0's metrics.json in the run's output directory on both sides.
Beside it: each job's start-to-end wall time (launch call to return, measured here), and the part
of it outside rank 0's program (`wall - metrics.wall_seconds`: process start-up, imports, and for
kubetrain the backend's submit, supervisor and status watch), so the launch overhead shows
separately from the training loop. The result is the ratio of medians, kubetrain / the other tool.
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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubetrain.backends.local.backend import LocalBackend
from kubetrain.errors import KubetrainError
from kubetrain.launcher import AwaitOptions, run_job

# Runs one job to its end, its rank 0 writing metrics.json into the given output directory;
# returns one line saying how it ran (the job and backend for kubetrain, the command otherwise).
RunFn = Callable[[Path], str]


@dataclass
class Side:
    """One way of starting the run, and what its runs measured."""

    name: str
    run: RunFn
    samples_per_second: list[float] = field(default_factory=list)
    wall_seconds: list[float] = field(default_factory=list)
    program_seconds: list[float] = field(default_factory=list)
    accuracy: list[float] = field(default_factory=list)
    launches: list[str] = field(default_factory=list)

    @property
    def overhead_seconds(self) -> list[float]:
        """Per run: launch-to-exit wall time minus the time rank 0's program measured itself."""
        return [w - p for w, p in zip(self.wall_seconds, self.program_seconds, strict=True)]


def digits_dataset(root: Path) -> Path:
    """The built-in digits data set in the kubetrain format (made once under `root`)."""
    from kubetrain.data.download import download

    out = root / "digits"
    if not (out / "dataset.json").exists():
        download("builtin:digits", out)
    return out


def base_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The caller's environment, one intra-op thread per process (3 ranks on a small machine)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMI", "PET_"))}
    for var in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK"):
        env.pop(var, None)
    env["OMP_NUM_THREADS"] = "1"
    return env | dict(extra or {})


def run_processes(cmd: list[str], *, label: str, env: Mapping[str, str], log: Path, timeout: float) -> str:
    """Run one launcher command (torchrun, mpiexec) to its end; a non-zero exit raises."""
    with open(log, "wb") as f:
        proc = subprocess.Popen(cmd, env=dict(env), stdout=f, stderr=subprocess.STDOUT)
        try:
            code = proc.wait(timeout)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    if code:
        tail = log.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"{label} exited with {code}; the end of {log}:\n{tail}")
    return f"{label}: exit 0"


def run_local_job(manifest: Mapping[str, Any], *, backend: LocalBackend, out: Path, timeout: float) -> str:
    """Run `manifest` on kubetrain's local backend through the launcher, as `kubetrain launch --local` does.

    The launcher's own lines (submitted, phase changes) go to `out/launcher.log`; a failed or
    timed-out job raises the launcher's error, which carries the failing replicas' log tails.
    """
    lines: list[str] = []
    try:
        result = run_job(
            manifest,
            backend=backend,
            options=AwaitOptions(timeout_seconds=timeout, delete_after="never", stream_logs=False),
            log_sink=lines.append,
        )
    except KubetrainError:
        # The error shows the current attempts' tails; earlier attempts of a restarted replica
        # are only in its log files, which go with the benchmark's temporary directory.
        name = str(manifest["metadata"]["name"])
        for log in sorted(backend.root.glob(f"jobs/*/{name}-*/logs/*.log")):
            print(f"--- {log.name} ---\n{log.read_text(errors='replace')[-3000:]}", file=sys.stderr)
        raise
    finally:
        (out / "launcher.log").write_text("".join(line + "\n" for line in lines))
    return f"{result.kind} {result.namespace}/{result.name} {result.phase.value} on the {result.backend} backend"


def run_once(side: Side, *, workdir: Path) -> None:
    """Run one job into a fresh output directory and record its metrics and wall time."""
    out = Path(tempfile.mkdtemp(prefix=f"{side.name}-", dir=workdir))
    t0 = time.perf_counter()
    launch = side.run(out)
    wall = time.perf_counter() - t0
    m = json.loads((out / "metrics.json").read_text())
    side.samples_per_second.append(float(m["samples_per_second"]))
    side.wall_seconds.append(wall)
    side.program_seconds.append(float(m["wall_seconds"]))
    side.accuracy.append(float(m["test_accuracy"]))
    side.launches.append(launch)


def alternate(a: Side, b: Side, *, rounds: int, workdir: Path) -> None:
    """`rounds` runs of each side, alternating which goes first."""
    for r in range(rounds):
        order = (a, b) if r % 2 == 0 else (b, a)
        for side in order:
            run_once(side, workdir=workdir)
            print(
                f"round {r + 1}/{rounds} {side.name:>10}: "
                f"{side.samples_per_second[-1]:9.0f} samples/s, {side.wall_seconds[-1]:5.2f} s wall "
                f"({side.overhead_seconds[-1]:4.2f} s outside rank 0's program), "
                f"load {os.getloadavg()[0]:.1f}",
                file=sys.stderr,
                flush=True,
            )


def _med(xs: list[float]) -> float:
    return float(statistics.median(xs))


def _side_json(side: Side) -> dict[str, Any]:
    return {
        "samples_per_second_median": _med(side.samples_per_second),
        "wall_seconds_median": _med(side.wall_seconds),
        "overhead_seconds_median": _med(side.overhead_seconds),
        "samples_per_second": side.samples_per_second,
        "wall_seconds": side.wall_seconds,
        "overhead_seconds": side.overhead_seconds,
        "test_accuracy": side.accuracy,
        "launches": side.launches,
    }


def summary(kubetrain: Side, other: Side, *, command: str, workload: str, load_at_start: float) -> dict[str, Any]:
    """Medians, the ratios kubetrain / other, per-round values, and where it ran."""
    return {
        "command": command,
        "workload": workload,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "rounds": len(kubetrain.samples_per_second),
        "first_in_round": [kubetrain.name if r % 2 == 0 else other.name for r in range(len(other.wall_seconds))],
        kubetrain.name: _side_json(kubetrain),
        other.name: _side_json(other),
        "ratio_samples_per_second": _med(kubetrain.samples_per_second) / _med(other.samples_per_second),
        "ratio_wall_seconds": _med(kubetrain.wall_seconds) / _med(other.wall_seconds),
        # Each round's two runs ran back to back, so their ratio sees the same machine load.
        "paired_ratio_median": _med(
            [k / o for k, o in zip(kubetrain.samples_per_second, other.samples_per_second, strict=True)]
        ),
        "load_average_at_start": load_at_start,
        "load_average_at_end": list(os.getloadavg()),
    }


def markdown(result: dict[str, Any], kubetrain: str, other: str) -> str:
    """The result as the tables docs/history/ keeps of each run: per round, then medians and ratios."""
    k, o = result[kubetrain], result[other]
    rows = [
        f"| round | first | {kubetrain} samples/s | {other} samples/s | ratio | "
        f"{kubetrain} wall s (outside program) | {other} wall s (outside program) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in range(result["rounds"]):
        ks, os_ = k["samples_per_second"][r], o["samples_per_second"][r]
        rows.append(
            f"| {r + 1} | {result['first_in_round'][r]} | {ks:.0f} | {os_:.0f} | {ks / os_:.3f} | "
            f"{k['wall_seconds'][r]:.2f} ({k['overhead_seconds'][r]:.2f}) | "
            f"{o['wall_seconds'][r]:.2f} ({o['overhead_seconds'][r]:.2f}) |"
        )
    acc = [*k["test_accuracy"], *o["test_accuracy"]]
    k_wall = f"{k['wall_seconds_median']:.2f} ({k['overhead_seconds_median']:.2f})"
    o_wall = f"{o['wall_seconds_median']:.2f} ({o['overhead_seconds_median']:.2f})"
    return "\n".join(
        [
            *rows,
            f"| **median** | | **{k['samples_per_second_median']:.0f}** | **{o['samples_per_second_median']:.0f}** | "
            f"**{result['ratio_samples_per_second']:.3f}** | {k_wall} | {o_wall} |",
            "",
            f"ratio of median samples/s, {kubetrain} / {other}: **{result['ratio_samples_per_second']:.3f}** "
            f"(median of per-round ratios {result['paired_ratio_median']:.3f}); wall time ratio "
            f"{result['ratio_wall_seconds']:.3f}; {result['rounds']} rounds each, alternating; test accuracy "
            f"{min(acc):.4f}–{max(acc):.4f}; {result['machine']}; 1-min load average "
            f"{result['load_average_at_start']:.1f} at the start, {result['load_average_at_end'][0]:.1f} at the end",
        ]
    )
