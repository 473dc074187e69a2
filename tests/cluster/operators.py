"""The four real operators as host processes against the kwokctl cluster, and kwok's pod stages.

- training-operator (PyTorchJob scheme only, so the mpi-operator owns MPIJob v2beta1): its
  cert-controller rotator insists on a Secret and on certificate files in
  /tmp/k8s-webhook-server/serving-certs, so both are seeded here with our own CA; its validating
  webhook is registered under the name the rotator manages, by URL on 127.0.0.1.
- mpi-operator: no webhooks; leader election is always on (a Lease in namespace mpi-operator).
- JobSet: internal certificate management off, webhooks served on 127.0.0.1 with our
  certificate, the upstream webhook configurations registered by `clientConfig.url` and
  `caBundle` (what controller-runtime's envtest does; no cert-manager).
- Kubeflow Trainer v2 (trainer-controller-manager): certificate management off, leader election
  off; it has no cert-dir option, so it serves the certificate the training-operator's rotator
  keeps in /tmp/k8s-webhook-server/serving-certs (one server certificate, SAN 127.0.0.1, for
  every webhook here). Its defaulting and validating webhooks are registered by URL as above,
  under the names upstream's kustomize patches give them. It needs the JobSet controller.

Every process's pid is in `.cluster/operators/<name>.pid` and its log beside it; `stop()` ends them.

Pod lifecycle (kwok Stages, built from the stage files in the pinned kwok module plus one of ours):
pods are Pending until scheduled, then Running, then Succeeded after `kubetrain.dev/sim-duration`
(a Go duration, default 2s). MPI workers (owned by the MPIJob) stay Running, as they do under
mpirun, until the operator deletes them. A pod labelled `pod-container-running-failed.stage.kwok.x-k8s.io:
"true"` fails instead, with the annotation `...stage.kwok.x-k8s.io/exit-code` (default 1) after
`...stage.kwok.x-k8s.io/delay` (default 1s); a pod with any `kubetrain.dev/sim` label is left
alone for a test to drive through the status subresource.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

TRAINING_OPERATOR_CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")  # fixed in training-operator v1.9
TRAINING_OPERATOR_WEBHOOK_PORT = 19443
TRAINING_OPERATOR_HEALTH = "127.0.0.1:18081"
JOBSET_WEBHOOK_PORT = 19444
JOBSET_HEALTH = "127.0.0.1:18082"
TRAINER_WEBHOOK_PORT = 19445
TRAINER_HEALTH = "127.0.0.1:18083"
MPI_OPERATOR_HEALTH = "127.0.0.1:8080"  # hard-coded in mpi-operator v0.8.0
FAILED_LABEL = "pod-container-running-failed.stage.kwok.x-k8s.io"
SIM_LABEL = "kubetrain.dev/sim"
SIM_DURATION = "kubetrain.dev/sim-duration"

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
  command: ['sh', '-c', 'err=1;for i in $(seq {{.MaxTries}}); do if nslookup {{.MasterAddr}}; then err=0 && break; fi;echo waiting for master; sleep 2; done; exit $err']
"""

# The kwok stage files used as they are (paths inside the kwok module), then ours.
KWOK_STAGES = (
    "kustomize/stage/node/fast/node-initialize.yaml",
    "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "kustomize/stage/pod/fast/pod-ready.yaml",
    "kustomize/stage/pod/fast/pod-delete.yaml",
    "kustomize/stage/pod/chaos/pod-container-running-failed.yaml",
)


def stages_config(kwok_module: Path, log_file: Path, namespace: str) -> str:
    """kwokctl `--config`: kwok's node and pod stages, and a completion stage for every pod kind.

    kwok's own pod-complete stage only completes pods owned by a batch Job; PyTorchJob and JobSet
    pods need ours. Supplying stages replaces all of kwok's defaults, hence the node stages too.
    A ClusterLogs object makes kwok's kubelet endpoint serve `log_file` as the log of every
    container in `namespace`, so `pods/log` answers through the real API server.
    """
    docs = [(kwok_module / rel).read_text() for rel in KWOK_STAGES]
    complete: dict[str, Any] = yaml.safe_load((kwok_module / "kustomize/stage/pod/fast/pod-complete.yaml").read_text())
    complete["metadata"]["name"] = "kubetrain-pod-complete"
    complete["spec"]["selector"]["matchExpressions"] = [
        {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
        {"key": ".status.phase", "operator": "In", "values": ["Running"]},
        {"key": f'.metadata.labels["{SIM_LABEL}"]', "operator": "DoesNotExist"},
        {"key": f'.metadata.labels["{FAILED_LABEL}"]', "operator": "DoesNotExist"},
        # MPI workers run until the launcher's mpirun ends and the operator deletes them.
        {"key": ".metadata.ownerReferences.[].kind", "operator": "NotIn", "values": ["MPIJob"]},
    ]
    complete["spec"]["delay"] = {
        "durationMilliseconds": 2000,
        "durationFrom": {"expressionFrom": f'.metadata.annotations["{SIM_DURATION}"]'},
    }
    docs.append(yaml.safe_dump(complete))
    manual_free = []
    for doc in docs:
        stage: dict[str, Any] = yaml.safe_load(doc)
        name = stage["metadata"]["name"]
        if name in ("pod-ready", "pod-container-running-failed"):  # a `kubetrain.dev/sim` pod is the test's
            stage["spec"]["selector"]["matchExpressions"].append({"key": f'.metadata.labels["{SIM_LABEL}"]',
                                                                  "operator": "DoesNotExist"})  # fmt: skip
        manual_free.append(yaml.safe_dump(stage))
    # The CRI log format the kubelet reads (timestamp, stream, P/F tag, text), which kwok parses.
    log_file.write_text("2026-01-01T00:00:00.000000000Z stdout F kubetrain e2e: kwok serves this line as the log\n")
    logs = {
        "apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "ClusterLogs", "metadata": {"name": "kubetrain-logs"},
        "spec": {"selector": {"matchNamespaces": [namespace]}, "logs": [{"logsFile": str(log_file), "follow": False}]},
    }  # fmt: skip
    manual_free.append(yaml.safe_dump(logs))
    return "---\n".join(manual_free)


# --- certificates ----------------------------------------------------------------------------


def _pem_key(key: rsa.RSAPrivateKey) -> bytes:
    # PKCS#1 ("RSA PRIVATE KEY"): the form the training-operator's cert-controller parses.
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                             serialization.NoEncryption())  # fmt: skip


def make_certs(directory: Path) -> dict[str, bytes]:
    """A CA (`training-operator-ca`) and one server certificate for both operators' webhooks.

    Valid ten years, so the training-operator's rotator (90-day look-ahead) keeps them.
    """
    if (directory / "tls.crt").exists():
        return {name: (directory / name).read_bytes() for name in ("ca.crt", "ca.key", "tls.crt", "tls.key")}
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=1)
    until = now + datetime.timedelta(days=3650)
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "training-operator"),
                         x509.NameAttribute(NameOID.COMMON_NAME, "training-operator-ca")])  # fmt: skip
    ca = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=True,
                                     data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                     crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("training-operator-ca")]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    names = ["training-operator.kubeflow.svc", "jobset-webhook-service.jobset-system.svc", "localhost"]
    server = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
        .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now).not_valid_after(until)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName([*(x509.DNSName(n) for n in names),
                                                    x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    files = {
        "ca.crt": ca.public_bytes(serialization.Encoding.PEM),
        "ca.key": _pem_key(ca_key),
        "tls.crt": server.public_bytes(serialization.Encoding.PEM),
        "tls.key": _pem_key(key),
    }
    for name, data in files.items():
        (directory / name).write_bytes(data)
    return files


# --- webhook configurations -----------------------------------------------------------------


def _by_url(config: dict[str, Any], port: int, ca: bytes) -> dict[str, Any]:
    for hook in config.get("webhooks") or []:
        path = hook["clientConfig"]["service"]["path"]
        hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": base64.b64encode(ca).decode()}
    return config


def jobset_webhooks(jobset_module: Path, ca: bytes) -> list[dict[str, Any]]:
    """JobSet's webhook configurations with its kustomize patches (pod hooks scoped to JobSet pods)."""
    base = jobset_module / "config/components/webhook"
    configs = [c for c in yaml.safe_load_all((base / "manifests.yaml").read_text()) if c]
    for config in configs:
        patch_file = base / "patches" / ("mutating-patch.yaml" if config["kind"].startswith("Mutating") else
                                         "validating-patch.yaml")  # fmt: skip
        for op in yaml.safe_load(patch_file.read_text()):
            index = int(op["path"].rsplit("/", 1)[1])
            config["webhooks"][index] = op["value"]
        config["metadata"]["name"] = "jobset-" + config["metadata"]["name"]
        _by_url(config, JOBSET_WEBHOOK_PORT, ca)
    return configs


def training_operator_webhooks(module: Path, ca: bytes) -> list[dict[str, Any]]:
    """The training-operator's VWC, PyTorchJob hook only, under the name its rotator manages."""
    configs = [c for c in yaml.safe_load_all((module / "manifests/base/webhook/manifests.yaml").read_text()) if c]
    out = []
    for config in configs:
        config["metadata"]["name"] = "validator.training-operator.kubeflow.org"
        config["webhooks"] = [h for h in config["webhooks"] if "pytorchjob" in h["clientConfig"]["service"]["path"]]
        out.append(_by_url(config, TRAINING_OPERATOR_WEBHOOK_PORT, ca))
    return out


def trainer_webhooks(trainer_module: Path, ca: bytes) -> list[dict[str, Any]]:
    """Trainer v2's webhook configurations, named and scoped as its kustomize patches do."""
    base = trainer_module / "manifests/base/webhook"
    names = {"MutatingWebhookConfiguration": "defaulter.trainer.kubeflow.org",
             "ValidatingWebhookConfiguration": "validator.trainer.kubeflow.org"}  # fmt: skip
    configs = [c for c in yaml.safe_load_all((base / "manifests.yaml").read_text()) if c]
    for config in configs:
        patch_file = base / (
            "patch_mutating.yaml" if config["kind"].startswith("Mutating") else "patch_validating.yaml"
        )
        for op in yaml.safe_load(patch_file.read_text()):
            parts = op["path"].strip("/").split("/")
            if parts[0] == "webhooks" and parts[-1] == "objectSelector":
                config["webhooks"][int(parts[1])]["objectSelector"] = op["value"]
        config["metadata"]["name"] = names[config["kind"]]
        _by_url(config, TRAINER_WEBHOOK_PORT, ca)
    return configs


def webhook_secret(files: dict[str, bytes]) -> dict[str, Any]:
    """The Secret the training-operator's rotator reads (it updates, never creates)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "training-operator-webhook-cert", "namespace": "kubeflow"},
        "data": {name: base64.b64encode(data).decode() for name, data in files.items()},
    }


# --- processes ----------------------------------------------------------------------------------


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def _pid(state: Path, name: str) -> int | None:
    path = state / f"{name}.pid"
    if not path.exists():
        return None
    pid = int(path.read_text())
    return pid if _alive(pid) else None


_STARTED: dict[str, subprocess.Popen[bytes]] = {}


def _start(state: Path, name: str, argv: list[str], env: dict[str, str]) -> None:
    if _pid(state, name) is not None:
        return
    # Under a keeper that restarts it when it exits, as the operator's Deployment would: under load
    # an operator loses its leader-election lease and exits (mpi-operator cannot turn election off).
    keeper = [sys.executable, "-m", "tests.cluster.keepalive", *argv]
    with (state / f"{name}.log").open("ab") as log:
        proc = subprocess.Popen(keeper, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                cwd=Path(__file__).resolve().parents[2])  # fmt: skip
    _STARTED[name] = proc
    (state / f"{name}.pid").write_text(str(proc.pid))


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            return bool(reply.status == 200)
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
    """Start the four operators (those not already running) and wait until each is healthy."""
    state.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    init_template = state / "pytorch-init-container.yaml"
    init_template.write_text(INIT_CONTAINER_TEMPLATE)
    _start(state, "training-operator", [
        str(bin_dir / "training-operator"), f"--kubeconfig={kubeconfig}", "--enable-scheme=pytorchjob",
        "--metrics-bind-address=0", f"--health-probe-bind-address={TRAINING_OPERATOR_HEALTH}",
        f"--webhook-server-port={TRAINING_OPERATOR_WEBHOOK_PORT}", f"--pytorch-init-container-template-file={init_template}",
    ], {**env, "MY_POD_NAMESPACE": "kubeflow"})  # fmt: skip
    _start(state, "mpi-operator", [
        str(bin_dir / "mpi-operator"), f"--kubeConfig={kubeconfig}", "--lock-namespace=mpi-operator", "--threadiness=2",
    ], env)  # fmt: skip
    config = state / "jobset-config.yaml"
    config.write_text(yaml.safe_dump({
        "apiVersion": "config.jobset.x-k8s.io/v1alpha1", "kind": "Configuration",
        "leaderElection": {"leaderElect": False}, "internalCertManagement": {"enable": False},
        "webhook": {"port": JOBSET_WEBHOOK_PORT, "host": "127.0.0.1", "certDir": str(state / "certs")},
        "metrics": {"bindAddress": "0"}, "health": {"healthProbeBindAddress": JOBSET_HEALTH},
    }))  # fmt: skip
    _start(state, "jobset", [str(bin_dir / "jobset-controller"), f"--kubeconfig={kubeconfig}", f"--config={config}"],
           env)  # fmt: skip
    trainer_config = state / "trainer-config.yaml"
    trainer_config.write_text(yaml.safe_dump({
        "apiVersion": "config.trainer.kubeflow.org/v1alpha1", "kind": "Configuration",
        "leaderElection": {"leaderElect": False}, "certManagement": {"enable": False},
        "webhook": {"port": TRAINER_WEBHOOK_PORT, "host": "127.0.0.1"},
        "metrics": {"bindAddress": "0"}, "health": {"healthProbeBindAddress": TRAINER_HEALTH},
    }))  # fmt: skip
    _start(state, "trainer", [str(bin_dir / "trainer-controller-manager"), f"--kubeconfig={kubeconfig}",
                              f"--config={trainer_config}"], env)  # fmt: skip
    for name, url in (("training-operator", f"http://{TRAINING_OPERATOR_HEALTH}/readyz"),
                      ("jobset", f"http://{JOBSET_HEALTH}/readyz"),
                      ("mpi-operator", f"http://{MPI_OPERATOR_HEALTH}/healthz"),
                      ("trainer", f"http://{TRAINER_HEALTH}/readyz")):  # fmt: skip
        log = state / f"{name}.log"

        def healthy(name: str = name, url: str = url) -> bool:
            proc = _STARTED.get(name)
            if _pid(state, name) is None or (proc is not None and proc.poll() is not None):
                raise RuntimeError(
                    f"{name} exited; its log ({state / (name + '.log')}):\n{(state / (name + '.log')).read_text()[-3000:]}"
                )
            return _ready(url)

        wait_for(name, healthy, 120, log)


def stop(state: Path) -> list[str]:
    """End every operator process started by `start` (SIGTERM, then SIGKILL); the names stopped."""
    stopped = []
    for pid_file in sorted(state.glob("*.pid")) if state.exists() else []:
        pid = int(pid_file.read_text())
        proc = _STARTED.pop(pid_file.stem, None)
        if proc is not None and proc.pid != pid:
            proc = None

        def alive(pid: int = pid, proc: subprocess.Popen[bytes] | None = proc) -> bool:
            # A child of this process lingers as a zombie until reaped: ask Popen, not kill(0).
            return proc.poll() is None if proc is not None else _alive(pid)

        if alive():
            os.killpg(pid, signal.SIGTERM)
            end = time.monotonic() + 10
            while alive() and time.monotonic() < end:
                time.sleep(0.2)
            if alive():
                os.killpg(pid, signal.SIGKILL)
                if proc is not None:
                    proc.wait(timeout=10)
            stopped.append(pid_file.stem)
        pid_file.unlink()
    return stopped


def module_dir(go_dir: Path, module: str) -> Path:
    """Where a module required by the wrapper go.mod in `go_dir` lies in the module cache (checked by go.sum)."""
    go = "/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else "go"
    done = subprocess.run(
        [go, "mod", "download", "-json", module], cwd=go_dir, capture_output=True, text=True, check=True,
        env={**os.environ, "GOFLAGS": "-mod=readonly", "GOTOOLCHAIN": "local"},
    )  # fmt: skip
    return Path(json.loads(done.stdout)["Dir"])
