"""The one-line phase records CI's log is read by (docs/testing.md: "CI's time, phase by phase")."""

from __future__ import annotations

import calendar
import re
import subprocess

from tests.conftest import REPO_ROOT
from tools.ci.e2e import phase_line

T0 = calendar.timegm((2026, 11, 27, 10, 20, 3, 0, 0, 0))


def test_a_phase_line_gives_its_utc_start_end_and_whole_seconds() -> None:
    assert phase_line("e2e-kfp", T0, end=T0 + 1634.4) == "phase e2e-kfp: start 10:20:03 end 10:47:17 1634 s"


def test_a_failed_phase_says_so_with_its_exit_status() -> None:
    assert (
        phase_line("e2e-others", T0, 2, end=T0 + 5) == "phase e2e-others: start 10:20:03 end 10:20:08 5 s FAILED exit 2"
    )


def test_the_shell_prints_the_same_form() -> None:
    script = f"source {REPO_ROOT}/.ci/phase.sh; phase_line lint $(( $(date +%s) - 3 )) 10:20:03 1"
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout.strip()
    assert re.fullmatch(r"phase lint: start 10:20:03 end \d\d:\d\d:\d\d [34] s FAILED exit 1", out), out
