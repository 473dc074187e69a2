"""Every step ends its log with one parseable line of its process's CPU and wall time."""

from __future__ import annotations

import pytest

from kubetrain.errors import InvalidInputError
from kubetrain.kfp_runtime.exits import step
from kubetrain.kfp_runtime.usage import USAGE_PREFIX, parse_usage_line


def _busy() -> int:
    return sum(i * i for i in range(200_000))


def test_a_step_ends_with_its_cpu_and_wall_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert step(_busy)() > 0
    err = capsys.readouterr().err
    assert err.splitlines()[-1].startswith(USAGE_PREFIX)
    usage = parse_usage_line(err)
    assert usage is not None
    assert usage.cpu_seconds > 0  # this test process has run Python for a while
    assert usage.wall_seconds >= 0


def test_a_failing_step_still_reports_its_usage(capsys: pytest.CaptureFixture[str]) -> None:
    def fails() -> None:
        raise InvalidInputError("epochs: got 0; expected >= 1")

    with pytest.raises(SystemExit) as exited:
        step(fails)()
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "InvalidInputError" in err
    assert parse_usage_line(err) is not None


def test_parse_reads_the_last_line_and_rejects_other_text() -> None:
    log = (
        "pytorch: job pytorch-abc on the kubernetes backend\n"
        "launcher: cpu 0.50 s user+sys, wall 3.0 s\n"
        "launcher: cpu 1.25 s user+sys, wall 12.3 s\n"
        "launcher: cpu lots\n"
    )
    usage = parse_usage_line(log)
    assert usage is not None
    assert (usage.cpu_seconds, usage.wall_seconds) == (1.25, 12.3)
    assert parse_usage_line("no such line here") is None
