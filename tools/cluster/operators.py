"""The four real operators as host processes against the e2e cluster.

- training-operator (PyTorchJob scheme only, so the mpi-operator owns MPIJob v2beta1): its
  cert-controller rotator insists on a Secret and on certificate files in
  /tmp/k8s-webhook-server/serving-certs, so both are seeded here with our own CA; its validating
  webhook is registered under the name the rotator manages, by URL on 127.0.0.1.
- mpi-operator: no webhooks; leader election is always on (a Lease in namespace mpi-operator);
  its health endpoint is hard-coded to port 8080.
- JobSet: internal certificate management off, webhooks served on 127.0.0.1 with our
  certificate (tools/cluster/webhooks.py).
- Kubeflow Trainer v2 (trainer-controller-manager): certificate management off, leader election
  off; it has no cert-dir option, so it serves the certificate the training-operator's rotator
  keeps in /tmp/k8s-webhook-server/serving-certs (one server certificate, SAN 127.0.0.1, for
  every webhook here). It needs the JobSet controller.

Each runs under a keeper (tools/cluster/keepalive.py) started through tools/cluster/processes.py:
recorded, marked, in a session of its own; its log is `<state>/<name>.log`. Every port an
operator binds is checked before it starts, and a health probe answered by another program is
named as such.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from tools.cluster import processes
from tools.cluster.node_config import INIT_IMAGE
from tools.cluster.webhooks import JOBSET_WEBHOOK_PORT, TRAINER_WEBHOOK_PORT, TRAINING_OPERATOR_WEBHOOK_PORT

REPO_ROOT = Path(__file__).resolve().parents[2]
TRAINING_OPERATOR_CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")  # fixed in training-operator v1.9
TRAINING_OPERATOR_HEALTH = 18081
JOBSET_HEALTH = 18082
TRAINER_HEALTH = 18083
MPI_OPERATOR_HEALTH = 8080  # hard-coded in mpi-operator v0.8.0


# training-operator v1.9's default init container for PyTorchJob workers (`init-pytorch`, which waits
# for the master's DNS name) sets no securityContext, so a namespace enforcing the `restricted` Pod
# Security level refuses every worker pod: 'violates PodSecurity "restricted:latest":
# allowPrivilegeEscalation != false (container "init-pytorch" must set
# securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container
# "init-pytorch" must set securityContext.capabilities.drop=["ALL"])'. The operator's own
# --pytorch-init-container-template-file is the fix: upstream's template plus a securityContext.
INIT_CONTAINER_TEMPLATE = """
- name: init-pytorch
  image: {{.InitContainerImage}}
  imagePullPolicy: IfNotPresent
  resources:
    limits: {cpu: 100m, memory: 20Mi}
    requests: {cpu: 50m, memory: 10Mi}
  securityContext:
    allowPrivilegeEscalation: false
    capabilities: {drop: [ALL]}
    runAsNonRoot: true
    seccompProfile: {type: RuntimeDefault}
  command: ['sh', '-c', 'err=1;for i in $(seq {{.MaxTries}}); do\
    if nslookup {{.MasterAddr}} | grep -q "^Name:"; then err=0 && break; fi;\
    echo waiting for master; sleep 2; done; exit $err']
"""
# One change to upstream's command, for the real node: its init image is Debian's BusyBox 1.35
# (node_config.INIT_IMAGE; alpine:3.10 cannot be pulled here), whose nslookup exits 1 when any
# search domain answers NXDOMAIN although the master's name resolved through the first; the
# answer's `Name:` line is what says the name resolves.


@dataclass(frozen=True)
class Operator:
    """One operator process: its name, command, the ports it binds and its health URL."""

    name: str
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    ports: tuple[int, ...]
    health: str

    @property
    def health_port(self) -> int:
        """The port of the health URL."""
        return int(self.health.split(":")[2].split("/")[0])


def _operators(state: Path, bin_dir: Path, kubeconfig: Path) -> list[Operator]:
    """The four operators, their configuration files written under `state`."""
    init_template = state / "pytorch-init-container.yaml"
    init_template.write_text(INIT_CONTAINER_TEMPLATE)
    jobset_config = state / "jobset-config.yaml"
    jobset_config.write_text(yaml.safe_dump({
        "apiVersion": "config.jobset.x-k8s.io/v1alpha1", "kind": "Configuration",
        "leaderElection": {"leaderElect": False}, "internalCertManagement": {"enable": False},
        "webhook": {"port": JOBSET_WEBHOOK_PORT, "host": "127.0.0.1", "certDir": str(state / "certs")},
        "metrics": {"bindAddress": "0"}, "health": {"healthProbeBindAddress": f"127.0.0.1:{JOBSET_HEALTH}"},
    }))  # fmt: skip
    trainer_config = state / "trainer-config.yaml"
    trainer_config.write_text(yaml.safe_dump({
        "apiVersion": "config.trainer.kubeflow.org/v1alpha1", "kind": "Configuration",
        "leaderElection": {"leaderElect": False}, "certManagement": {"enable": False},
        "webhook": {"port": TRAINER_WEBHOOK_PORT, "host": "127.0.0.1"},
        "metrics": {"bindAddress": "0"}, "health": {"healthProbeBindAddress": f"127.0.0.1:{TRAINER_HEALTH}"},
    }))  # fmt: skip
    kube = (("KUBECONFIG", str(kubeconfig)),)
    return [
        Operator("training-operator", (
            str(bin_dir / "training-operator"), f"--kubeconfig={kubeconfig}", "--enable-scheme=pytorchjob",
            "--metrics-bind-address=0", f"--health-probe-bind-address=127.0.0.1:{TRAINING_OPERATOR_HEALTH}",
            f"--webhook-server-port={TRAINING_OPERATOR_WEBHOOK_PORT}",
            f"--pytorch-init-container-template-file={init_template}",
            f"--pytorch-init-container-image={INIT_IMAGE}",
        ), (*kube, ("MY_POD_NAMESPACE", "kubeflow")), (TRAINING_OPERATOR_HEALTH, TRAINING_OPERATOR_WEBHOOK_PORT),
            f"http://127.0.0.1:{TRAINING_OPERATOR_HEALTH}/readyz"),
        Operator("mpi-operator", (
            str(bin_dir / "mpi-operator"), f"--kubeConfig={kubeconfig}", "--lock-namespace=mpi-operator",
            "--threadiness=2",
        ), kube, (MPI_OPERATOR_HEALTH,), f"http://127.0.0.1:{MPI_OPERATOR_HEALTH}/healthz"),
        Operator("jobset", (str(bin_dir / "jobset-controller"), f"--kubeconfig={kubeconfig}",
                            f"--config={jobset_config}"), kube, (JOBSET_HEALTH, JOBSET_WEBHOOK_PORT), f"http://127.0.0.1:{JOBSET_HEALTH}/readyz"),
        Operator("trainer", (str(bin_dir / "trainer-controller-manager"), f"--kubeconfig={kubeconfig}",
                             f"--config={trainer_config}"),
                 kube, (TRAINER_HEALTH, TRAINER_WEBHOOK_PORT), f"http://127.0.0.1:{TRAINER_HEALTH}/readyz"),
    ]  # fmt: skip


def ports() -> dict[int, str]:
    """Every port the operators bind, and which operator binds it."""
    return {
        TRAINING_OPERATOR_HEALTH: "training-operator (health probe)",
        TRAINING_OPERATOR_WEBHOOK_PORT: "training-operator (webhook)",
        MPI_OPERATOR_HEALTH: "mpi-operator (health probe, fixed in v0.8.0)",
        JOBSET_HEALTH: "jobset (health probe)",
        JOBSET_WEBHOOK_PORT: "jobset (webhook)",
        TRAINER_HEALTH: "trainer (health probe)",
        TRAINER_WEBHOOK_PORT: "trainer (webhook)",
    }


class ProbeError(processes.ProcessError):
    """A health probe was answered by something that is not the operator (named in the message)."""


def probe(op: Operator, state: Path) -> bool:
    """True when the operator's health URL answers 200; ProbeError when another program answers it."""
    try:
        with urllib.request.urlopen(op.health, timeout=2) as reply:
            return bool(reply.status == 200)
    except http.client.HTTPException as e:
        # Something else answered on the port (an HTTP/2 or binary server reads as BadStatusLine).
        holder = processes.listener(op.health_port)
        who = processes.describe(holder) if holder and holder > 0 else "another program"
        ours = holder in processes.members(state)
        raise ProbeError(
            f"{op.name}: its health probe {op.health} was answered by {'the cluster process ' if ours else ''}{who}, "
            f"not by the operator ({type(e).__name__})"
        ) from e
    except (urllib.error.URLError, OSError):
        return False


def wait_for(what: str, check: Callable[[], bool], deadline_s: float, log: Path | None = None) -> None:
    """Poll `check` until true or the deadline; the error names what and the log's tail."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if check():
            return
        time.sleep(0.5)
    tail = log.read_text()[-3000:] if log is not None and log.exists() else ""
    raise TimeoutError(f"{what} not ready after {deadline_s:.0f}s\n{tail}")


def start(state: Path, bin_dir: Path, kubeconfig: Path) -> None:
    """Start the four operators (those not already running) and wait until each is healthy.

    Every port of an operator about to start is checked first: a taken one raises PortTakenError
    naming the port and its process, before anything binds.
    """
    state.mkdir(parents=True, exist_ok=True)
    alive = {r.name for r in processes.records(state) if processes.running(r)}
    todo = [op for op in _operators(state, bin_dir, kubeconfig) if op.name not in alive]
    processes.require_free({port: what for port, what in ports().items() if any(port in op.ports for op in todo)})
    for op in todo:
        # Under a keeper that restarts it when it exits, as the operator's Deployment would: under load
        # an operator loses its leader-election lease and exits (mpi-operator cannot turn election off).
        keeper = [sys.executable, "-m", "tools.cluster.keepalive", *op.argv]
        processes.start(state, op.name, keeper, env={**os.environ, **dict(op.env)}, log=state / f"{op.name}.log",
                        cwd=REPO_ROOT)  # fmt: skip
    started = {r.name: r for r in processes.records(state)}
    for op in todo:
        log = state / f"{op.name}.log"

        def healthy(op: Operator = op, log: Path = log) -> bool:
            if not processes.running(started[op.name]):
                raise processes.ProcessError(f"{op.name} exited; its log ({log}):\n{log.read_text()[-3000:]}")
            return probe(op, state)

        wait_for(op.name, healthy, 120, log)


def module_dir(go_dir: Path, module: str) -> Path:
    """Where a module required by the wrapper go.mod in `go_dir` lies in the module cache (checked by go.sum)."""
    go = "/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else "go"
    done = subprocess.run(
        [go, "mod", "download", "-json", module], cwd=go_dir, capture_output=True, text=True, check=True,
        env={**os.environ, "GOFLAGS": "-mod=readonly", "GOTOOLCHAIN": "local"},
    )  # fmt: skip
    return Path(json.loads(done.stdout)["Dir"])
