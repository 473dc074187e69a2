"""Splitting a download source into its URLs: light enough for a step that only checks its cache."""

from __future__ import annotations

from collections.abc import Sequence

from kubetrain.data.errors import DataError

__all__ = ["parse_source"]


def parse_source(source: str | Sequence[str]) -> list[str]:
    """The URLs/paths in `source`: a sequence, or one string split at commas and newlines."""
    items = [source] if isinstance(source, str) else list(source)
    urls = [part.strip() for item in items for part in item.replace("\n", ",").split(",") if part.strip()]
    if not urls:
        raise DataError("source: got nothing; expected builtin:digits, a URL, a path, or a list of URLs")
    return urls
