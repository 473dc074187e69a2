"""Credentials out of URLs before they are stored or printed.

A presigned URL carries its signature (and often a session token) in the query string, and a URL
may carry `user:password@` before the host. Either would otherwise end up in `dataset.json`, a
Dataset artifact's metadata (which the KFP UI and every later step can read), a log or an error
message. :func:`redact_url` keeps what identifies the file (scheme, host, path, and the values of
the few query parameters known to be harmless, such as ``X-Amz-Expires``) and replaces every other
query value and the userinfo; :func:`redact_text` does the same to every URL inside a message. This
is the one place that decides what counts as a secret.

:func:`redact_credentials` is for text kubetrain does not write itself but echoes: the body of an
error answer from an API server, a KFP endpoint or a proxy in front of them, which may repeat the
request's headers (``Authorization: Bearer ...``) or a configuration holding a token. It redacts the
known shapes of a credential there, besides every URL's secrets.

Why every unknown value goes: a secret's parameter may be called anything (``jwt``, ``code``,
``hdnts``, ``hash``, ``pw``, a signed URL nested in ``url=``), so a list of secret names always
misses one, while the harmless parameters worth showing are few and known. The full URL is used
only where it is needed, never shown: to fetch, and to key the download cache.
"""

from __future__ import annotations

import re
import urllib.parse
from typing import Any

__all__ = [
    "REDACTED",
    "has_userinfo",
    "is_harmless_parameter",
    "redact_credentials",
    "redact_text",
    "redact_url",
    "redact_values",
]

REDACTED = "REDACTED"

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
# Query (and fragment) parameters whose values identify the file or say how long a signature
# holds, and are never secret (lower-cased): AWS SigV4/SigV2 and Google Cloud Storage signed URLs,
# an Azure SAS's version/start/expiry/resource/permissions/protocol, object versions, and
# kubetrain's own `#sha256=`. Every other parameter's value is redacted.
_HARMLESS_PARAMETERS = frozenset(
    {
        "x-amz-algorithm",
        "x-amz-date",
        "x-amz-expires",
        "x-amz-signedheaders",
        "expires",
        "x-goog-algorithm",
        "x-goog-date",
        "x-goog-expires",
        "x-goog-signedheaders",
        "sv",
        "st",
        "se",
        "sr",
        "sp",
        "spr",
        "ss",
        "srt",
        "version",
        "versionid",
        "generation",
        "alt",
        "sha256",
    }
)

# A URL inside free text: a scheme, "://", then anything up to whitespace or a quote/bracket. One
# slash too: a URL taken for a path comes back from pathlib and OSError as `https:/host/...`.
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://?[^\s'\"<>()\[\]{}]+")

# A field holding a credential, as a header (`Authorization: Bearer X`), YAML (`token: X`), JSON
# (`"password": "X"`), a query or form (`api_key=X`), a Go header map (`Authorization:[Bearer X]`)
# or a Python repr: its name, the separator, an optional auth scheme, and the value that goes.
# A name with a dot in it or before it is a field path in an API server's validation message
# (`...secretKeyRef.name: Required value`, `spec.token: Invalid value`): not a credential, and kept.
_CREDENTIAL_FIELD = re.compile(
    r"(?P<keep>(?<![A-Za-z0-9.])[\w-]*(?:authorization|token|secret|passw(?:or)?d|pwd|api[_-]?key|"
    r"access[_-]?key|private[_-]?key|key-data|credential|signature)[\w-]*"
    r"[\"']?\s*[:=]\s*\[?\s*[\"']?\s*(?:(?:bearer|basic|digest|negotiate|token|aws4-hmac-sha256)\s+)?)"
    r"[^\s\"',;&<>\[\]{}]+",
    re.IGNORECASE,
)
# A cookie header holds several `name=value;` pairs, any of them a session: all of it goes, to the
# end of its line (in a body joined into one line, to the end of the text).
_COOKIE = re.compile(r"(?P<keep>(?<![A-Za-z0-9])(?:set-)?cookie[\"']?\s*[:=]\s*\[?\s*[\"']?)[^\r\n\"'\]]+", re.I)
# A credential on its own: an auth scheme's value, a JWT (a Kubernetes service-account token), an
# AWS access key id, a PEM private key (a kubeconfig's client key), however cut short.
_BARE_CREDENTIALS = (
    # A digit or punctuation in it: "Basic authentication required" is prose, not a credential.
    re.compile(r"(?P<keep>\b(?:bearer|basic)\s+)(?=[A-Za-z]*[0-9._~+/=-])[A-Za-z0-9._~+/=-]{8,}", re.IGNORECASE),
    re.compile(r"(?P<keep>)\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.?[A-Za-z0-9_-]*"),
    re.compile(r"(?P<keep>)\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"),
    re.compile(
        r"(?P<keep>-----BEGIN [A-Z ]*PRIVATE KEY-----)[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)",
    ),
)


def is_harmless_parameter(name: str) -> bool:
    """Whether a query parameter called `name` may be shown with its value (it identifies, never grants)."""
    return urllib.parse.unquote_plus(name).lower() in _HARMLESS_PARAMETERS


def _redact_pairs(text: str) -> str:
    """`a=1&version=2` -> `a=REDACTED&version=2`: only a harmless parameter keeps its value.

    An item without `=` is a value with no name (`?TOKEN`): redacted too unless it is a harmless name.
    """
    pairs = []
    for pair in text.split("&"):
        name, sep, _value = pair.partition("=")
        if not pair or is_harmless_parameter(name):
            pairs.append(pair)
        else:
            pairs.append(f"{name}={REDACTED}" if sep else REDACTED)
    return "&".join(pairs)


def has_userinfo(url: str) -> bool:
    """Whether `url` has `user[:password]@` before its host."""
    try:
        return "@" in urllib.parse.urlsplit(url).netloc
    except ValueError:
        return False


def redact_url(url: str) -> str:
    """`url` with its userinfo and every query (and fragment) value but a harmless parameter's replaced.

    A plain path, or a URL with no userinfo and no query or fragment values but harmless ones, comes
    back unchanged.
    """
    scheme = _SCHEME.match(url)
    if scheme is None:
        return url  # a plain path: a `?` or `#` in it is part of a file's name, not a query
    # Cut by hand, not urlsplit/urlunsplit: those re-spell what they do not change (`https:/h`
    # comes back `https:///h`) and fail on some malformed URLs that still hold a secret.
    rest, hash_mark, fragment = url.partition("#")
    base, question_mark, query = rest.partition("?")
    start = scheme.end()
    if base.startswith("//", start):
        authority_end = base.find("/", start + 2)
        authority = base[start + 2 :] if authority_end < 0 else base[start + 2 : authority_end]
        if "@" in authority:
            base = f"{base[: start + 2]}{REDACTED}@{authority.rpartition('@')[2]}{base[start + 2 + len(authority) :]}"
    # A fragment without `=` is a page's anchor or an app's route (KFP's `#/runs/details/ID`); one
    # with pairs (`#access_token=...`, OAuth's implicit flow) is redacted like a query.
    shown_fragment = _redact_pairs(fragment) if "=" in fragment else fragment
    return f"{base}{question_mark}{_redact_pairs(query)}{hash_mark}{shown_fragment}"


def redact_text(text: str) -> str:
    """`text` with every URL in it redacted (:func:`redact_url`)."""

    def one(match: re.Match[str]) -> str:
        # Punctuation that ends a sentence ("URL: HTTP 404") is the message's, not the URL's.
        url = match.group(0).rstrip(".,;:!?")
        return redact_url(url) + match.group(0)[len(url) :]

    return _URL_IN_TEXT.sub(one, text)


def redact_values(value: Any) -> Any:
    """`value` (a string, or lists and dicts of them: run arguments, output parameters), its URLs redacted."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {key: redact_values(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(redact_values(item) for item in value)
    return value


def redact_credentials(text: str) -> str:
    """`text` from elsewhere (an error body) with its URLs' secrets and the known credential shapes redacted.

    What goes: the value of a field named like a credential (``Authorization``, ``Cookie``,
    ``token``, ``password``, ``api_key``, ``client-key-data``, ...) however it is written, a
    ``Bearer``/``Basic`` value, a JWT, an AWS access key id and a PEM private key. It errs towards
    redacting: a body is echoed to say what went wrong, not to be parsed.
    """

    def keep_name(match: re.Match[str]) -> str:
        return f"{match.group('keep')}{REDACTED}"

    text = redact_text(text)
    text = _COOKIE.sub(keep_name, text)
    text = _CREDENTIAL_FIELD.sub(keep_name, text)
    for pattern in _BARE_CREDENTIALS:
        text = pattern.sub(keep_name, text)
    return text
