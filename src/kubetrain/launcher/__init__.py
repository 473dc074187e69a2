"""The launcher: submit a job, follow it to its end, clean up — the same loop on every backend.

`loop` is the await loop (:func:`run_job`), `options` what it does with a job, `pods` the job's pod
stream and what it remembers of each pod, `logs` the primary pod's log follower and the failed
replicas' tails, `progress` the status lines it prints, `signals` how SIGTERM/SIGINT become a
clean cancellation, and `stopper` the delete a stop starts at once from a thread of its own.
"""

from kubetrain.launcher.loop import run_job
from kubetrain.launcher.options import (
    DELETE_AFTER_CHOICES,
    ON_TIMEOUT_CHOICES,
    AwaitOptions,
    DeleteAfter,
    OnTimeout,
    Tuning,
)
from kubetrain.launcher.progress import LogSink, stderr_sink, timestamped_stderr_sink

__all__ = [
    "DELETE_AFTER_CHOICES",
    "ON_TIMEOUT_CHOICES",
    "AwaitOptions",
    "DeleteAfter",
    "LogSink",
    "OnTimeout",
    "Tuning",
    "run_job",
    "stderr_sink",
    "timestamped_stderr_sink",
]
