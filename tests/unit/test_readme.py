"""The README stays what a user reads in ten minutes, and its links and the docs' links resolve (issue 34)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
README_LIMIT = 20_000  # bytes: about ten minutes of reading


def _anchors(text: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to dashes."""
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in re.findall(r"^#+ (.*)$", text, re.M)}


def test_the_readme_is_short_and_leaves_operator_internals_to_docs() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.encode()) < README_LIMIT
    assert "tests/" not in text, "test file names as evidence belong in docs/"
    assert "1,000 concurrent launchers" not in text


def test_every_relative_link_of_the_readme_and_docs_resolves() -> None:
    broken = []
    for page in [README, *sorted((ROOT / "docs").rglob("*.md"))]:
        for link in re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
            if link.startswith(("http://", "https://", "mailto:")):
                continue
            path, _, anchor = link.partition("#")
            target = (page.parent / path).resolve() if path else page
            if not target.exists():
                broken.append(f"{page.name}: {link} (no such file)")
            elif anchor and target.suffix == ".md" and anchor not in _anchors(target.read_text(encoding="utf-8")):
                broken.append(f"{page.name}: {link} (no such heading)")
    assert not broken, broken
