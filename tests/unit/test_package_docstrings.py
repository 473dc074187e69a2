"""Every package of kubetrain opens with a docstring that says what it holds.

`help(kubetrain.train)`, an editor's hover and the API reference show a package's docstring first;
a placeholder (the project's name) tells a reader nothing about what is inside.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import kubetrain

ROOT = Path(kubetrain.__file__).resolve().parent
PACKAGES = sorted(path.relative_to(ROOT).parent for path in ROOT.rglob("__init__.py"))
# A real docstring names more than the package: one sentence of what it holds, at the least.
MIN_WORDS = 5


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: str(p) if str(p) != "." else "kubetrain")
def test_a_package_docstring_says_what_the_package_holds(package: Path) -> None:
    init = ROOT / package / "__init__.py"
    docstring = ast.get_docstring(ast.parse(init.read_text(), filename=str(init))) or ""
    words = docstring.split()
    assert len(words) >= MIN_WORDS, f"{init}: docstring {docstring!r}; say what the package holds"
