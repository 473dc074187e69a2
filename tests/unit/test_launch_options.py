"""`kubetrain launch`'s flags as the launcher's options (commands/launch.py)."""

from __future__ import annotations

import pytest

from kubetrain.cli import build_parser
from kubetrain.commands.launch import await_options
from kubetrain.errors import InvalidInputError
from kubetrain.launcher import AwaitOptions


def _options(*flags: str) -> AwaitOptions:
    return await_options(build_parser().parse_args(["launch", "-f", "job.yaml", *flags]))


def test_start_timeout_zero_means_no_limit_as_the_components_say() -> None:
    assert _options("--start-timeout", "0").start_timeout_seconds is None
    assert _options("--start-timeout", "30").start_timeout_seconds == 30
    assert _options().start_timeout_seconds is None


def test_a_negative_start_timeout_is_refused_before_anything_starts() -> None:
    with pytest.raises(InvalidInputError, match="start_timeout_seconds"):
        _options("--start-timeout", "-5")
