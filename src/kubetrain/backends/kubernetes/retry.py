"""Retries for Kubernetes API calls: connection errors, 5xx and 429, with backoff, jitter and a limit.

The old launchers and SDKs turned the first API hiccup into a failed training step (every
ApiException became RuntimeError). An API server restart, a load balancer drop or throttling
lasts seconds; a training job lasts hours. Here transient failures are retried with exponential
backoff and full jitter (so a fleet of launchers does not retry in lock-step), a `Retry-After`
header is honoured, and only a failure that outlasts the limit becomes a BackendError.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import urllib3
from kubernetes.client.exceptions import ApiException

from kubetrain.backends.kubernetes.errors import api_message
from kubetrain.errors import BackendError, InvalidInputError

logger = logging.getLogger(__name__)

T = TypeVar("T")

# (connect, read) seconds for one attempt of an ordinary request; a watch reads for longer.
REQUEST_TIMEOUT = (10.0, 60.0)
RETRIABLE_STATUS = frozenset({429, 500, 502, 503, 504})
# What the transport raises when a connection is refused, reset, cut mid-body or times out.
TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError)


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """How often and how patiently to retry a transient API failure."""

    attempts: int = 8
    initial_delay_seconds: float = 0.5
    max_delay_seconds: float = 20.0
    max_retry_after_seconds: float = 60.0
    # A 429 is the server asking to come back later, not a failure: it spends this budget (per
    # call) instead of an attempt. A thousand launchers under one service account are throttled
    # together by API Priority and Fairness; giving up after a few tries left finished jobs undeleted.
    max_throttled_seconds: float = 900.0
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.max_throttled_seconds < 0:
            raise InvalidInputError(f"max_throttled_seconds: got {self.max_throttled_seconds!r}; expected ≥ 0")
        if self.attempts < 1:
            raise InvalidInputError(f"attempts: got {self.attempts!r}; expected ≥ 1")
        if not 0 < self.initial_delay_seconds <= self.max_delay_seconds:
            raise InvalidInputError(
                f"delays: got initial {self.initial_delay_seconds!r}, max {self.max_delay_seconds!r}; "
                "expected 0 < initial ≤ max"
            )

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait before retry number `attempt` (1-based)."""
        if retry_after is not None:
            # At least what the server asked for, plus up to a quarter more: a thousand launchers
            # told "32 s" by API Priority and Fairness must not all come back in the same second.
            wait = max(retry_after, 0.0) * (1.0 + self.rng.random() / 4)
            return float(min(wait, self.max_retry_after_seconds))
        ceiling = min(self.max_delay_seconds, self.initial_delay_seconds * 2 ** (attempt - 1))
        # Full jitter: uniform in [ceiling/2, ceiling], never zero so a storm still backs off.
        return float(ceiling / 2 + self.rng.random() * ceiling / 2)


def is_transient(error: BaseException) -> bool:
    """Whether retrying `error` may succeed."""
    if isinstance(error, ApiException):
        # status 0: the client could not even get a response (it wraps transport errors so).
        return error.status in RETRIABLE_STATUS or not error.status
    return isinstance(error, TRANSPORT_ERRORS)


def retry_after_seconds(error: BaseException) -> float | None:
    """The server's `Retry-After` (seconds form) on a 429/503, if any."""
    if not isinstance(error, ApiException) or not error.headers:
        return None
    value = error.headers.get("Retry-After")
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        return None  # the HTTP-date form; the backoff applies instead


class Retrier:
    """Runs API calls under a RetryPolicy and counts the attempts (benchmarks report them)."""

    def __init__(self, policy: RetryPolicy) -> None:
        self.policy = policy

    def call(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """`fn(*args, **kwargs)`, retried while transient; non-transient errors propagate unchanged."""
        attempt = 0
        throttled = 0.0
        while True:
            attempt += 1
            try:
                return fn(*args, **kwargs)
            except (ApiException, *TRANSPORT_ERRORS) as e:
                if not is_transient(e):
                    raise
                if isinstance(e, ApiException) and e.status == 429:
                    attempt -= 1
                    throttled += self.wait_throttled(what, throttled, e)
                    continue
                self.backoff(what, attempt, e)

    def wait_throttled(self, what: str, so_far: float, error: ApiException) -> float:
        """Sleep as a 429 asks (Retry-After, else the first backoff step); how long. BackendError
        once the call has been throttled for `max_throttled_seconds`."""
        delay = self.policy.delay(1, retry_after_seconds(error))
        if so_far + delay > self.policy.max_throttled_seconds:
            raise BackendError(
                f"{what}: the API server kept throttling this client (HTTP 429) for {so_far:.0f}s: "
                f"{api_message(error)}; it is overloaded, or this identity's share of API Priority and "
                "Fairness is too small for the launchers sharing it"
            ) from error
        logger.warning("%s throttled (HTTP 429); again in %.1fs", what, delay)
        self.policy.sleep(delay)
        return delay

    def backoff(self, what: str, attempt: int, error: BaseException) -> None:
        """Sleep before retry `attempt + 1`, or raise BackendError when the attempts are spent."""
        if attempt >= self.policy.attempts:
            detail = api_message(error) if isinstance(error, ApiException) else f"{type(error).__name__}: {error}"
            raise BackendError(
                f"{what}: the Kubernetes API kept failing ({attempt} attempts): {detail}; "
                "check the API server and the launcher's network, then retry"
            ) from error
        delay = self.policy.delay(attempt, retry_after_seconds(error))
        logger.warning("%s failed (%s); retry %d/%d in %.1fs", what, _short(error), attempt, self.policy.attempts - 1,
                       delay)  # fmt: skip
        self.policy.sleep(delay)


def _short(error: BaseException) -> str:
    if isinstance(error, ApiException):
        return f"HTTP {error.status} {error.reason or ''}".strip()
    return f"{type(error).__name__}: {error}"[:200]
