"""Kubernetes name rules: the whole value must match, as the API server's Go regexes do."""

from __future__ import annotations

import pytest

from kubetrain.names import (
    is_dns1035_label,
    is_dns1123_label,
    is_dns1123_subdomain,
    is_env_name,
    is_label_key,
    is_label_value,
    is_quantity,
)

CHECKS = [
    (is_dns1035_label, "train-1"),
    (is_dns1123_label, "1-train"),
    (is_dns1123_subdomain, "a.b-c"),
    (is_label_value, "v1.0"),
    (is_label_key, "kueue.x-k8s.io/queue-name"),
    (is_env_name, "MASTER_ADDR"),
    (is_quantity, "500Mi"),
]


@pytest.mark.parametrize(("check", "good"), CHECKS, ids=lambda x: getattr(x, "__name__", str(x)))
def test_a_trailing_newline_is_not_part_of_a_valid_value(check: object, good: str) -> None:
    # Python's `$` also matches before a final newline; the API server's anchors do not.
    assert callable(check)
    assert check(good)
    assert not check(good + "\n")
