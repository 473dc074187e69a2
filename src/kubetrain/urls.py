"""Credentials out of URLs before they are stored or printed.

A presigned URL carries its signature (and often a session token) in the query string, and a URL
may carry `user:password@` before the host. Either would otherwise end up in `dataset.json`, a
Dataset artifact's metadata (which the KFP UI and every later step can read), a log or an error
message. :func:`redact_url` keeps what identifies the file (scheme, host, path, harmless
parameters such as ``X-Amz-Expires``) and replaces the secrets; :func:`redact_text` does the same
to every URL inside a message. This is the one place that decides what counts as a secret.
"""

from __future__ import annotations

import re
import urllib.parse

__all__ = ["REDACTED", "has_userinfo", "is_secret_parameter", "redact_text", "redact_url"]

REDACTED = "REDACTED"

# A query parameter whose (lower-cased) name contains one of these holds a secret or part of one:
# X-Amz-Signature, X-Amz-Credential, X-Amz-Security-Token, X-Goog-Signature, sig (Azure SAS),
# signature, token, access_token, key, AWSAccessKeyId, api_key, client_secret, password, ...
# Matching by part of the name errs towards redacting a harmless parameter (SignedHeaders) rather
# than printing a secret under a spelling nobody listed.
_SECRET_NAME_PARTS = ("sig", "token", "secret", "passw", "pwd", "credential", "key", "auth", "session")

# A URL inside free text: a scheme, "://", then anything up to whitespace or a quote/bracket.
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>()\[\]{}]+")


def is_secret_parameter(name: str) -> bool:
    """Whether a query parameter called `name` holds a secret (a signature, token, key, ...)."""
    lowered = urllib.parse.unquote_plus(name).lower()
    return any(part in lowered for part in _SECRET_NAME_PARTS)


def _redact_pairs(text: str) -> str:
    """`a=1&sig=xyz` -> `a=1&sig=REDACTED`: each pair kept verbatim unless its name is a secret's."""
    pairs = []
    for pair in text.split("&"):
        name, sep, _value = pair.partition("=")
        pairs.append(f"{name}={REDACTED}" if sep and is_secret_parameter(name) else pair)
    return "&".join(pairs)


def has_userinfo(url: str) -> bool:
    """Whether `url` has `user[:password]@` before its host."""
    try:
        return "@" in urllib.parse.urlsplit(url).netloc
    except ValueError:
        return False


def redact_url(url: str) -> str:
    """`url` with its userinfo and the values of secret query (and fragment) parameters replaced.

    A plain path or a URL with nothing secret comes back unchanged.
    """
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        # Not parseable as a URL (a bad IPv6 literal): keep nothing after the scheme and host part.
        scheme, sep, _rest = url.partition("://")
        return f"{scheme}{sep}{REDACTED}" if sep else REDACTED
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{REDACTED}@{netloc.rpartition('@')[2]}"
    fragment = _redact_pairs(parts.fragment) if "=" in parts.fragment else parts.fragment
    redacted = parts._replace(netloc=netloc, query=_redact_pairs(parts.query), fragment=fragment)
    return urllib.parse.urlunsplit(redacted) if redacted != parts else url


def redact_text(text: str) -> str:
    """`text` with every URL in it redacted (:func:`redact_url`)."""

    def one(match: re.Match[str]) -> str:
        # Punctuation that ends a sentence ("URL: HTTP 404") is the message's, not the URL's.
        url = match.group(0).rstrip(".,;:!?")
        return redact_url(url) + match.group(0)[len(url) :]

    return _URL_IN_TEXT.sub(one, text)
