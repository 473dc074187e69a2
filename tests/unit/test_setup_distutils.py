"""`import chainer` in the venv needs no SETUPTOOLS_USE_DISTUTILS=stdlib from the user (issue 34).

`make setup` writes a .pth into the venv that sets it at interpreter start, before setuptools'
`distutils-precedence.pth` (.pth files run in name order) decides whether to serve its own
distutils, which lacks what Chainer's `import numpy.distutils` needs.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

MAKEFILE = Path(__file__).resolve().parents[2] / "Makefile"
PTH_LINE = re.compile(r"""^\techo "(?P<code>[^"]+)" > .*/(?P<name>[^/"]+\.pth)"$""", re.M)


def _setup_pth() -> tuple[str, str]:
    found = PTH_LINE.search(MAKEFILE.read_text(encoding="utf-8"))
    assert found is not None, "make setup writes no .pth into the venv"
    return found.group("name"), found.group("code")


def test_the_pth_runs_before_setuptools_distutils_hook() -> None:
    name, code = _setup_pth()
    assert name < "distutils-precedence.pth"
    assert "SETUPTOOLS_USE_DISTUTILS" in code and "stdlib" in code


def test_with_the_pth_a_plain_import_chainer_works() -> None:
    if importlib.util.find_spec("chainer") is None:  # found, not imported: importing it here is what fails
        pytest.skip("chainer is not installed")
    _, code = _setup_pth()
    env = {k: v for k, v in os.environ.items() if k != "SETUPTOOLS_USE_DISTUTILS"}
    # -S, then the site-packages' .pth files in order with ours first: what the interpreter does at start.
    start = "import site; site.main(); import chainer"
    with_pth = subprocess.run(
        [sys.executable, "-S", "-c", f"{code}; {start}"], env=env, capture_output=True, text=True, check=False
    )
    assert with_pth.returncode == 0, with_pth.stderr[-2000:]


SETUP_CHECK = re.compile(r"""^\tSETUPTOOLS_USE_DISTUTILS=stdlib \$\(PY\) -c "(?P<code>[^"]+)"$""", re.M)


def test_make_setups_import_check_prints_nothing() -> None:
    """Issue 49.17: `make setup` ended with Chainer's pkg_resources warning, which reads like a fault."""
    if importlib.util.find_spec("chainer") is None:
        pytest.skip("chainer is not installed")
    found = SETUP_CHECK.search(MAKEFILE.read_text(encoding="utf-8"))
    assert found is not None, "make setup no longer checks its imports"
    env = {**os.environ, "SETUPTOOLS_USE_DISTUTILS": "stdlib"}
    done = subprocess.run([sys.executable, "-c", found.group("code")], env=env, capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr == "", done.stderr[-2000:]
