"""Splitting a download source into its URLs: light enough for a step that only checks its cache."""

from __future__ import annotations

import urllib.parse
from collections.abc import Sequence

from kubetrain.data.errors import DataError
from kubetrain.urls import has_userinfo, redact_url

__all__ = ["describe_source", "parse_source"]


def parse_source(source: str | Sequence[str]) -> list[str]:
    """The URLs/paths in `source`: a sequence, or one string split at commas and newlines.

    A URL with credentials in it (USER:PASSWORD@) is refused before any request.
    """
    items = [source] if isinstance(source, str) else list(source)
    urls = [part.strip() for item in items for part in item.replace("\n", ",").split(",") if part.strip()]
    if not urls:
        raise DataError("source: got nothing; expected builtin:digits, a URL, a path, or a list of URLs")
    for url in urls:
        _refuse_malformed(url)
    for url in urls:
        if urllib.parse.urlsplit(url).scheme not in ("", "file") and has_userinfo(url):
            # The password would otherwise be sent in the clear to whatever host the URL names, and
            # kept in dataset.json and the artifact's metadata.
            raise DataError(
                f"{redact_url(url)}: credentials in the URL (USER:PASSWORD@) are refused; use a presigned "
                "URL (its signature is kept out of logs and metadata), an s3:// or gs:// URL with the "
                "store's credentials in the environment (AWS_ACCESS_KEY_ID, GOOGLE_APPLICATION_CREDENTIALS), "
                "or download the file yourself and give its path"
            )
    return urls


def describe_source(urls: Sequence[str]) -> str:
    """The source as `dataset.json`, the Dataset's metadata and messages show it: secrets redacted."""
    return ", ".join(redact_url(url) for url in urls)


def _refuse_malformed(url: str) -> None:
    """Refuse what no URL parser reads (an IPv6 host with its bracket left open), before anything uses it."""
    try:
        urllib.parse.urlsplit(url)
    except ValueError as e:
        raise DataError(
            f"{redact_url(url)}: not a valid URL: {e}; fix the URL (an IPv6 host goes in brackets: "
            "http://[::1]:8080/data.npz)"
        ) from e
