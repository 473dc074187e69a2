"""What the benchmarks against the real control plane share (bench/api_cost.py, bench/scale.py).

The cluster is the e2e tier's (tools/cluster/controlplane.py: real etcd, kube-apiserver,
controller-manager, scheduler and the real training-operator; kwok plays the nodes). Requests
are counted from the kube-apiserver's audit log, which records every request of a user in the
group `kubetrain-launchers`: each benchmark side runs as a user of its own, signed by kwokctl
into that group, so the audit log tells the sides apart exactly. The pollers do what the Training
Operator SDK's `wait_for_job_conditions` does by default: GET the job every 15 s.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from cpu_by_process import cpu_seconds, read_stat
from kubernetes import client, config, watch

from kubetrain.manifests import build_pytorchjob
from kubetrain.manifests.kinds import PYTORCHJOB
from kubetrain.specs import JobMeta, PyTorchJobSpec
from kubetrain.specs.common import ReplicaSpec
from tools.cluster.controlplane import LAUNCHER_GROUP, NAMESPACE, Cluster, up
from tools.cluster.stages import SIM_DURATION

TERMINAL = ("Succeeded", "Failed")


def cluster() -> Cluster:
    """The e2e control plane, started if it is not running (`make cluster-up` leaves it running)."""
    return up()


POLLER_GROUP = "kubetrain-bench-pollers"


def user_kubeconfig(cluster: Cluster, user: str, *, poller: bool = False) -> Path:
    """A kubeconfig for `user` in the launchers' group (bound to deploy/rbac.yaml's Role), made once;
    a service account as far as API Priority and Fairness can tell.

    A poller is also in a group allowed to GET PyTorchJobs, as the Training Operator SDK does
    (kubetrain's launcher reads the status subresource instead, and its Role has no such grant).
    """
    path = cluster.kubeconfig.parent / "users" / f"{user}.kubeconfig"
    if not path.exists():
        path.parent.mkdir(exist_ok=True)
        # system:serviceaccounts: a KFP step runs as a service account (pipeline-runner), so API
        # Priority and Fairness puts its requests in the service-accounts flow (workload-low,
        # five times the seats of the global-default level a plain user gets).
        groups = ",".join([LAUNCHER_GROUP, "system:serviceaccounts", *([POLLER_GROUP] if poller else [])])
        if poller:
            _poller_role(cluster)
        path.write_text(cluster.kwokctl("get", "kubeconfig", "--user", user, "--group", groups))
    return path


APF_FILE = Path(__file__).resolve().parents[1] / "deploy" / "apf.yaml"


def apply_apf(cluster: Cluster, enabled: bool) -> None:
    """Apply deploy/apf.yaml (or remove it) with its subjects pointed at the benchmark's launchers.

    The benchmark's launchers are users in the group `kubetrain-launchers` (signed by kwokctl) that
    stand in for a KFP step's service account; everything else of the file is applied as shipped.
    """
    docs = [d for d in yaml.safe_load_all(APF_FILE.read_text()) if d]
    for doc in docs:
        if doc["kind"] == "FlowSchema":
            for rule in doc["spec"]["rules"]:
                rule["subjects"] = [{"kind": "Group", "group": {"name": LAUNCHER_GROUP}}]
    if enabled:
        cluster.kubectl("apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all(docs))
    else:
        for doc in docs:
            kind = doc["kind"].lower() + "s.flowcontrol.apiserver.k8s.io"
            cluster.kubectl("delete", kind, doc["metadata"]["name"], "--ignore-not-found")


def _poller_role(cluster: Cluster) -> None:
    rbac = "rbac.authorization.k8s.io"
    meta = {"name": "bench-poller", "namespace": NAMESPACE}
    role = {"apiVersion": f"{rbac}/v1", "kind": "Role", "metadata": meta,
            "rules": [{"apiGroups": ["kubeflow.org"], "resources": ["pytorchjobs"], "verbs": ["get"]}]}  # fmt: skip
    binding = {"apiVersion": f"{rbac}/v1", "kind": "RoleBinding", "metadata": meta,
               "roleRef": {"apiGroup": rbac, "kind": "Role", "name": "bench-poller"},
               "subjects": [{"apiGroup": rbac, "kind": "Group", "name": POLLER_GROUP}]}  # fmt: skip
    cluster.kubectl("apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all([role, binding]))


def pytorchjob(name: str, run_seconds: float) -> dict[str, Any]:
    """A master-only PyTorchJob that kwok keeps Running for `run_seconds`, then completes."""
    spec = PyTorchJobSpec(
        meta=JobMeta(name=name, namespace=NAMESPACE, kfp_run_id="bench", kfp_task_id=name),
        master=ReplicaSpec(image="example.com/train:1", command=("python", "-c", "print('hi')")),
    )
    manifest = build_pytorchjob(spec)
    template = manifest["spec"]["pytorchReplicaSpecs"]["Master"]["template"]
    template.setdefault("metadata", {}).setdefault("annotations", {})[SIM_DURATION] = f"{run_seconds:g}s"
    return manifest


def api_client(kubeconfig: Path) -> client.ApiClient:
    """A Kubernetes API client of its own (own connection pool) for `kubeconfig`."""
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    return client.ApiClient(configuration)


def await_by_polling(kubeconfig: Path, manifest: dict[str, Any], interval: float) -> float:
    """The Training Operator SDK's way: create, GET every `interval` until a terminal condition, delete.

    Returns the monotonic time the terminal condition was seen.
    """
    name = manifest["metadata"]["name"]
    group, version, plural = PYTORCHJOB.group, PYTORCHJOB.version, PYTORCHJOB.plural
    with api_client(kubeconfig) as api:
        custom = client.CustomObjectsApi(api)
        custom.create_namespaced_custom_object(group, version, NAMESPACE, plural, manifest)
        while True:
            job = custom.get_namespaced_custom_object(group, version, NAMESPACE, plural, name)
            conditions = (job.get("status") or {}).get("conditions") or []
            if any(c["type"] in TERMINAL and c["status"] == "True" for c in conditions):
                break
            time.sleep(interval)  # the poller's own interval: what is measured
        seen = time.monotonic()
        custom.delete_namespaced_custom_object(group, version, NAMESPACE, plural, name)
    return seen


@dataclass
class TerminalObserver:
    """An admin watch on every PyTorchJob of the namespace: when each one's terminal condition arrived.

    The reference clock for "time from the job's terminal condition to the launcher's return":
    one watch, independent of the launchers, receiving the same event stream they do.
    """

    admin_kubeconfig: Path
    seen: dict[str, float] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _ready: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        """Begin watching (returns once the watch is open)."""
        self._thread = threading.Thread(target=self._run, daemon=True, name="terminal-observer")
        self._thread.start()
        self._ready.wait(30)

    def _run(self) -> None:
        with api_client(self.admin_kubeconfig) as api:
            custom = client.CustomObjectsApi(api)
            group, version, plural = PYTORCHJOB.group, PYTORCHJOB.version, PYTORCHJOB.plural
            listed = custom.list_namespaced_custom_object(group, version, NAMESPACE, plural)
            version_seen = listed["metadata"]["resourceVersion"]
            while not self._stop.is_set():
                stream = watch.Watch()
                self._ready.set()
                for event in stream.stream(custom.list_namespaced_custom_object, group, version, NAMESPACE, plural,
                                           resource_version=version_seen, timeout_seconds=5,
                                           allow_watch_bookmarks=True):  # fmt: skip
                    obj = event["object"]
                    version_seen = obj["metadata"]["resourceVersion"]
                    if event["type"] == "BOOKMARK":
                        continue  # carries only the resourceVersion
                    name = obj["metadata"]["name"]
                    conditions = (obj.get("status") or {}).get("conditions") or []
                    if name not in self.seen and any(
                        c["type"] in TERMINAL and c["status"] == "True" for c in conditions
                    ):
                        self.seen[name] = time.monotonic()
                    if self._stop.is_set():
                        break

    def stop(self) -> None:
        """End the watch."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(15)


def audit_requests(cluster: Cluster, users: set[str]) -> Counter[str]:
    """Requests (`verb resource[/sub]`) of `users` in the audit log, by kind, and how many were throttled."""
    counts: Counter[str] = Counter()
    # The API server rotates its audit log (100 MB a file under kwokctl): read the rotated files too.
    files = [*sorted(cluster.audit_log.parent.glob("audit-*.log")), cluster.audit_log]
    for line in (line for path in files for line in path.read_text().splitlines()):
        event = json.loads(line)
        if event.get("stage") != "ResponseComplete" or event.get("user", {}).get("username") not in users:
            continue
        ref = event.get("objectRef") or {}
        resource = ref.get("resource", event.get("requestURI", "?"))
        if ref.get("subresource"):
            resource += "/" + ref["subresource"]
        counts[f"{event['verb']} {resource}"] += 1
        if (event.get("responseStatus") or {}).get("code") == 429:
            counts["of which throttled (429)"] += 1
    return counts


def apiserver_pid() -> int:
    """The kube-apiserver process of the e2e cluster."""
    done = subprocess.run(["pgrep", "-f", "kube-apiserver"], capture_output=True, text=True, check=False)
    pids = [int(p) for p in done.stdout.split()]
    own = [p for p in pids if "kubetrain" in Path(f"/proc/{p}/cmdline").read_text(errors="replace")]
    if not own:
        raise RuntimeError("no kube-apiserver of the kubetrain cluster is running")
    return own[0]


@dataclass
class ProcessSampler:
    """CPU seconds and peak resident memory of one process (the API server), sampled every 0.5 s."""

    pid: int
    peak_rss_mib: float = 0.0
    cpu_start: float = 0.0
    cpu_end: float = 0.0
    _stop: threading.Event = field(default_factory=threading.Event)

    def _cpu(self) -> float:
        return cpu_seconds(read_stat(str(self.pid))[1])

    def _rss(self) -> float:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    @contextmanager
    def sampling(self) -> Iterator[ProcessSampler]:
        """Sample while the block runs."""
        self.cpu_start = self._cpu()
        thread = threading.Thread(target=self._loop, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            thread.join(5)
            self.cpu_end = self._cpu()

    def _loop(self) -> None:
        while not self._stop.wait(0.5):
            self.peak_rss_mib = max(self.peak_rss_mib, self._rss())


def open_watches(admin_kubeconfig: Path) -> float:
    """The API server's open WATCH requests now (`apiserver_longrunning_requests{verb="WATCH"}`)."""
    with api_client(admin_kubeconfig) as api:
        text = api.call_api("/metrics", "GET", _preload_content=False, auth_settings=["BearerToken"])[0].data.decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith("apiserver_longrunning_requests{") and 'verb="WATCH"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def cleanup(cluster: Cluster) -> None:
    """Delete every PyTorchJob left in the namespace (a benchmark that was interrupted)."""
    cluster.kubectl("delete", "pytorchjobs.kubeflow.org", "--all", "-n", NAMESPACE, "--wait=false")


def dump(path: Path, data: Any) -> None:
    """Write a benchmark's raw results (YAML) for the record."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
