"""The one-line phase records CI's log is read by (docs/testing.md: "CI's time, phase by phase")."""

from __future__ import annotations

import calendar
import os
import re
import subprocess
from pathlib import Path

from tests.conftest import REPO_ROOT
from tools.ci.e2e import busy_cores, cpu_jiffies, phase_line

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


def test_cpu_ticks_count_idle_and_iowait_as_idle_and_steal_as_busy(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    # user nice system idle iowait irq softirq steal guest guest_nice
    stat.write_text("cpu  100 5 20 300 40 1 2 7 50 0\ncpu0 50 2 10 150 20 0 1 3 25 0\n")
    assert cpu_jiffies(stat) == (135, 475)


def test_a_phase_line_with_cpu_readings_says_how_many_cores_the_machine_kept_busy() -> None:
    # 300 of 400 ticks busy: three quarters of the machine's cores.
    cores = os.cpu_count() or 1
    line = phase_line("e2e-kfp", T0, end=T0 + 60, cpu=((1000, 2000), (1300, 2400)))
    assert line == f"phase e2e-kfp: start 10:20:03 end 10:21:03 60 s, cpu {0.75 * cores:.2f} of {cores}"
    assert busy_cores((1000, 2000), (1300, 2400), 2) == 1.5
    assert busy_cores((1000, 2000), (1000, 2000), 2) == 0.0  # no tick between the readings


def test_the_shell_adds_the_same_cpu_figure_when_given_the_start_ticks() -> None:
    script = f'source {REPO_ROOT}/.ci/phase.sh; c=$(cpu_jiffies); phase_line lint $(date +%s) 10:20:03 0 "$c"'
    # OMP_NUM_THREADS=1 as `kubetrain run` sets it for its steps: plain nproc said "of 1" then.
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True, env=env).stdout.strip()
    assert re.fullmatch(
        rf"phase lint: start 10:20:03 end \d\d:\d\d:\d\d [01] s, cpu \d+\.\d\d of {os.cpu_count()}", out
    ), out
