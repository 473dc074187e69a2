"""Splitting a download source into its URLs, and checking it before anything is fetched (no numpy, no fetchers)."""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field

from kubetrain.data.errors import DataError
from kubetrain.urls import has_userinfo, redact_url

__all__ = ["Source", "as_source", "check_source", "describe_source", "parse_source"]

BUILTIN_PREFIX = "builtin:"
# The names accepted after `builtin:`, known here without loading them (kubetrain.data.builtin
# has a loader for each, and needs numpy, which checking a source must not).
BUILTIN_NAMES = ("digits",)
# Schemes the downloader fetches itself; any other goes through an fsspec store.
_FETCHED_DIRECTLY = ("", "file", "http", "https")


@dataclass(frozen=True)
class Source:
    """A download source parsed once: as given, and its URLs/paths, each checked before any request.

    `given` is one string split at commas and newlines, or a sequence of such strings. A URL with
    credentials in it (USER:PASSWORD@), or with a character no URL may hold, is refused on
    construction, as is a source with nothing in it.
    """

    given: str | tuple[str, ...]
    urls: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        items = [self.given] if isinstance(self.given, str) else self.given
        urls = [part.strip() for item in items for part in item.replace("\n", ",").split(",") if part.strip()]
        if not urls:
            raise DataError("source: got nothing; expected builtin:digits, a URL, a path, or a list of URLs")
        for url in urls:
            _refuse_unsafe_characters(url)
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
        object.__setattr__(self, "urls", tuple(urls))

    @property
    def label(self) -> str:
        """The source as `dataset.json`, the Dataset's metadata and messages show it: secrets redacted."""
        return describe_source(self.urls)


def as_source(source: str | Sequence[str] | Source) -> Source:
    """`source` parsed, unless it already is."""
    return source if isinstance(source, Source) else Source(source if isinstance(source, str) else tuple(source))


def parse_source(source: str | Sequence[str] | Source) -> list[str]:
    """The URLs/paths in `source` (see :class:`Source`, which refuses what no download could use)."""
    return list(as_source(source).urls)


def describe_source(urls: Sequence[str]) -> str:
    """The source as `dataset.json`, the Dataset's metadata and messages show it: secrets redacted."""
    return ", ".join(redact_url(url) for url in urls)


_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
_NAMED = {" ": "a space", "\t": "a tab", "\r": "a carriage return"}


def _refuse_unsafe_characters(url: str) -> None:
    """Refuse a URL holding a control character, or an http(s)/file URL holding a space.

    No request could carry one (urllib refuses them, and was retried as if the network had failed),
    and the error quoting the URL cut at the space, so its redaction missed what followed: a
    signature. An object-store URL (s3://, gs://) may hold a space, which is part of the key there.
    A plain path may hold anything its filesystem allows.
    """
    scheme = _SCHEME.match(url)
    if scheme is None:
        return
    spaces = " " if scheme.group(1).lower() in ("http", "https", "file") else ""
    bad = next((c for c in url if c in spaces or ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0), None)
    if bad is not None:
        what = _NAMED.get(bad, f"a control character ({ascii(bad)[1:-1]})")
        raise DataError(
            f"{redact_url(ascii(url)[1:-1])}: the URL has {what} in it; a URL cannot hold one: "
            "percent-encode it (a space is %20) or remove it"
        )


def _refuse_malformed(url: str) -> None:
    """Refuse what no URL parser reads (an IPv6 host with its bracket left open), before anything uses it."""
    try:
        urllib.parse.urlsplit(url)
    except ValueError as e:
        raise DataError(
            f"{redact_url(url)}: not a valid URL: {e}; fix the URL (an IPv6 host goes in brackets: "
            "http://[::1]:8080/data.npz)"
        ) from e


def check_source(
    source: str | Sequence[str] | Source, *, sha256: str = "", shards: int = 1, drivers: bool = True
) -> list[str]:
    """A download's inputs checked as far as they can be without reading or fetching anything; its URLs.

    `kubetrain run` (and `--dry-run`) checks a download step's inputs with this before any step
    starts, and the step itself before it opens the workspace, so both refuse the same inputs:
    shards, the checksums' form, a built-in name, and a scheme no fetcher knows (`htp://`) or, with
    `drivers`, whose store driver is not installed here. Whether the files exist is for the
    download to find out.
    """
    if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
        raise DataError(f"shards: got {shards!r}; expected an integer >= 1")
    parsed = as_source(source)
    urls, label = list(parsed.urls), parsed.label
    if sha256 or any("#sha256=" in url for url in urls):
        from kubetrain.data.fetch import normalize_sha256, split_checksum

        if sha256:
            normalize_sha256(sha256, label)
        for url in urls:
            split_checksum(url)
    for url in urls:
        if url.startswith(BUILTIN_PREFIX):
            if len(urls) > 1 or sha256:
                raise DataError(f"{label}: a built-in data set stands alone (no other sources, no sha256)")
            if url.removeprefix(BUILTIN_PREFIX) not in BUILTIN_NAMES:
                raise DataError(
                    f"{url}: unknown built-in data set; expected one of "
                    f"{', '.join(BUILTIN_PREFIX + name for name in BUILTIN_NAMES)}"
                )
        elif urllib.parse.urlsplit(url).scheme not in _FETCHED_DIRECTLY:
            from kubetrain.data.stores import check_store

            check_store(url, driver=drivers)
    return urls
