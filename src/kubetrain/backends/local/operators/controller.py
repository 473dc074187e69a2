"""The controller side of the local backend: what every local "operator" has in common."""

from __future__ import annotations

import abc
import secrets
import string
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubetrain.backends.local.addresses import AddressBlock
from kubetrain.backends.local.conditions import Status, rfc3339
from kubetrain.backends.local.pod import LocalPod
from kubetrain.backends.local.podspec import PodContext

_SUFFIX_ALPHABET = string.ascii_lowercase + string.digits


def random_suffix(length: int = 5) -> str:
    """A pod-name suffix as the Job controller generates it."""
    return "".join(secrets.choice(_SUFFIX_ALPHABET) for _ in range(length))


def backoff_delay(base_seconds: float, failures: int) -> float:
    """Delay before the n-th restart: the kubelet's doubling back-off, scaled by `base_seconds`."""
    if failures <= 0:
        return 0.0
    return float(min(base_seconds * 2 ** (failures - 1), base_seconds * 16))


@dataclass(frozen=True)
class JobContext:
    """What the backend hands a controller."""

    name: str
    namespace: str
    uid: str
    pods: PodContext
    block: AddressBlock
    restart_backoff_seconds: float


def get_int(mapping: Mapping[str, Any], key: str, default: int | None) -> int | None:
    """An integer field, or `default` when absent."""
    value = mapping.get(key)
    return default if value is None else int(value)


class Controller(abc.ABC):
    """Reconciles one job: starts, restarts and stops its pods, and writes its `status`."""

    def __init__(self, obj: dict[str, Any], ctx: JobContext) -> None:
        self.obj = obj  # the live object: suspend/resume toggles its spec
        self.ctx = ctx
        self.status: Status = {}
        self._finished = False

    @property
    def name(self) -> str:
        """The job's name."""
        return self.ctx.name

    @property
    def finished(self) -> bool:
        """Succeeded or Failed: nothing more will run."""
        return self._finished

    @abc.abstractmethod
    def reconcile(self, now: float) -> None:
        """One pass: observe the processes, apply the kind's policies, update `status`."""

    @abc.abstractmethod
    def pods(self) -> list[LocalPod]:
        """Every pod the job has now (running or finished), in a stable order."""

    @abc.abstractmethod
    def hosts(self) -> dict[str, str]:
        """Host name (as the manifest writes it, without the cluster domain) → loopback address."""

    def extra_pod_infos(self) -> list[Any]:
        """PodInfo of pods that have no process here (MPI workers)."""
        return []

    @abc.abstractmethod
    def shutdown(self, message: str) -> None:
        """Stop every running pod (job deleted or the backend closing)."""

    def is_suspended(self) -> bool:
        """Whether the job's spec asks for suspension."""
        spec = self.obj.get("spec") or {}
        run_policy = spec.get("runPolicy") or {}
        return bool(run_policy.get("suspend", spec.get("suspend", False)))

    def stop_pods(self, pods: list[LocalPod], *, phase: str, reason: str, message: str) -> None:
        """Stop the running ones among `pods`."""
        for pod in pods:
            if pod.phase in ("Running", "Pending") or pod.restart_at is not None:
                pod.stop(phase=phase, reason=reason, message=message)

    def event(self, etype: str, reason: str, message: str) -> None:
        """An event about the job object."""
        self.ctx.pods.event(etype, reason, message, f"{self.ctx.pods.kind}/{self.name}")

    @staticmethod
    def now_text(now: float) -> str:
        """RFC 3339 of a Unix time."""
        return rfc3339(now)
