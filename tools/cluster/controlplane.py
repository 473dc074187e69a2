"""A real Kubernetes control plane on this machine, without a container engine: `make cluster-up`.

kwokctl's `binary` runtime runs etcd, kube-apiserver (RBAC authorization, admission plugins,
an audit log), kube-controller-manager and kube-scheduler as host processes, built from the Go
module proxy by tools/controlplane/build.sh (cached by their pins); kwok plays the nodes, so pods
are scheduled and admitted for real but never run. On top: the upstream CRDs of the pinned
operators (tests/crds.py), a namespace labelled for the `restricted` Pod Security level, and a
non-admin user `kubetrain-launcher` bound only to the Role in deploy/rbac.yaml.

Files under `.cluster/`: `kubeconfig` (admin), `launcher.kubeconfig` (the launcher user),
`kwok/` (kwokctl's working directory: logs, certificates, the audit log), `bin` (a link to the
binaries), `processes/` (a record of each process the harness started). `python -m tools.cluster`.

A start that fails stops what it started; `down` stops every process of the cluster whatever
state `.cluster/` is in, from /proc when the records are gone (tools/cluster/processes.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from kubetrain.presets.defaults import PS_MASTER_SERVICE_ACCOUNT
from tests.crds import CRDS, crd_dir
from tools.cluster import manifests, node, node_config, oci, operators, processes, stages, webhooks
from tools.cluster.kfp import backend as kfp_backend
from tools.cluster.kfp import mariadb, multiuser, services_venv
from tools.cluster.kfp.manifests import NAMESPACE as KFP_NAMESPACE

REPO_ROOT = Path(__file__).resolve().parents[2]
# Another cluster beside the default one (tests/cluster/test_harness.py starts one to fail on purpose).
STATE = Path(os.environ.get("KUBETRAIN_CLUSTER_DIR") or REPO_ROOT / ".cluster").resolve()
OPERATORS = STATE / "operators"
GO_WRAPPERS = REPO_ROOT / "tools" / "controlplane"
NAME = os.environ.get("KUBETRAIN_CLUSTER_NAME") or "kubetrain"
NAMESPACE = "kubetrain-e2e"
LAUNCHER_USER = "kubetrain-launcher"
WORKSPACE_CLAIM = "kubetrain-workspace"
# The launcher user and every benchmark user are signed into this group, which holds the Role of
# deploy/rbac.yaml; the audit log records the group's requests (metadata only), the UI server's
# and the PS masters' (deploy/rbac.yaml's kubetrain-ps-master, in each namespace where PS jobs
# run in real pods: the node's, KFP's, the two profiles), and nothing else.
LAUNCHER_GROUP = "kubetrain-launchers"
PS_MASTER_NAMESPACES = (node.REAL_NAMESPACE, KFP_NAMESPACE, *(profile.name for profile in multiuser.PROFILES))
_PS_MASTERS = ", ".join(f'"system:serviceaccount:{ns}:{PS_MASTER_SERVICE_ACCOUNT}"' for ns in PS_MASTER_NAMESPACES)
AUDIT_POLICY = f"""apiVersion: audit.k8s.io/v1
kind: Policy
rules:
  - level: Metadata
    userGroups: ["{LAUNCHER_GROUP}"]
  - level: Metadata
    users: ["system:serviceaccount:kubeflow:ml-pipeline-ui", {_PS_MASTERS}]
  - level: None
"""


class ControlPlaneError(RuntimeError):
    """The control plane could not be built or started; the message says what and where the logs are."""


def start_errors() -> tuple[type[BaseException], ...]:
    """What a failed `up` raises, each with a message that says what and where: for one-line reports."""
    return (ControlPlaneError, processes.ProcessError, node.NodeError, kfp_backend.BackendError,
            mariadb.MariaDBError, services_venv.ServicesVenvError, oci.RegistryError, TimeoutError)  # fmt: skip


@dataclass(frozen=True)
class Cluster:
    """A running control plane and the files to reach it."""

    bin_dir: Path
    kubeconfig: Path
    launcher_kubeconfig: Path
    workdir: Path
    started_here: bool  # False when it was running already (`make cluster-up`)

    @property
    def pki(self) -> Path:
        """kwokctl's certificates: `ca.crt` (the client CA), `admin.crt`/`admin.key` (system:masters)."""
        return self.workdir / "clusters" / NAME / "pki"

    @property
    def audit_log(self) -> Path:
        """The kube-apiserver's audit log (the launcher user's requests, metadata level)."""
        return self.workdir / "clusters" / NAME / "logs" / "audit.log"

    def kubectl(self, *args: str, as_launcher: bool = False, stdin: str | None = None) -> str:
        """Run the pinned kubectl; its stdout, or ControlPlaneError with its stderr."""
        config = self.launcher_kubeconfig if as_launcher else self.kubeconfig
        done = subprocess.run(
            [str(self.bin_dir / "kubectl"), "--kubeconfig", str(config), *args],
            input=stdin, capture_output=True, text=True, check=False, timeout=120,
        )  # fmt: skip
        if done.returncode != 0:
            raise ControlPlaneError(f"kubectl {' '.join(args)}: {done.stderr.strip()[-2000:]}")
        return done.stdout

    def kwokctl(self, *args: str) -> str:
        """Run kwokctl on this cluster (e.g. `get kubeconfig --user U --group G` signs a new user)."""
        return _kwokctl(self.bin_dir, *args, "--name", NAME)


def build(*, real_node: bool = False) -> Path:
    """The directory of the pinned binaries, built first if missing (tools/controlplane/build.sh).

    With `real_node`, the node's binaries too. `KUBETRAIN_CONTROLPLANE_BIN` names a directory of
    binaries to use as they are instead.
    """
    given = os.environ.get("KUBETRAIN_CONTROLPLANE_BIN")
    if given:
        return Path(given)
    script = REPO_ROOT / "tools" / "controlplane" / "build.sh"
    argv = ["bash", str(script), *(["node"] if real_node else [])]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ControlPlaneError(f"{script} failed:\n{done.stderr[-4000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


def _env(bin_dir: Path) -> dict[str, str]:
    # kwokctl keeps everything under .cluster/kwok and uses our kubectl: it downloads nothing. The
    # marker reaches every process kwokctl starts, so `down` finds them without kwokctl's pid files.
    return processes.marked_env(
        STATE, {**os.environ, "KWOK_WORKDIR": str(STATE / "kwok"), "KWOK_KUBECTL_BINARY": str(bin_dir / "kubectl")}
    )


def _kwokctl(bin_dir: Path, *args: str, timeout: float = 300) -> str:
    done = subprocess.run(
        [str(bin_dir / "kwokctl"), *args], env=_env(bin_dir), capture_output=True, text=True, check=False,
        timeout=timeout,
    )  # fmt: skip
    if done.returncode != 0:
        raise ControlPlaneError(f"kwokctl {' '.join(args)}:\n{done.stdout[-2000:]}{done.stderr[-4000:]}")
    return done.stdout


def _kwokctl_options() -> str:
    """kwokctl's own configuration, for a cluster with a real node beside the kwok one (tools/cluster/node.py).

    The API server certificate also names the address pods use for it (`kubernetes.default`);
    kwok takes only the nodes annotated as its own (by default it would take the real node too);
    the API server reaches the kubelet by its address with a client certificate (`kubectl logs`);
    two admission plugins keep kwok pods and real pods apart by namespace. Component flags go
    here, not in `--extra-args`: kwokctl v0.8.0 indexes repeated `--extra-args` of several
    components wrongly and panics.
    """
    pki = STATE / "kwok" / "clusters" / NAME / "pki"
    flags = {
        "kwok-controller": {"manage-all-nodes": "false",
                            "manage-nodes-with-annotation-selector": "kwok.x-k8s.io/node=fake"},
        "kube-apiserver": {
            "kubelet-preferred-address-types": "InternalIP,Hostname",
            "kubelet-client-certificate": str(pki / "admin.crt"), "kubelet-client-key": str(pki / "admin.key"),
            "enable-admission-plugins": "NodeRestriction,PodNodeSelector,PodTolerationRestriction",
        },
    }  # fmt: skip
    patches = [{"name": component, "extraArgs": [{"key": k, "value": v} for k, v in args.items()]}
               for component, args in flags.items()]  # fmt: skip
    sans = [node_config.KUBERNETES_SERVICE_IP, "kubernetes.default.svc"]
    return yaml.safe_dump({"apiVersion": "config.kwok.x-k8s.io/v1alpha1", "kind": "KwokctlConfiguration",
                           "options": {"kubeApiserverCertSANs": sans}, "componentsPatches": patches})  # fmt: skip


def _running(bin_dir: Path) -> bool:
    try:
        return NAME in _kwokctl(bin_dir, "get", "clusters", timeout=60).split()
    except ControlPlaneError:
        return False


def up(*, real_node: bool | None = None, kfp: bool | None = None) -> Cluster:
    """Start the control plane (or find it running) and prepare CRDs, the namespace and the users.

    With `real_node` (default: `KUBETRAIN_REAL_NODE`, on unless "0") a real node joins the kwok
    one (tools/cluster/node.py); with `kfp` (default: `KUBETRAIN_KFP`, on unless "0"; needs the
    real node) the Kubeflow Pipelines backend runs on it (tools/cluster/kfp/backend.py). A start
    that fails stops what this call started (everything, when
    it created the cluster; the operators and the node it started otherwise) before the error
    propagates.
    """
    if real_node is None:
        real_node = os.environ.get("KUBETRAIN_REAL_NODE", "1") != "0"
    if kfp is None:
        kfp = real_node and os.environ.get("KUBETRAIN_KFP", "1") != "0"
    if kfp and not real_node:
        raise ControlPlaneError("the KFP backend runs its steps on the real node: start it too (KUBETRAIN_REAL_NODE=1)")
    if real_node:
        node.check_host()
    bin_dir = build(real_node=real_node)
    STATE.mkdir(exist_ok=True)
    before = {r.pid for r in processes.records(STATE)}
    create = not _running(bin_dir)
    try:
        cluster = _up(bin_dir, create=create)
        if real_node and not node.running(STATE):
            node.up(cluster, STATE)
            cluster.kubectl("apply", "--server-side", "-n", node.REAL_NAMESPACE, "-f", "-", stdin=_user_binding())
        if kfp and not kfp_backend.running(STATE):
            kfp_backend.up(cluster, STATE)
        return cluster
    except BaseException:
        try:
            if create:
                down(bin_dir)
            else:
                processes.stop_all(STATE, keep=before)
                node.clean_host(STATE)
        except (ControlPlaneError, processes.ProcessError, OSError, subprocess.SubprocessError) as cleanup:
            # The start's own error is the one to report; the cleanup's is a note beside it.
            print(f"cluster up: cleaning up after the failed start also failed: {cleanup}", file=sys.stderr)
        raise


def attach() -> Cluster:
    """The cluster `up` started, as it runs, changing nothing; ControlPlaneError if none runs.

    For test sessions side by side on one cluster (tools/ci/e2e.py): `up` on a running cluster
    applies its objects again and makes the operators' webhook certificates anew, which must not
    happen under a session already creating jobs.
    """
    link = STATE / "bin"
    if not link.exists() or not _running(link.resolve()):
        raise ControlPlaneError(f"no cluster runs from {STATE}: start it first (python -m tools.cluster up)")
    return Cluster(
        bin_dir=link.resolve(),
        kubeconfig=STATE / "kubeconfig",
        launcher_kubeconfig=STATE / "launcher.kubeconfig",
        workdir=STATE / "kwok",
        started_here=False,
    )


def _up(bin_dir: Path, *, create: bool) -> Cluster:
    policy = STATE / "audit-policy.yaml"
    policy.write_text(AUDIT_POLICY)
    stage_file = STATE / "kwok-stages.yaml"
    stage_file.write_text(
        stages.stages_config(
            operators.module_dir(GO_WRAPPERS / "k8s", "sigs.k8s.io/kwok"), STATE / "container.log", NAMESPACE
        )
        + "---\n"
        + _kwokctl_options()
    )
    if create:
        # Leftovers of an earlier start of this cluster go first (kwokctl picks free ports for its
        # own processes; the operators' fixed ports are checked before they start).
        processes.stop_all(STATE)
        (STATE / "bin").unlink(missing_ok=True)
        (STATE / "bin").symlink_to(bin_dir)  # so that `down` finds kwokctl even if this start fails
        _kwokctl(
            bin_dir, "create", "cluster", "--name", NAME, "--runtime", "binary",
            "--kube-apiserver-binary", str(bin_dir / "kube-apiserver"),
            "--kube-controller-manager-binary", str(bin_dir / "kube-controller-manager"),
            "--kube-scheduler-binary", str(bin_dir / "kube-scheduler"),
            "--kwok-controller-binary", str(bin_dir / "kwok"),
            "--etcd-binary", str(bin_dir / "etcd"),
            "--kube-authorization", "--kube-admission", "--kube-audit-policy", str(policy),
            # One instance of each, nothing to elect: under load (bench/scale.py) a lease renewal
            # times out and an electing scheduler or controller-manager exits, and nothing here
            # restarts them (kwokctl's binary runtime has no kubelet).
            "--extra-args", "kube-scheduler=leader-elect=false",
            "--extra-args", "kube-controller-manager=leader-elect=false",
            "--config", str(stage_file),
            "--wait", "3m",
        )  # fmt: skip
    cluster = Cluster(
        bin_dir=bin_dir,
        kubeconfig=STATE / "kubeconfig",
        launcher_kubeconfig=STATE / "launcher.kubeconfig",
        workdir=STATE / "kwok",
        started_here=create,
    )
    cluster.kubeconfig.write_text(_kwokctl(bin_dir, "get", "kubeconfig", "--name", NAME))
    cluster.launcher_kubeconfig.write_text(
        # Without --group kwokctl signs the user into system:masters, which RBAC never checks.
        _kwokctl(bin_dir, "get", "kubeconfig", "--name", NAME, "--user", LAUNCHER_USER, "--group", LAUNCHER_GROUP)
    )
    for relative in CRDS:
        cluster.kubectl("apply", "--server-side", "-f", str(crd_dir() / relative))
    cluster.kubectl("apply", "--server-side", "-f", "-", stdin=_namespace())
    cluster.kubectl("apply", "--server-side", "-f", "-", stdin=_node())
    cluster.kubectl("apply", "--server-side", "-f", "-", stdin=_workspace())
    cluster.kubectl("apply", "--server-side", "-n", NAMESPACE, "-f", str(REPO_ROOT / "deploy" / "rbac.yaml"))
    cluster.kubectl("apply", "--server-side", "-f", str(REPO_ROOT / "deploy" / "priority-classes.yaml"))
    cluster.kubectl("apply", "--server-side", "-n", NAMESPACE, "-f", "-", stdin=_user_binding())
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
    _operators(cluster)
    link = STATE / "bin"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(bin_dir)
    return cluster


def _operators(cluster: Cluster) -> None:
    """Certificates, webhook registrations, the four operator processes (tools/cluster/operators.py), runtimes."""
    # Before anything is written: the training-operator's certificate directory is one per machine.
    alive = {r.name for r in processes.records(OPERATORS) if processes.running(r)}
    processes.require_free({p: what for p, what in operators.ports().items() if what.split()[0] not in alive})
    files = webhooks.make_certs(OPERATORS / "certs")
    trainer_module = operators.module_dir(GO_WRAPPERS / "k8s", "github.com/kubeflow/trainer/v2")
    operators.TRAINING_OPERATOR_CERT_DIR.mkdir(parents=True, exist_ok=True)
    for name in ("tls.crt", "tls.key", "ca.crt"):
        (operators.TRAINING_OPERATOR_CERT_DIR / name).write_bytes(files[name])
    for ns in ("kubeflow", "mpi-operator"):
        cluster.kubectl("apply", "--server-side", "-f", "-", stdin=yaml.safe_dump(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}))  # fmt: skip
    hooks = [
        webhooks.webhook_secret(files),
        *webhooks.training_operator_webhooks(
            operators.module_dir(GO_WRAPPERS / "training-operator", "github.com/kubeflow/training-operator"),
            files["ca.crt"],
        ),
        *webhooks.jobset_webhooks(operators.module_dir(GO_WRAPPERS / "k8s", "sigs.k8s.io/jobset"), files["ca.crt"]),
        *webhooks.trainer_webhooks(trainer_module, files["ca.crt"]),
    ]
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=yaml.safe_dump_all(hooks))
    operators.start(OPERATORS, cluster.bin_dir, cluster.kubeconfig)
    # The runtimes TrainJobs name, through the Trainer's validating webhook: Trainer's own
    # torch-distributed as upstream ships it, and kubetrain's MPI runtime as the README installs it.
    cluster.kubectl(
        "apply", "--server-side", "-f", str(trainer_module / "manifests/base/runtimes/torch_distributed.yaml")
    )
    cluster.kubectl("apply", "--server-side", "-f", str(REPO_ROOT / "deploy" / "runtimes" / "kubetrain-mpi.yaml"))


def _namespace() -> str:
    labels = {f"pod-security.kubernetes.io/{mode}": "restricted" for mode in ("enforce", "warn", "audit")}
    return yaml.safe_dump({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE, "labels": labels}})


def _node() -> str:
    """One fake node kwok keeps Ready, large enough for every test's pods."""
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": "kwok-node-0",
                "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
                "labels": {"kubernetes.io/hostname": "kwok-node-0", "type": "kwok"},
            },
            "status": {
                "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "256"},
                "capacity": {"cpu": "64", "memory": "256Gi", "pods": "256"},
            },
        }
    )


def _workspace() -> str:
    """The ReadWriteMany workspace claim the pipelines mount, bound to a static volume by the real PV controller.

    Nothing is ever written to it (kwok runs no container); it lets pods that mount the claim be
    scheduled, as on a cluster with an RWX storage class.
    """
    return manifests.workspace_claim(NAMESPACE, WORKSPACE_CLAIM, host_path="/nonexistent/kubetrain-e2e", size="1Gi",
                                     storage_class="kubetrain-e2e", path_must_exist=False)  # fmt: skip


def _user_binding() -> str:
    """The Role of deploy/rbac.yaml bound to the launchers' group (the file binds service accounts)."""
    return yaml.safe_dump(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "kubetrain-launcher-e2e-user"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "kubetrain-launcher"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": LAUNCHER_GROUP}],
        }
    )


def down(bin_dir: Path | None = None) -> list[int]:
    """Stop every process of the cluster and remove .cluster/; the pids that had to be ended.

    kwokctl is asked first (it knows its cluster), then whatever is left is found from /proc: a
    process marked for this cluster, or one whose command line or working directory lies in
    .cluster/, even when a failed start, a deleted directory or a killed test run left no record.
    """
    link = STATE / "bin"
    bin_dir = bin_dir or (link.resolve() if link.exists() else None)
    # The real node's pods go through the API while it still runs, so the kubelet tears down their network.
    node.drain(bin_dir / "kubectl" if bin_dir else None, STATE / "kubeconfig")
    if bin_dir is not None and (STATE / "kwok" / "clusters" / NAME).exists():
        try:
            _kwokctl(bin_dir, "delete", "cluster", "--name", NAME, timeout=120)
        except (ControlPlaneError, subprocess.TimeoutExpired) as e:
            print(f"cluster down: kwokctl could not delete the cluster ({str(e).splitlines()[0]}); "
                  "stopping its processes directly", file=sys.stderr)  # fmt: skip
    ended = processes.stop_all(STATE)
    for line in node.clean_host(STATE):
        print(f"cluster down: {line}", file=sys.stderr)
    shutil.rmtree(STATE, ignore_errors=True)
    if processes.listener(webhooks.TRAINING_OPERATOR_WEBHOOK_PORT) is None:  # no other cluster's operator uses it
        shutil.rmtree(operators.TRAINING_OPERATOR_CERT_DIR, ignore_errors=True)
    return ended


def status() -> list[str]:
    """One line per running process of the cluster (name when recorded, pid, command), then the API server's health."""
    names = {r.pid: r.name for r in processes.records(STATE)}
    lines = [f"{names.get(pid, '-'):<18} {processes.describe(pid)}" for pid in processes.members(STATE)]
    kubeconfig = STATE / "kubeconfig"
    link = STATE / "bin"
    if kubeconfig.exists() and link.exists():
        done = subprocess.run([str(link / "kubectl"), "--kubeconfig", str(kubeconfig), "get", "--raw", "/readyz"],
                              capture_output=True, text=True, check=False, timeout=30)  # fmt: skip
        lines.append(f"kube-apiserver /readyz: {(done.stdout or done.stderr).strip().splitlines()[-1:]}")
    return lines or ["no process of the cluster is running"]
