"""Who the backend's host processes are to Kubernetes: service-account identities and kubetrain's reaper.

The servers that run in pods in a real install run here as host processes, each with a client
certificate naming its service account, so the RBAC of the upstream manifests (and of deploy/)
is what the real authorizer checks.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Protocol

import yaml

from tools.cluster import operators, processes
from tools.cluster.kfp.manifests import NAMESPACE

REPO_ROOT = Path(__file__).resolve().parents[3]
# How often the reaper sweeps: a terminated run's job is gone within about this (tests bound it).
REAPER_INTERVAL_SECONDS = 2


class Control(Protocol):
    """What the backend needs of the control plane (tools.cluster.controlplane.Cluster)."""

    @property
    def bin_dir(self) -> Path: ...

    def kubectl(self, *args: str, as_launcher: bool = False, stdin: str | None = None) -> str: ...

    def kwokctl(self, *args: str) -> str: ...


def service_account_kubeconfig(cluster: Control, run: Path, account: str, namespace: str = NAMESPACE) -> Path:
    """A kubeconfig whose client certificate names the service account (its RBAC applies as is)."""
    path = run / (f"{account}.kubeconfig" if namespace == NAMESPACE else f"{account}-{namespace}.kubeconfig")
    path.write_text(cluster.kwokctl("get", "kubeconfig", "--user", f"system:serviceaccount:{namespace}:{account}",
                                    "--group", "system:serviceaccounts",
                                    "--group", f"system:serviceaccounts:{namespace}"))  # fmt: skip
    return path


def reaper_identity(namespace: str = NAMESPACE) -> str:
    """deploy/reaper.yaml without its Deployment, in `namespace`: the reaper runs as a host process
    here (below), as its ServiceAccount, so the Role the file grants is what the real authorizer checks."""
    docs = [d for d in yaml.safe_load_all((REPO_ROOT / "deploy" / "reaper.yaml").read_text()) if d]
    kept = [d for d in docs if d["kind"] != "Deployment"]
    for doc in kept:
        doc.setdefault("metadata", {})["namespace"] = namespace
    return yaml.safe_dump_all(kept)


def start_reaper(cluster: Control, run: Path, namespace: str = NAMESPACE) -> None:
    """`python -m kubetrain.reaper` for `namespace`, as its `kubetrain-reaper` ServiceAccount (one per
    namespace, as deploy/reaper.yaml deploys it): it deletes the job of every terminated run's step
    (tests/cluster/test_kfp_backend.py)."""
    kubeconfig = service_account_kubeconfig(cluster, run, "kubetrain-reaper", namespace)
    log = run / ("reaper.log" if namespace == NAMESPACE else f"reaper-{namespace}.log")
    argv = [sys.executable, "-m", "kubetrain.reaper", "--kubeconfig", str(kubeconfig), "--namespace", namespace,
            "--interval", str(REAPER_INTERVAL_SECONDS)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT / "src"),
                                                                     os.environ.get("PYTHONPATH")]))}  # fmt: skip
    name = "kubetrain-reaper" if namespace == NAMESPACE else f"kubetrain-reaper-{namespace}"
    record = processes.start(run, name, argv, env=env, log=log, cwd=REPO_ROOT)

    def sweeping() -> bool:
        if not processes.running(record):
            raise processes.ProcessError(f"the reaper exited; its log ({log}):\n{log.read_text()[-3000:]}")
        text = log.read_text() if log.exists() else ""
        if "sweep failed" in text:  # a 403 here: the Role is not enough for the real authorizer
            raise processes.ProcessError(f"the reaper cannot sweep {namespace}; its log ({log}):\n{text[-3000:]}")
        return "first sweep done" in text

    operators.wait_for("kubetrain's reaper", sweeping, 60, log)
