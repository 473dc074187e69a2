"""Progress output and the retry policy's backoff."""

from __future__ import annotations

import io
import random

import pytest

from kubetrain.data.errors import DataError
from kubetrain.data.http import RetryPolicy
from kubetrain.data.progress import Progress, format_bytes


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_plain_lines_off_a_terminal() -> None:
    out = io.StringIO()
    progress = Progress("f.gz", 2_000_000, stream=out, line_interval=0.0)
    progress.update(1_000_000)
    progress.update(1_000_000)
    progress.note("HTTP 500; retry 1/5 in 0.5s")
    progress.close()
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("f.gz: 1.0 MB / 2.0 MB ( 50%)")
    assert lines[1].startswith("f.gz: 2.0 MB / 2.0 MB (100%)")
    assert lines[2] == "f.gz: HTTP 500; retry 1/5 in 0.5s"
    assert lines[3].endswith(" done")
    assert "\r" not in out.getvalue()


def test_bar_on_a_terminal_redraws_in_place() -> None:
    out = _Tty()
    progress = Progress("f.gz", 1000, stream=out)
    assert progress._interval < 1  # a terminal gets frequent redraws
    progress.update(500)
    progress.update(500)
    progress.close()
    text = out.getvalue()
    assert text.startswith("\r")
    assert "f.gz [" + "#" * 30 + "] 1.0 kB / 1.0 kB (100%)" in text
    assert "\x1b[K" in text  # clears leftovers of a longer earlier line
    assert text.endswith("\n")
    assert text.count("\n") == 1


def test_unknown_total_and_disabled() -> None:
    out = io.StringIO()
    Progress("x", None, stream=out, line_interval=0.0).close()
    assert out.getvalue().startswith("x: 0 B 0 B/s")
    quiet = io.StringIO()
    p = Progress("x", 10, stream=quiet, enabled=False, line_interval=0.0)
    p.update(5)
    p.note("hi")
    p.close()
    assert quiet.getvalue() == ""
    assert format_bytes(999) == "999 B"
    assert format_bytes(1_500_000_000) == "1.5 GB"


def test_backoff_grows_exponentially_with_bounded_jitter() -> None:
    policy = RetryPolicy(attempts=8, base_delay=1.0, max_delay=10.0)
    rng = random.Random(0)
    for failures, cap in ((1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (5, 10.0), (9, 10.0)):
        waits = [policy.delay(failures, rng) for _ in range(50)]
        assert all(cap / 2 <= w <= cap for w in waits)
        assert len(set(waits)) > 1  # jittered, not fixed
    # Retry-After wins when longer, but never beyond max_delay.
    assert policy.delay(1, rng, retry_after=5.0) == 5.0
    assert policy.delay(1, rng, retry_after=500.0) == 10.0


@pytest.mark.parametrize("kwargs", [{"attempts": 0}, {"base_delay": 5.0, "max_delay": 1.0}, {"timeout": 0.0}])
def test_policy_validates(kwargs: dict[str, float]) -> None:
    with pytest.raises(DataError):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]
