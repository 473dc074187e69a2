"""The bounds of kubetrain's numeric training and time inputs.

Each upper bound lies far past any real run, so a value past it is a typo or a probe
(`epochs=10**20`, a timeout of 1e30 s that overflows the clock it is added to), refused before
anything is submitted with an error naming the field, the value and the bound. The bounds are
documented in docs/cluster.md ("Errors, not tracebacks"); the replica cap, MAX_REPLICAS, lives with
the replica specs in :mod:`kubetrain.specs.common`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kubetrain.errors import SpecError

MAX_EPOCHS = 100_000
MAX_BATCH_SIZE = 1_000_000
# NumPy's legacy seeding takes at most 2**32 - 1, and the programs seed NumPy, Python and torch alike.
MAX_SEED = 2**32 - 1
# Per pod: the largest nodes carry 8 to 16 GPUs.
MAX_GPUS = 64
MAX_BACKOFF_LIMIT = 1_000
# MPI ranks on one worker: one per core or GPU of the largest nodes.
MAX_SLOTS_PER_WORKER = 1_024
MAX_RECORDS_PER_TASK = 100_000_000
# A year (366 days): the longest timeout, start timeout or job deadline.
MAX_SECONDS = 366 * 24 * 3600


@dataclass(frozen=True)
class Count:
    """A whole-number input: its least and greatest value, what it counts, and the constant that caps it."""

    minimum: int
    maximum: int
    meaning: str
    cap: str

    def check(self, field_name: str, value: object) -> None:
        """Raise SpecError naming `field_name` unless `value` is an integer within the bounds (bools are not)."""
        if isinstance(value, bool) or not isinstance(value, int) or value < self.minimum:
            raise SpecError(field_name, value, f"an integer >= {self.minimum} ({self.meaning})")
        if value > self.maximum:
            raise SpecError(field_name, value, f"at most {self.maximum} ({self.meaning}; {self.cap})")


EPOCHS = Count(1, MAX_EPOCHS, "passes over the training data", "MAX_EPOCHS")
BATCH_SIZE = Count(1, MAX_BATCH_SIZE, "records per process per step", "MAX_BATCH_SIZE")
SEED = Count(0, MAX_SEED, "the random seed", "MAX_SEED")
GPUS = Count(0, MAX_GPUS, "GPUs per training pod; 0 for none", "MAX_GPUS")
BACKOFF_LIMIT = Count(0, MAX_BACKOFF_LIMIT, "pod restarts the operator allows; 0 for none", "MAX_BACKOFF_LIMIT")
SLOTS_PER_WORKER = Count(1, MAX_SLOTS_PER_WORKER, "MPI ranks per worker", "MAX_SLOTS_PER_WORKER")
DEADLINE_SECONDS = Count(1, MAX_SECONDS, "the job's activeDeadlineSeconds", "366 days; MAX_SECONDS")
RECORDS_PER_TASK = Count(1, MAX_RECORDS_PER_TASK, "records in each task the master hands out", "MAX_RECORDS_PER_TASK")


def check_learning_rate(value: object, field_name: str = "learning_rate", *, noun: str = "number") -> None:
    """A finite learning rate > 0.

    No upper bound, unlike the counts and times above: a large rate costs no resources, and what it
    does to training (divergence) is caught while the job runs and ends it with one line naming the
    non-finite loss (`DivergedError`), the answer a user needs rather than a guess at their optimizer.
    """
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    rate = float(value) if number else math.nan  # type: ignore[arg-type]
    if not (0 < rate < math.inf):  # NaN fails here too
        raise SpecError(field_name, value, f"a finite {noun} > 0")


def check_seconds(field_name: str, value: object, *, zero: str = "") -> None:
    """A number of seconds > 0 (>= 0 when `zero` says what 0 means), finite and at most MAX_SECONDS."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    seconds = float(value) if number else math.nan  # type: ignore[arg-type]
    # NaN fails every comparison, so it lands here too; inf and 1e30 fail the upper bound.
    if not (seconds >= 0 if zero else seconds > 0) or not seconds <= MAX_SECONDS:
        least = f"a number of seconds >= 0 ({zero})" if zero else "a positive number of seconds"
        raise SpecError(field_name, value, f"{least}, at most {MAX_SECONDS} (366 days; MAX_SECONDS)")
