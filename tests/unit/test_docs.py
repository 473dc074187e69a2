"""docs/ stays reference a reader can find and read (issue 46).

Every page under docs/ is listed in its index, docs/README.md, and none but the history pages
(docs/history/: dated runs kept as they were written) is over 25 KB: a page that grows past that
has run logs to move to its history file, or is two pages.
"""

from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"
INDEX = DOCS / "README.md"
PAGE_LIMIT = 25_000  # bytes
HISTORY = DOCS / "history"
# Pages written by a generator rather than by hand, exempt from the limit: none under docs/ now
# (the components' generated READMEs live in components/hub/). Name one here, relative to docs/.
GENERATED: frozenset[str] = frozenset()


def _pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def test_no_page_under_docs_is_over_25_kb_but_history_and_generated_ones() -> None:
    over = [
        f"{page.relative_to(DOCS)}: {page.stat().st_size:,} bytes"
        for page in _pages()
        if not page.is_relative_to(HISTORY)
        and page.relative_to(DOCS).as_posix() not in GENERATED
        and page.stat().st_size > PAGE_LIMIT
    ]
    assert not over, f"over {PAGE_LIMIT:,} bytes (move dated runs to docs/history/, or split the page): {over}"


def test_every_page_under_docs_is_linked_from_the_index() -> None:
    links = re.findall(r"\]\(([^)\s#]+)(?:#[^)\s]*)?\)", INDEX.read_text(encoding="utf-8"))
    linked = {(INDEX.parent / link).resolve() for link in links if not link.startswith(("http://", "https://"))}
    missing = [page.relative_to(DOCS).as_posix() for page in _pages() if page != INDEX and page.resolve() not in linked]
    assert not missing, f"docs/README.md does not link {missing}"
