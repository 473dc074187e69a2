"""Readiness probes of the backend's host processes: does a URL answer, is a TCP port open."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request


def answers(url: str, *, ok_only: bool = False) -> bool:
    """Whether `url` answers at all (any HTTP status), or with 200 when `ok_only`."""
    try:
        with urllib.request.urlopen(url, timeout=3) as reply:
            return bool(reply.status == 200) or not ok_only
    except urllib.error.HTTPError:
        return not ok_only
    except (urllib.error.URLError, OSError):
        return False


def tcp_open(host: str, port: int) -> bool:
    """Whether something accepts TCP connections at host:port."""
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False
