"""tests/cpu_seconds.py, the opt-in plugin that lists each test phase's CPU-seconds (children included)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# A child process that burns at least 0.3 CPU-seconds of its own, by its own clock: whatever the
# load, the phase that reaped it used at least that much.
SAMPLE = """
import subprocess, sys

BURN = "import time\\nwhile time.process_time() < 0.3: pass"


def test_burns_in_a_child():
    subprocess.run([sys.executable, "-c", BURN], check=True)


def test_idle():
    pass
"""


def _pytest(tmp_path: Path, *args: str) -> str:
    (tmp_path / "test_sample.py").write_text(SAMPLE, encoding="utf-8")
    # Only the plugins named: a third of the CPU of a run with every installed one.
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--rootdir", str(tmp_path), *args,
         str(tmp_path / "test_sample.py")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_costliest_phases_are_listed_with_their_children_under_xdist(tmp_path: Path) -> None:
    out = _pytest(tmp_path, "-p", "xdist", "-p", "tests.cpu_seconds", "--cpu-seconds=2", "-n", "2")
    total = re.search(r"CPU-seconds by test phase \(children included\): ([\d.]+) in all", out)
    assert total and float(total.group(1)) >= 0.3, out
    listed = re.findall(r"^ *([\d.]+)s (\w+) +(\S+)$", out, re.M)
    assert len(listed) == 2, out
    spent, phase, nodeid = listed[0]
    assert (phase, nodeid.rsplit("::", 1)[-1]) == ("call", "test_burns_in_a_child"), out
    assert float(spent) >= 0.3, out
