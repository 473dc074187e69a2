"""The step process's own cost, in one line at its end: CPU time (user+sys, its children included) and wall.

bench/kfp_backend.py reads the line from the step pod's log (the API server's pods/log) to show
what the launcher itself spends beside the training pods; :func:`parse_usage_line` is the reader.
"""

from __future__ import annotations

import os
import re
import resource
import time
from dataclasses import dataclass

__all__ = ["USAGE_PREFIX", "StepUsage", "parse_usage_line", "process_wall_seconds", "usage_line"]

USAGE_PREFIX = "launcher: cpu"
_LINE = re.compile(r"^launcher: cpu (\d+(?:\.\d+)?) s user\+sys, wall (\d+(?:\.\d+)?) s$", re.MULTILINE)


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and of the children it has waited for."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def process_wall_seconds(fallback_start: float) -> float:
    """Seconds since this process started (Linux /proc), else since `fallback_start` (a time.monotonic())."""
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            # Field 22 (after the parenthesised command name, which may hold spaces): start time in ticks.
            started_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime", encoding="ascii") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - started_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return time.monotonic() - fallback_start


def usage_line(fallback_start: float) -> str:
    """`launcher: cpu 1.23 s user+sys, wall 12.3 s`: this process's cost so far."""
    return f"{USAGE_PREFIX} {cpu_seconds():.2f} s user+sys, wall {process_wall_seconds(fallback_start):.1f} s"


@dataclass(frozen=True)
class StepUsage:
    """CPU and wall seconds read back from a step's log."""

    cpu_seconds: float
    wall_seconds: float

    def __post_init__(self) -> None:
        for name in ("cpu_seconds", "wall_seconds"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"StepUsage.{name}: got {getattr(self, name)!r}; expected seconds >= 0")


def parse_usage_line(log: str) -> StepUsage | None:
    """The last usage line in a step's log (its own, even if a retried step logged an earlier one)."""
    found = _LINE.findall(log)
    if not found:
        return None
    cpu, wall = found[-1]
    return StepUsage(cpu_seconds=float(cpu), wall_seconds=float(wall))
