"""Pieces of the Kubernetes backend that need no server: names, configuration, retries, pod reading."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from kubernetes.client.exceptions import ApiException
from kubernetes.config import incluster_config

from kubetrain.backends.base import JobRef
from kubetrain.backends.kubernetes.config import (
    JOB_NAME_MAX_LENGTH,
    connect,
    job_name_for_task,
    launcher_pod_from_env,
)
from kubetrain.backends.kubernetes.objects import pod_info, pod_selector
from kubetrain.backends.kubernetes.retry import Retrier, RetryPolicy, is_transient, retry_after_seconds
from kubetrain.errors import BackendError, InvalidInputError
from kubetrain.manifests.kinds import JOBSET, MPIJOB, PYTORCHJOB, JobKind
from kubetrain.names import is_dns1035_label
from tests.fake_apiserver import make_pod

# -- names -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", [PYTORCHJOB, MPIJOB, JOBSET], ids=lambda k: k.kind)
def test_job_name_is_stable_per_task_distinct_per_run_and_short_enough(kind: JobKind) -> None:
    long_prefix = "Very_Long Prefix " * 10
    a = job_name_for_task(kind, long_prefix, run_id="run-1", task_id="task-1")
    assert a == job_name_for_task(kind, long_prefix, run_id="run-1", task_id="task-1")
    assert a != job_name_for_task(kind, long_prefix, run_id="run-2", task_id="task-1")
    assert a != job_name_for_task(kind, long_prefix, run_id="run-1", task_id="task-2")
    assert is_dns1035_label(a)
    limit = JOB_NAME_MAX_LENGTH[kind.kind]
    assert len(a) <= limit
    # Every name the operators derive from it fits a DNS label too.
    derived = {
        "PyTorchJob": [f"{a}-worker-99999"],
        "MPIJob": [f"{a}-worker-99999", f"{a}-launcher"],
        "JobSet": [f"{a}-worker-0-9999-abcde", f"{a}-ps-999-0-abcde"],
    }[kind.kind]
    assert all(len(n) <= 63 for n in derived), derived


def test_job_name_reads_the_ids_from_the_environment_or_refuses() -> None:
    env = {"KUBETRAIN_KFP_RUN_ID": "r", "KUBETRAIN_KFP_TASK_ID": "t"}
    assert job_name_for_task("PyTorchJob", "mnist", environ=env) == job_name_for_task(
        "PyTorchJob", "mnist", run_id="r", task_id="t"
    )
    with pytest.raises(InvalidInputError, match="PIPELINE_TASK_ID_PLACEHOLDER"):
        job_name_for_task("PyTorchJob", "mnist", environ={})
    with pytest.raises(InvalidInputError, match="TFJob"):
        job_name_for_task("TFJob", "mnist", run_id="r", task_id="t")


def test_owner_reference_needs_the_downward_api(tmp_path: Path) -> None:
    pod = launcher_pod_from_env({"POD_NAME": "step-1", "POD_UID": "u-1", "POD_NAMESPACE": "team-a"})
    ref = pod.owner_reference()
    assert (ref["kind"], ref["name"], ref["uid"], ref["blockOwnerDeletion"]) == ("Pod", "step-1", "u-1", False)
    assert pod.namespace == "team-a"
    sa_namespace = tmp_path / "namespace"
    sa_namespace.write_text("team-b")
    assert launcher_pod_from_env({"POD_NAME": "s", "POD_UID": "u"}, namespace_file=sa_namespace).namespace == "team-b"
    with pytest.raises(InvalidInputError, match="POD_UID"):
        launcher_pod_from_env({"POD_NAME": "step-1", "POD_NAMESPACE": "x"})
    with pytest.raises(InvalidInputError, match="POD_NAMESPACE"):
        launcher_pod_from_env({"POD_NAME": "s", "POD_UID": "u"}, namespace_file=tmp_path / "absent")


# -- configuration ------------------------------------------------------------------------------------


def test_in_cluster_config_and_namespace_from_the_service_account(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    token, cert, namespace = tmp_path / "token", tmp_path / "ca.crt", tmp_path / "namespace"
    token.write_text("secret-token")
    cert.write_text("not checked until a request is made")
    namespace.write_text("team-b\n")
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(token))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(cert))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    conn = connect(namespace_file=namespace)
    assert conn.in_cluster
    assert conn.namespace == "team-b"
    assert conn.api_client.configuration.host == "https://10.0.0.1:443"
    explicit = connect(namespace="explicit", namespace_file=namespace)
    # The job goes where asked; the pod still belongs where it runs (asked about before a job elsewhere).
    assert (explicit.namespace, explicit.home_namespace) == ("explicit", "team-b")


def test_kubeconfig_context_namespace_and_a_missing_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'http://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u, namespace: team-c}}]\n"
    )
    conn = connect(kubeconfig=str(kubeconfig))
    assert (conn.in_cluster, conn.namespace, conn.home_namespace) == (False, "team-c", "team-c")
    assert connect(kubeconfig=str(kubeconfig), namespace="team-d").home_namespace == "team-c"
    with pytest.raises(BackendError, match="no usable Kubernetes configuration"):
        connect(kubeconfig=str(tmp_path / "missing"))


# -- retries ------------------------------------------------------------------------------------------


def test_backoff_grows_with_jitter_and_honours_retry_after() -> None:
    policy = RetryPolicy(initial_delay_seconds=1.0, max_delay_seconds=8.0, rng=random.Random(7))
    for attempt, ceiling in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (9, 8.0)]:
        delays = {policy.delay(attempt) for _ in range(20)}
        assert all(ceiling / 2 <= d <= ceiling for d in delays)
        assert len(delays) > 1, "jittered"
    honoured = {policy.delay(1, retry_after=4.0) for _ in range(20)}
    assert all(4.0 <= d <= 5.0 for d in honoured), "never sooner than asked, at most a quarter later"
    assert len(honoured) > 1, "a fleet told the same Retry-After does not come back in lock-step"
    assert policy.delay(1, retry_after=1e6) == policy.max_retry_after_seconds


def test_what_is_transient() -> None:
    assert is_transient(ApiException(status=503))
    assert is_transient(ApiException(status=429))
    assert is_transient(ConnectionResetError())
    assert not is_transient(ApiException(status=403))
    assert not is_transient(ApiException(status=409))
    throttled = ApiException(status=429)
    throttled.headers = {"Retry-After": "2"}
    assert retry_after_seconds(throttled) == 2.0


def test_retrier_gives_up_with_a_backend_error_after_the_limit() -> None:
    slept: list[float] = []
    retrier = Retrier(RetryPolicy(attempts=3, initial_delay_seconds=0.5, sleep=slept.append, rng=random.Random(1)))
    calls: list[int] = []

    def flaky() -> str:
        calls.append(1)
        raise ApiException(status=500, reason="Internal Server Error")

    with pytest.raises(BackendError, match=r"create X: the Kubernetes API kept failing \(3 attempts\)"):
        retrier.call("create X", flaky)
    assert len(calls) == 3 and len(slept) == 2

    def forbidden() -> str:
        raise ApiException(status=403)

    with pytest.raises(ApiException):
        retrier.call("get X", forbidden)


def _throttled(retry_after: str) -> ApiException:
    error = ApiException(status=429, reason="Too Many Requests")
    error.headers = {"Retry-After": retry_after}
    return error


def test_throttling_spends_its_own_budget_not_the_attempts() -> None:
    """A 429 is the server asking to wait: ten in a row do not exhaust three attempts."""
    slept: list[float] = []
    retrier = Retrier(RetryPolicy(attempts=3, sleep=slept.append, rng=random.Random(2), max_throttled_seconds=100))
    replies = [_throttled("2")] * 10

    def throttled_ten_times() -> str:
        if replies:
            raise replies.pop()
        return "deleted"

    assert retrier.call("delete X", throttled_ten_times) == "deleted"
    assert len(slept) == 10 and all(2.0 <= s <= 2.5 for s in slept)


def test_throttling_past_its_budget_is_a_backend_error_naming_it() -> None:
    slept: list[float] = []
    retrier = Retrier(RetryPolicy(sleep=slept.append, rng=random.Random(3), max_throttled_seconds=30))

    def always_throttled() -> str:
        raise _throttled("10")

    with pytest.raises(BackendError, match=r"delete X: the API server kept throttling this client \(HTTP 429\)"):
        retrier.call("delete X", always_throttled)
    assert sum(slept) <= 30


# -- pods ----------------------------------------------------------------------------------------------


def test_pod_reasons_containers_and_replicas() -> None:
    pending = pod_info(PYTORCHJOB, make_pod("j", "ns", kind=PYTORCHJOB, replica_type="Worker", index=3,
                                            waiting="ImagePullBackOff", waiting_message="no such image",
                                            sidecar=True))  # fmt: skip
    assert (pending.replica_type, pending.index, pending.container) == ("Worker", 3, "pytorch")
    assert (pending.phase, pending.reason, pending.message) == ("Pending", "ImagePullBackOff", "no such image")
    unschedulable = pod_info(PYTORCHJOB, make_pod("j", "ns", kind=PYTORCHJOB, replica_type="Master",
                                                  unschedulable="0/3 nodes"))  # fmt: skip
    assert (unschedulable.reason, unschedulable.message) == ("Unschedulable", "0/3 nodes")
    crashed = pod_info(PYTORCHJOB, make_pod("j", "ns", kind=PYTORCHJOB, replica_type="Master", phase="Running",
                                            restarts=2, last_exit_code=137))  # fmt: skip
    assert (crashed.restart_count, crashed.exit_code) == (2, 137)
    failed = pod_info(MPIJOB, make_pod("m", "ns", kind=MPIJOB, replica_type="Launcher", phase="Failed",
                                       exit_code=1, container="mpi"))  # fmt: skip
    assert (failed.replica_type, failed.reason, failed.exit_code, failed.container) == ("Launcher", "Error", 1, "mpi")
    ps = pod_info(JOBSET, make_pod("s", "ns", kind=JOBSET, replica_type="worker", index=2, container="ps"))
    assert (ps.replica_type, ps.index) == ("worker", 2)


def test_pod_selectors_per_kind() -> None:
    assert pod_selector(JobRef(PYTORCHJOB, "a", "ns")) == "training.kubeflow.org/job-name=a"
    assert pod_selector(JobRef(MPIJOB, "b", "ns")) == "training.kubeflow.org/job-name=b"
    assert pod_selector(JobRef(JOBSET, "c", "ns")) == "jobset.sigs.k8s.io/jobset-name=c"
