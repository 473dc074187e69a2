"""The reaper (kubetrain.reaper) against the stand-in API server (tests/fake_apiserver.py; not a cluster).

A job submitted from a KFP step names its step pod (KFP_POD_NAME/KFP_POD_UID in the step); the
reaper deletes it, with its uid as precondition, once the pod has ended (its `main` container
terminated: Argo keeps the pod), is gone, or was replaced by another pod of that name, and leaves
every other job alone. deploy/reaper.yaml's Role is exactly the calls it makes.
"""

from __future__ import annotations

import copy
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubetrain.backends.kubernetes import KubernetesBackend, RetryPolicy
from kubetrain.backends.kubernetes.backend import STEP_POD_NAME_ANNOTATION, STEP_POD_UID_ANNOTATION
from kubetrain.backends.kubernetes.steps import pod_end
from kubetrain.manifests.kinds import JOBSET, MPIJOB, PYTORCHJOB, TRAINJOB, JobKind
from kubetrain.presets import LAUNCHER_IMAGE
from kubetrain.reaper import Reaper
from tests.conftest import REPO_ROOT
from tests.fake_apiserver import FakeApiServer, now_rfc3339
from tests.integration.k8s_launcher_env import NS, mpi_manifest, ps_manifest, pytorch_manifest, trainjob_manifest

pytestmark = pytest.mark.timeout(120)

REAPER_YAML = REPO_ROOT / "deploy" / "reaper.yaml"
STEP = "mnist-pytorch-abc-system-container-impl-123"
KINDS: list[tuple[JobKind, Callable[[], dict[str, Any]], str]] = [
    (PYTORCHJOB, pytorch_manifest, "train"),
    (MPIJOB, mpi_manifest, "mpi"),
    (JOBSET, ps_manifest, "ps"),
    (TRAINJOB, trainjob_manifest, "tj"),
]


def step_pod(*, uid: str, main: str = "running", name: str = STEP) -> dict[str, Any]:
    """A KFP step pod as Argo leaves it: `main` (the step's command) and `wait` (Argo's)."""
    states = {"running": {"running": {"startedAt": now_rfc3339()}},
              "terminated": {"terminated": {"exitCode": 143, "reason": "Error"}}}  # fmt: skip
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "uid": uid, "labels": {"workflows.argoproj.io/workflow": "wf"}},
        "spec": {"containers": [{"name": "wait", "image": "argoexec"}, {"name": "main", "image": "launcher"}]},
        # Argo keeps a terminated step's pod: Running while `wait` saves the outputs, then Failed.
        "status": {"phase": "Running", "containerStatuses": [
            {"name": "wait", "state": states["running"], "restartCount": 0, "ready": True, "image": "argoexec",
             "imageID": ""},
            {"name": "main", "state": states[main], "restartCount": 0, "ready": main == "running", "image": "launcher",
             "imageID": ""},
        ]},
    }  # fmt: skip


class Cluster:
    """The stand-in, a kubeconfig for it, and a backend as a KFP step's launcher has it."""

    def __init__(self, api: FakeApiServer, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.api = api
        self.kubeconfig = kubeconfig
        self.monkeypatch = monkeypatch
        self.step_uid = str(uuid.uuid4())
        api.put_pod(step_pod(uid=self.step_uid))

    def backend(self) -> KubernetesBackend:
        return KubernetesBackend(kubeconfig=str(self.kubeconfig), retry=RetryPolicy(attempts=3,
                                 initial_delay_seconds=0.01, max_delay_seconds=0.05))  # fmt: skip

    def submit_from_step(self, manifest: dict[str, Any]) -> str:
        """Submit as the launcher in the step pod does (KFP's env); the job's uid."""
        self.monkeypatch.setenv("KFP_POD_NAME", STEP)
        self.monkeypatch.setenv("KFP_POD_UID", self.step_uid)
        backend = self.backend()
        try:
            ref = backend.submit(manifest)
        finally:
            backend.close()
            self.monkeypatch.delenv("KFP_POD_NAME")
            self.monkeypatch.delenv("KFP_POD_UID")
        assert ref.uid
        return ref.uid

    def sweep(self) -> list[str]:
        backend = self.backend()
        try:
            return [str(r) for r in Reaper(backend, grace_seconds=0).sweep()]
        finally:
            backend.close()

    def jobs(self) -> set[tuple[str, str]]:
        with self.api.cv:
            return {(plural, name) for plural, _, name in self.api.objects}


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    monkeypatch.delenv("KFP_POD_NAME", raising=False)
    monkeypatch.delenv("KFP_POD_UID", raising=False)
    monkeypatch.setenv("POD_NAMESPACE", NS)  # the step pod's namespace, as the downward API gives it
    with FakeApiServer() as api:
        yield Cluster(api, api.write_kubeconfig(tmp_path / "kubeconfig", namespace=NS), monkeypatch)


def end_main(c: Cluster) -> None:
    c.api.put_pod(step_pod(uid=c.step_uid, main="terminated"))


def delete_pod(c: Cluster) -> None:
    c.api.delete_pod(NS, STEP)


def replace_pod(c: Cluster) -> None:
    c.api.delete_pod(NS, STEP, graceful=False)
    c.api.put_pod(step_pod(uid=str(uuid.uuid4())))


@pytest.mark.parametrize("ending", [end_main, delete_pod, replace_pod], ids=lambda f: f.__name__)
@pytest.mark.parametrize(("kind", "build", "name"), KINDS, ids=[k.kind for k, _, _ in KINDS])
def test_the_job_of_an_ended_step_is_deleted_by_its_uid(
    cluster: Cluster, kind: JobKind, build: Callable[[], dict[str, Any]], name: str, ending: Callable[[Cluster], None]
) -> None:
    uid = cluster.submit_from_step(build())
    assert cluster.sweep() == []  # the step runs: nothing to do
    ending(cluster)
    [line] = cluster.sweep()
    assert line.startswith(f"deleted {kind.kind} {NS}/{name} (uid {uid}): the step")
    assert (kind.plural, name) not in cluster.jobs()
    [(plural, _, deleted, options)] = cluster.api.deletions
    assert (plural, deleted, options["preconditions"]) == (kind.plural, name, {"uid": uid})


def test_jobs_of_running_steps_and_jobs_from_a_shell_are_left_alone(cluster: Cluster) -> None:
    cluster.submit_from_step(pytorch_manifest())
    backend = cluster.backend()  # `kubetrain launch` from a shell: no KFP env, no step pod named
    try:
        backend.submit(pytorch_manifest(name="by-hand"))
    finally:
        backend.close()
    assert cluster.sweep() == []
    delete_pod(cluster)  # the step ended: its job goes, the one launched by hand stays
    assert len(cluster.sweep()) == 1
    assert cluster.jobs() == {("pytorchjobs", "by-hand")}


@pytest.mark.parametrize("settled", ["succeeded", "failed", "suspended"])
def test_a_finished_or_suspended_job_is_kept(cluster: Cluster, settled: str) -> None:
    """A failed job kept for debugging, a job suspended at its timeout, a job kept after success:
    nothing of them runs, and the step kept them on purpose."""
    cluster.submit_from_step(pytorch_manifest())
    if settled == "suspended":
        with cluster.api.cv:
            cluster.api.objects[("pytorchjobs", NS, "train")]["spec"]["runPolicy"]["suspend"] = True
    else:
        ctype = "Succeeded" if settled == "succeeded" else "Failed"
        cluster.api.set_conditions(PYTORCHJOB, NS, "train", (ctype, "True", f"PyTorchJob{ctype}", ""))
    end_main(cluster)
    assert cluster.sweep() == []
    assert cluster.jobs() == {("pytorchjobs", "train")}


def test_a_job_replaced_under_its_name_is_not_deleted(cluster: Cluster) -> None:
    """Between the reaper's list and its delete the job was replaced: the uid precondition spares the new one."""
    cluster.submit_from_step(pytorch_manifest())
    end_main(cluster)
    backend = cluster.backend()
    try:
        reaper = Reaper(backend, grace_seconds=0)
        jobs = reaper.steps.jobs

        def listed_then_replaced() -> Any:
            found = jobs()
            cluster.api.delete(PYTORCHJOB, NS, "train", {})
            code, _ = cluster.api.create(PYTORCHJOB, NS, copy.deepcopy(pytorch_manifest()), {})
            assert code == 201
            return found

        reaper.steps.jobs = listed_then_replaced  # type: ignore[method-assign]
        reaper.sweep()
    finally:
        backend.close()
    assert cluster.jobs() == {("pytorchjobs", "train")}
    [delete] = [r for r in cluster.api.requests if r.verb == "delete"]
    assert delete.body["preconditions"]["uid"] != cluster.api.objects[("pytorchjobs", NS, "train")]["metadata"]["uid"]


def test_a_retried_step_that_adopted_the_job_keeps_it(cluster: Cluster) -> None:
    """KFP retries the step: the new pod adopts the job and re-records itself, so the first pod's
    end does not reap the job the retry now follows."""
    cluster.submit_from_step(pytorch_manifest())
    end_main(cluster)
    retry_uid = str(uuid.uuid4())
    cluster.api.put_pod(step_pod(uid=retry_uid, name=f"{STEP}-retry"))
    cluster.monkeypatch.setenv("KFP_POD_NAME", f"{STEP}-retry")
    cluster.monkeypatch.setenv("KFP_POD_UID", retry_uid)
    backend = cluster.backend()
    try:
        backend.submit(pytorch_manifest())  # 409: this task's job, adopted
    finally:
        backend.close()
    annotations = cluster.api.objects[("pytorchjobs", NS, "train")]["metadata"]["annotations"]
    assert annotations[STEP_POD_NAME_ANNOTATION] == f"{STEP}-retry"
    assert annotations[STEP_POD_UID_ANNOTATION] == retry_uid
    assert cluster.sweep() == []
    assert cluster.jobs() == {("pytorchjobs", "train")}


def documents() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(REAPER_YAML.read_text()) if d]


def test_the_role_grants_exactly_the_calls_the_reaper_makes(cluster: Cluster) -> None:
    for _, build, _ in KINDS:
        cluster.submit_from_step(build())
    cluster.api.requests.clear()
    assert cluster.sweep() == []
    end_main(cluster)
    assert len(cluster.sweep()) == len(KINDS)
    [role] = [d for d in documents() if d["kind"] == "Role"]
    granted = {(verb, group, resource) for rule in role["rules"] for group in rule["apiGroups"]
               for resource in rule["resources"] for verb in rule["verbs"]}  # fmt: skip
    assert cluster.api.api_calls() == granted


def test_the_deployment_runs_the_reaper_as_its_service_account_under_restricted() -> None:
    docs = {d["kind"]: d for d in documents()}
    assert set(docs) == {"ServiceAccount", "Role", "RoleBinding", "Deployment"}
    binding = docs["RoleBinding"]
    assert binding["roleRef"]["name"] == docs["Role"]["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": docs["ServiceAccount"]["metadata"]["name"]}]
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == docs["ServiceAccount"]["metadata"]["name"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    [container] = pod["containers"]
    assert container["image"] == LAUNCHER_IMAGE
    assert container["command"][:3] == ["python", "-m", "kubetrain.reaper"]
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_a_job_is_deleted_one_grace_period_after_its_step_ended_unless_a_retry_adopts_it(cluster: Cluster) -> None:
    """Time for Argo's retry of the step to adopt the job: within the grace nothing is deleted; a
    retry that adopts it keeps it; a step that ends again waits out a fresh grace."""
    now = [0.0]
    cluster.submit_from_step(pytorch_manifest())
    end_main(cluster)
    backend = cluster.backend()
    try:
        reaper = Reaper(backend, grace_seconds=30, clock=lambda: now[0])
        assert reaper.sweep() == []  # the end is seen now
        now[0] = 29.0
        assert reaper.sweep() == []
        retry_uid = str(uuid.uuid4())
        cluster.api.put_pod(step_pod(uid=retry_uid, name=f"{STEP}-retry"))
        cluster.monkeypatch.setenv("KFP_POD_NAME", f"{STEP}-retry")
        cluster.monkeypatch.setenv("KFP_POD_UID", retry_uid)
        retry = cluster.backend()  # the retry's launcher, with its own step pod's env
        try:
            retry.submit(pytorch_manifest())  # 409: it adopts the job and re-records itself
        finally:
            retry.close()
        now[0] = 31.0
        assert reaper.sweep() == []
        cluster.api.put_pod(step_pod(uid=retry_uid, name=f"{STEP}-retry", main="terminated"))
        now[0] = 40.0
        assert reaper.sweep() == []  # the retry's end starts a fresh grace
        now[0] = 69.0
        assert reaper.sweep() == []
        now[0] = 71.0
        assert [r.job.ref.name for r in reaper.sweep()] == ["train"]
    finally:
        backend.close()
    assert cluster.jobs() == set()


def test_the_reaper_process_sweeps_until_sigterm(cluster: Cluster, tmp_path: Path) -> None:
    cluster.submit_from_step(pytorch_manifest())
    proc = subprocess.Popen(
        [sys.executable, "-m", "kubetrain.reaper", "--kubeconfig", str(cluster.kubeconfig), "--interval", "0.2",
         "--grace-seconds", "0"],
        stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT,
    )  # fmt: skip
    try:
        cluster.api.wait_request(lambda r: r.verb == "get" and r.resource == "pods", "a sweep", timeout=60)
        end_main(cluster)
        cluster.api.wait_until(lambda: ("pytorchjobs", "train") not in cluster.jobs(), "the reaper's delete", 60)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stderr
    assert f"deleted PyTorchJob {NS}/train" in stderr


def test_a_job_in_another_namespace_than_its_step_names_no_step_pod(cluster: Cluster) -> None:
    """The reaper looks for the step pod in the job's namespace: a job submitted elsewhere must not
    name a pod there (it would be reaped at once, or answer to a stranger's pod)."""
    cluster.monkeypatch.setenv("POD_NAMESPACE", "kubeflow")
    cluster.submit_from_step(pytorch_manifest())
    annotations = cluster.api.objects[("pytorchjobs", NS, "train")]["metadata"].get("annotations") or {}
    assert STEP_POD_NAME_ANNOTATION not in annotations and STEP_POD_UID_ANNOTATION not in annotations
    delete_pod(cluster)
    assert cluster.sweep() == []


@pytest.mark.parametrize(
    ("pod", "ended"),
    [
        (None, "the step pod is gone"),
        (step_pod(uid="u"), None),
        (step_pod(uid="other"), "the step pod was replaced (uid other, not u)"),
        (step_pod(uid="u", main="terminated"), "the step's main container has ended (exit 143)"),
        ({**step_pod(uid="u"), "status": {"phase": "Failed"}}, "the step pod has ended (Failed)"),
        (
            {**step_pod(uid="u"), "metadata": {"name": STEP, "uid": "u", "deletionTimestamp": "2026-01-01T00:00:00Z"}},
            "the step pod is being deleted",
        ),
    ],
    ids=["gone", "running", "replaced", "main-ended", "pod-failed", "being-deleted"],
)
def test_when_a_step_pod_counts_as_ended(pod: dict[str, Any] | None, ended: str | None) -> None:
    """Argo keeps a terminated step's pod (its `wait` container still runs while outputs are saved):
    the step container's own state decides, and a pod of the same name but another uid is another pod."""
    assert pod_end(pod, "u") == ended
