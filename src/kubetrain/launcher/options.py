"""What the launcher does with a job (:class:`AwaitOptions`) and how often it looks (:class:`Tuning`)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Literal

from kubetrain.errors import InvalidInputError
from kubetrain.launcher.relay import DEFAULT_MAX_RELAYED_BYTES
from kubetrain.specs.limits import check_seconds

DeleteAfter = Literal["never", "success", "always"]
OnTimeout = Literal["delete", "suspend"]
DELETE_AFTER_CHOICES: tuple[str, ...] = ("never", "success", "always")
ON_TIMEOUT_CHOICES: tuple[str, ...] = ("delete", "suspend")


@dataclass(frozen=True, kw_only=True)
class Tuning:
    """How often the launcher looks at what. Defaults suit real clusters; tests shorten them."""

    # The longest watch window (each is drawn between half this and this: spread_window). The
    # backend reconnects inside it; the window bounds how long the loop goes without checking its
    # deadline and how long a silently dead connection goes unnoticed.
    watch_window_seconds: float = 300.0
    # While the job or a pod is pending, events are listed after this long, so that
    # FailedScheduling, FailedMount and operator rejections (an MPIJob's ValidationError, a
    # FailedCreate refused by admission or quota) are reported promptly (pods are watched: a pod's
    # ImagePullBackOff or CrashLoopBackOff is reported as it happens). The interval doubles after
    # each look that finds nothing new, up to pending_poll_max_seconds, and starts again when the
    # job's phase changes: a thousand jobs queued behind an operator must not cost the API server
    # a thousand listings every few seconds.
    pending_poll_seconds: float = 5.0
    pending_poll_max_seconds: float = 60.0
    log_tail_lines: int = 50
    # A bound on the last read of the primary pod's log once it has ended (the launcher stops
    # following it and reads the rest; this only limits a read that hangs).
    log_drain_seconds: float = 10.0
    # A notice after this long without a line of the followed log (then again each time as long).
    silence_notice_seconds: float = 600.0
    # How much of the followed log the launcher relays to its own output (launcher.relay).
    max_relayed_log_bytes: int = DEFAULT_MAX_RELAYED_BYTES

    def __post_init__(self) -> None:
        for name in ("watch_window_seconds", "pending_poll_seconds", "log_drain_seconds", "silence_notice_seconds"):
            if not getattr(self, name) > 0:
                raise InvalidInputError(f"{name}: got {getattr(self, name)!r}; expected a positive number")
        if self.pending_poll_max_seconds < self.pending_poll_seconds:
            raise InvalidInputError(
                f"pending_poll_max_seconds: got {self.pending_poll_max_seconds!r}; expected at least "
                f"pending_poll_seconds ({self.pending_poll_seconds!r})"
            )
        if self.max_relayed_log_bytes < 1:
            raise InvalidInputError(f"max_relayed_log_bytes: got {self.max_relayed_log_bytes!r}; expected ≥ 1")
        if self.log_tail_lines < 1:
            raise InvalidInputError(f"log_tail_lines: got {self.log_tail_lines!r}; expected ≥ 1")


def spread_window(seconds: float) -> float:
    """One watch window's length: between half of `seconds` and `seconds`, drawn anew each time.

    Launchers started together (a pipeline's parallel steps) would otherwise reopen their watches
    at the same instant at the end of every window, and API Priority and Fairness answers such a
    burst with 429s, which delays the news of every job that ends just then (docs/benchmarks.md,
    Scale). Never longer than `seconds`: the window also bounds how long a silently dead
    connection goes unnoticed.
    """
    return seconds * random.uniform(0.5, 1.0)


@dataclass(frozen=True, kw_only=True)
class AwaitOptions:
    """What the launcher does with a job. Validated on construction."""

    timeout_seconds: float
    delete_after: DeleteAfter = "success"
    on_timeout: OnTimeout = "delete"
    stream_logs: bool = True
    # Limit on the time to reach Running (an image that never pulls, a pod that never schedules).
    start_timeout_seconds: float | None = None
    tuning: Tuning = field(default_factory=Tuning)

    def __post_init__(self) -> None:
        # Bounded (366 days): inf or 1e30 would overflow the clocks and waits the deadline feeds.
        check_seconds("timeout_seconds", self.timeout_seconds)
        if self.start_timeout_seconds is not None:
            check_seconds("start_timeout_seconds", self.start_timeout_seconds)
        if self.delete_after not in DELETE_AFTER_CHOICES:
            raise InvalidInputError(
                f"delete_after: got {self.delete_after!r}; expected one of {', '.join(DELETE_AFTER_CHOICES)}"
            )
        if self.on_timeout not in ON_TIMEOUT_CHOICES:
            raise InvalidInputError(
                f"on_timeout: got {self.on_timeout!r}; expected one of {', '.join(ON_TIMEOUT_CHOICES)}"
            )
