"""Where a machine's CPU goes while something runs: CPU seconds per kind of process, from /proc.

On two cores the e2e tier is CPU-bound, so cutting its time means cutting some process's work.
This samples every process's CPU time (utime + stime in /proc/<pid>/stat) every `--every` seconds
for `--seconds` (or until SIGTERM/SIGINT) and prints the CPU seconds each kind of process used in
that window, next to what the whole machine used (/proc/stat). A kind is a process's command
name, or for Python `python -m MODULE` / `python SCRIPT.py`, and one `chromium` for the browser's
many processes. A process that starts and ends between two samples is missed; most of the
tier's (pods, steps, browsers) live for seconds or more.

    python bench/cpu_by_process.py --seconds 60            # the idle cluster's own cost
    python bench/cpu_by_process.py & PID=$!; <run a test module>; kill $PID
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools.ci.e2e import cpu_jiffies

TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Seen:
    """One process (pid and start time) as first and last sampled."""

    kind: str
    first: float
    last: float


def kind_of(pid: str, comm: str) -> str:
    """What a process is, for grouping: `python -m MODULE`, `python SCRIPT.py`, `chromium` or its command name."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            words = [w.decode(errors="replace") for w in f.read().split(b"\0") if w]
    except OSError:
        return comm
    program = os.path.basename(words[0]) if words else ""
    if "chrom" in comm or "chrom" in program:
        return "chromium"
    if "python" in comm or "python" in program:
        for i, word in enumerate(words[1:], start=1):
            if word == "-m" and i + 1 < len(words):
                return f"python -m {words[i + 1]}"
            if word.endswith(".py"):
                return f"python {os.path.basename(word)}"
            if word == "-c":
                return "python -c"
        return "python"
    return comm


def read_stat(pid: str) -> tuple[str, list[str]]:
    """A process's command name and the fields of /proc/<pid>/stat after it; OSError once it has ended."""
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    return stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()


def cpu_seconds(fields: list[str]) -> float:
    """The CPU time (utime + stime) in a process's stat fields as read_stat returns them."""
    return (int(fields[11]) + int(fields[12])) / TICKS


def machine_busy() -> float:
    """CPU seconds the whole machine has spent not idle since boot (CI's phase lines read the same)."""
    return cpu_jiffies()[0] / TICKS


def sample(seen: dict[tuple[str, str], Seen], *, first_round: bool) -> None:
    """Read every process's CPU time once; a process new after the first round counts from zero."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            comm, fields = read_stat(pid)
        except OSError:  # ended meanwhile
            continue
        cpu = cpu_seconds(fields)
        key = (pid, fields[19])  # the start time tells a reused pid apart
        if key in seen:
            seen[key].last = cpu
        else:
            seen[key] = Seen(kind_of(pid, comm), cpu if first_round else 0.0, cpu)


def main(argv: Sequence[str] | None = None) -> int:
    """Sample, then print the table (see the module's docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=None, help="how long to sample (default: until SIGTERM)")
    parser.add_argument("--every", type=float, default=2.0, help="seconds between samples (default 2)")
    parser.add_argument("--top", type=int, default=30, help="how many kinds to print (default 30)")
    args = parser.parse_args(argv)
    stopped = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopped
        stopped = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    seen: dict[tuple[str, str], Seen] = {}
    start, busy_start = time.monotonic(), machine_busy()
    sample(seen, first_round=True)
    while not stopped and (args.seconds is None or time.monotonic() - start < args.seconds):
        time.sleep(args.every)
        sample(seen, first_round=False)
    wall, busy = time.monotonic() - start, machine_busy() - busy_start
    by_kind: dict[str, float] = defaultdict(float)
    for process in seen.values():
        by_kind[process.kind] += process.last - process.first
    print(f"window {wall:.0f} s: the machine busy {busy:.0f} CPU-s ({busy / wall:.2f} cores), "
          f"{sum(by_kind.values()):.0f} CPU-s seen in its processes")  # fmt: skip
    for kind, cpu in sorted(by_kind.items(), key=lambda item: -item[1])[: args.top]:
        print(f"{cpu:8.1f} CPU-s {100 * cpu / max(busy, 1e-9):5.1f}%  {kind}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
