"""Kubernetes name, label and quantity rules, and the run-time derivation of job names.

Pure functions without dependencies: specs, manifests and backends all use them.
"""

from __future__ import annotations

import hashlib
import re

DNS1035_MAX = 63
_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?\Z")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?\Z")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]\Z")
# Kubernetes accepts any C_IDENTIFIER-ish printable name since 1.30, but the operators and shells
# in the images expect portable names; keep to the conservative form.
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*\Z")
# resource.Quantity: sign, digits with optional fraction, then a binary/decimal suffix or exponent.
_QUANTITY = re.compile(r"^[+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E|[eE][-+]?[0-9]+)?\Z")

# Labels tying every pod to the KFP run and task that launched it (also used to adopt on 409).
LABEL_RUN_ID = "kubetrain.io/kfp-run-id"
LABEL_TASK_ID = "kubetrain.io/kfp-task-id"
LABEL_COMPONENT = "kubetrain.io/component"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "kubetrain"


def is_dns1035_label(name: str) -> bool:
    """True when `name` is a DNS-1035 label (lower-case alphanumerics and '-', starts with a letter)."""
    return len(name) <= DNS1035_MAX and bool(_DNS1035.match(name))


def is_dns1123_label(name: str) -> bool:
    """True when `name` is a DNS-1123 label (the rule for namespace names)."""
    return len(name) <= 63 and bool(_DNS1123_LABEL.match(name))


def is_dns1123_subdomain(name: str) -> bool:
    """True when `name` is a DNS-1123 subdomain (the rule for most object names)."""
    return len(name) <= 253 and bool(_DNS1123_SUBDOMAIN.match(name))


def is_label_value(value: str) -> bool:
    """True when `value` may be used as a label value (≤63 chars, alphanumeric ends)."""
    return len(value) <= 63 and bool(_LABEL_VALUE.match(value))


def is_label_key(key: str) -> bool:
    """True when `key` is a qualified label/annotation key (optional DNS prefix, then a name)."""
    prefix, _, name = key.rpartition("/")
    if prefix and not is_dns1123_subdomain(prefix):
        return False
    return 0 < len(name) <= 63 and bool(_LABEL_NAME.match(name))


def is_env_name(name: str) -> bool:
    """True when `name` is a valid container environment variable name."""
    return bool(_ENV_NAME.match(name))


def is_quantity(value: str) -> bool:
    """True when `value` parses as a Kubernetes resource quantity (e.g. "500m", "2Gi", "1e3")."""
    return bool(_QUANTITY.match(value))


def sanitize_label_value(value: str) -> str:
    """Turn an arbitrary id into a valid label value, keeping it recognisable.

    Values that are too long or contain other characters are shortened and suffixed with a hash, so
    two different ids never map to the same label value by truncation alone.
    """
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", "-", value).strip("-_.")
    if cleaned == value and is_label_value(value):
        return value
    digest = hashlib.sha256(value.encode()).hexdigest()[:10]
    head = cleaned[: 63 - len(digest) - 1].strip("-_.")
    return f"{head}-{digest}" if head else digest


def derive_job_name(*, prefix: str, run_id: str, task_id: str, max_length: int, task_name: str = "") -> str:
    """The job name for one KFP task: stable across retries of that task, unique across runs and tasks.

    The name is derived at run time from the run id, the task id and the task's name (never at
    compile time), so a retried task re-attaches to its job instead of launching a second one. The
    task name matters on the KFP backend: its driver resolves ``{{$.pipeline_task_uuid}}`` to the
    enclosing DAG's execution id, which every task of that DAG shares, while
    ``{{$.pipeline_task_name}}`` tells them apart. It is a DNS-1035 label no longer than
    `max_length`, which callers set so every name the operator derives from it
    (``<job>-worker-<i>``, JobSet pod host names, ...) still fits.
    """
    identity = f"{run_id}\x00{task_id}" + (f"\x00{task_name}" if task_name else "")
    digest = hashlib.sha256(identity.encode()).hexdigest()[:12]
    clean_prefix = re.sub(r"[^a-z0-9-]", "-", prefix.lower()).strip("-") or "job"
    if not clean_prefix[0].isalpha():
        clean_prefix = f"j{clean_prefix}"
    room = max_length - len(digest) - 1
    if room < 1:
        raise ValueError(f"max_length {max_length} leaves no room for a name prefix")
    name = f"{clean_prefix[:room].rstrip('-')}-{digest}"
    if not is_dns1035_label(name):  # pragma: no cover - construction above guarantees it
        raise AssertionError(f"derived name {name!r} is not DNS-1035")
    return name
