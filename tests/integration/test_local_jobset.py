"""JobSets on the local backend with real processes: start-up order by readiness, success and failure policies."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from kubetrain.backends.local.backend import LocalBackend
from kubetrain.manifests import build_ps_jobset
from kubetrain.specs import JobMeta, PSJobSpec
from kubetrain.specs.common import ReplicaSpec, RunPolicy, Workspace
from kubetrain.status import JobPhase, parse_job_status
from tests.integration.local_jobs import _follow, _pids_of, _wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

CLAIM = "work"


def _program(backend: LocalBackend, name: str, source: str) -> str:
    (backend.claim_dir(CLAIM) / name).write_text(textwrap.dedent(source))
    return f"/workspace/{name}"


def _rjob(
    name: str,
    command: list[str],
    *,
    replicas: int = 1,
    pods: int = 1,
    env: list[dict[str, Any]] | None = None,
    probe_port: int | None = None,
    depends_on: str | None = None,
    backoff_limit: int = 0,
    deadline: int | None = None,
) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "main",
        "image": "registry.example/js:1",
        "command": command,
        "env": [{"name": "WORK", "value": "/workspace"}, *(env or [])],
        "volumeMounts": [{"name": "work", "mountPath": "/workspace"}],
    }
    if probe_port is not None:
        container["readinessProbe"] = {"tcpSocket": {"port": probe_port}, "periodSeconds": 1}
    job: dict[str, Any] = {
        "parallelism": pods,
        "completions": pods,
        "backoffLimit": backoff_limit,
        "template": {
            "spec": {
                "restartPolicy": "OnFailure",
                "containers": [container],
                "volumes": [{"name": "work", "persistentVolumeClaim": {"claimName": CLAIM}}],
            }
        },
    }
    if deadline is not None:
        job["activeDeadlineSeconds"] = deadline
    out: dict[str, Any] = {"name": name, "replicas": replicas, "template": {"spec": job}}
    if depends_on:
        out["dependsOn"] = [{"name": depends_on, "status": "Ready"}]
    return out


def _jobset(name: str, rjobs: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {"replicatedJobs": rjobs, **spec},
    }


SERVER = """
    import json, os, pathlib, socket, sys
    work = pathlib.Path(os.environ["WORK"])
    host, port = os.environ["LISTEN"].rsplit(":", 1)
    # Who was reachable when this replica started: its start must wait for its dependencies' readiness.
    reachable = {}
    for peer in filter(None, os.environ.get("NEEDS", "").split(",")):
        h, p = peer.rsplit(":", 1)
        try:
            socket.create_connection((h, int(p)), timeout=2).close()
            reachable[peer] = True
        except OSError:
            reachable[peer] = False
    record = {k: os.environ.get(k) for k in ("HOSTNAME", "JOB_COMPLETION_INDEX", "INDEX", "POD_IP", "KUBETRAIN_BIND_ADDRESS")}
    record["reachable"] = reachable
    (work / f"{os.environ['HOSTNAME']}.json").write_text(json.dumps(record))
    s = socket.socket()
    s.bind((host, int(port)))
    s.listen()
    # Count clients that say something; readiness probes and peer checks connect and close silently.
    clients = 0
    while clients < int(sys.argv[1]):
        conn = s.accept()[0]
        clients += bool(conn.recv(16))
        conn.close()
"""

CLIENT = """
    import json, os, pathlib, socket
    work = pathlib.Path(os.environ["WORK"])
    reachable = {}
    for peer in os.environ["NEEDS"].split(","):
        h, p = peer.rsplit(":", 1)
        try:
            with socket.create_connection((h, int(p)), timeout=2) as conn:
                conn.sendall(b"hi")
            reachable[peer] = True
        except OSError:
            reachable[peer] = False
    record = {"JOB_COMPLETION_INDEX": os.environ["JOB_COMPLETION_INDEX"], "reachable": reachable}
    (work / f"{os.environ['HOSTNAME']}.json").write_text(json.dumps(record))
"""

INDEX = {"name": "INDEX", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['jobset.sigs.k8s.io/job-index']"}}}
POD_IP = {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}


def test_depends_on_waits_for_tcp_readiness_and_hosts_resolve(backend: LocalBackend) -> None:
    server = _program(backend, "server.py", SERVER)
    client = _program(backend, "client.py", CLIENT)
    master = "js-master-0-0.js:7001"
    ps = "js-ps-0-0.js.default.svc.cluster.local:7002,js-ps-1-0.js:7002"
    manifest = _jobset(
        "js",
        [
            # Each server accepts one connection per peer check and one per client.
            _rjob("master", ["python", server, "2"], env=[{"name": "LISTEN", "value": master}], probe_port=7001),
            _rjob(
                "ps",
                ["python", server, "2"],
                replicas=2,
                env=[
                    INDEX,
                    POD_IP,
                    {"name": "LISTEN", "value": "js-ps-$(INDEX)-0.js:7002"},
                    {"name": "NEEDS", "value": master},
                ],
                probe_port=7002,
                depends_on="master",
            ),
            _rjob(
                "worker",
                ["python", client],
                pods=2,
                env=[{"name": "NEEDS", "value": f"{master},{ps}"}],
                depends_on="ps",
            ),
        ],
        successPolicy={"operator": "All", "targetReplicatedJobs": ["master"]},
    )
    ref = backend.submit(manifest)
    status, _ = _follow(backend, ref)
    assert status.phase is JobPhase.SUCCEEDED, status.message
    assert (status.reason, status.message) == ("AllJobsCompleted", "jobset completed successfully")
    claim = backend.claim_dir(CLAIM)
    for i in range(2):
        ps_record = json.loads((claim / f"js-ps-{i}-0.json").read_text())
        assert list(ps_record["reachable"].values()) == [True]  # started only once the master was ready
        assert (ps_record["INDEX"], ps_record["JOB_COMPLETION_INDEX"]) == (str(i), "0")
        assert ps_record["POD_IP"] == ps_record["KUBETRAIN_BIND_ADDRESS"] == backend.pod_address(ref, f"js-ps-{i}-0")
    for p in range(2):
        worker = json.loads((claim / f"js-worker-0-{p}.json").read_text())
        assert worker["JOB_COMPLETION_INDEX"] == str(p)
        assert list(worker["reachable"].values()) == [True] * 3, worker  # master and both ps were ready first
    assert {pod.replica_type for pod in backend.pods(ref)} == {"master", "ps", "worker"}


def test_in_order_startup_sets_its_conditions(backend: LocalBackend) -> None:
    server = _program(backend, "server.py", SERVER)
    client = _program(backend, "client.py", CLIENT)
    first = "io-first-0-0.io:7003"
    manifest = _jobset(
        "io",
        [
            _rjob("first", ["python", server, "1"], env=[{"name": "LISTEN", "value": first}], probe_port=7003),
            _rjob("second", ["python", client], env=[{"name": "NEEDS", "value": first}]),
        ],
        startupPolicy={"startupPolicyOrder": "InOrder"},
    )
    ref = backend.submit(manifest)
    status, _ = _follow(backend, ref)
    seen = [(c.type, c.status) for c in status.conditions]
    assert status.phase is JobPhase.SUCCEEDED
    assert ("StartupPolicyCompleted", "True") in seen
    assert ("StartupPolicyInProgress", "False") in seen
    record = json.loads((backend.claim_dir(CLAIM) / "io-second-0-0.json").read_text())
    assert list(record["reachable"].values()) == [True]


def test_failed_jobs_restart_the_set_until_max_restarts(backend: LocalBackend) -> None:
    attempt = {
        "name": "ATTEMPT",
        "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['jobset.sigs.k8s.io/restart-attempt']"}},
    }
    crash = ["sh", "-c", "touch /workspace/attempt-$(ATTEMPT); exit 2"]
    manifest = _jobset(
        "again",
        [_rjob("worker", crash, env=[attempt])],
        failurePolicy={"maxRestarts": 1},
    )
    ref = backend.submit(manifest)
    status, _ = _follow(backend, ref)
    assert status.phase is JobPhase.FAILED
    assert status.reason == "ReachedMaxRestarts"
    assert status.message.startswith(
        "jobset failed due to reaching max number of restarts (first failed job: again-worker-0)"
    )
    assert "BackoffLimitExceeded" in status.message and "exited with code 2" in status.message
    assert status.restarts == 1
    assert sorted(p.name for p in backend.claim_dir(CLAIM).glob("attempt-*")) == ["attempt-0", "attempt-1"]


def test_without_a_failure_policy_one_failed_job_fails_the_set(backend: LocalBackend) -> None:
    ref = backend.submit(_jobset("once", [_rjob("worker", ["python", "-c", "raise SystemExit(5)"])]))
    status, _ = _follow(backend, ref)
    assert (status.phase, status.reason) == (JobPhase.FAILED, "FailedJobs")
    assert status.restarts == 0


def test_a_child_jobs_backoff_limit_absorbs_a_failure(backend: LocalBackend) -> None:
    flaky = ["sh", "-c", "test -e /workspace/flag && exit 0; touch /workspace/flag; exit 1"]
    ref = backend.submit(_jobset("flaky", [_rjob("worker", flaky, backoff_limit=1)], failurePolicy={"maxRestarts": 3}))
    status, _ = _follow(backend, ref)
    assert status.phase is JobPhase.SUCCEEDED
    assert status.restarts == 0
    assert next(p for p in backend.pods(ref)).restart_count == 1  # restarted in place (OnFailure)


def test_a_pod_failure_policy_fails_the_job_at_once_on_its_exit_code_and_counts_others(backend: LocalBackend) -> None:
    # First an exit 1 (counted, the pod replaced), then exit 10, which the rule makes final.
    two_exits = ["sh", "-c", "test -e /workspace/once && exit 10; touch /workspace/once; exit 1"]
    rjob = _rjob("master", two_exits, backoff_limit=5)
    job = rjob["template"]["spec"]
    job["template"]["spec"]["restartPolicy"] = "Never"
    job["podFailurePolicy"] = {"rules": [
        {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [10]}},
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
    ]}  # fmt: skip
    rule = {"name": "MasterFailureIsFinal", "action": "FailJobSet", "targetReplicatedJobs": ["master"]}
    ref = backend.submit(_jobset("final", [rjob], failurePolicy={"maxRestarts": 3, "rules": [rule]}))
    status, _ = _follow(backend, ref, timeout=60)
    assert (status.phase, status.reason) == (JobPhase.FAILED, "FailJobSetFailurePolicyAction")
    assert "PodFailurePolicy: Container main for pod final-master-0-0" in status.message, status.message
    assert "failed with exit code 10 matching FailJob rule at index 0" in status.message
    assert status.restarts == 0
    assert [p.exit_code for p in backend.pods(ref)] == [1, 10]  # two pods, not five restarts


def test_a_deadline_rule_fails_the_set_without_restarts(backend: LocalBackend) -> None:
    sleeper = _rjob("master", ["python", "-c", "import time; time.sleep(600)"], deadline=1)
    rule = {"name": "DeadlineIsFinal", "action": "FailJobSet", "onJobFailureReasons": ["DeadlineExceeded"]}
    ref = backend.submit(_jobset("late", [sleeper], failurePolicy={"maxRestarts": 3, "rules": [rule]}))
    status, _ = _follow(backend, ref, timeout=30)
    assert status.phase is JobPhase.FAILED
    assert status.reason == "FailJobSetFailurePolicyAction"
    assert "DeadlineExceeded: Job was active longer than specified deadline" in status.message
    assert status.restarts == 0


def test_suspend_and_resume_a_jobset(backend: LocalBackend, tmp_path: Path) -> None:
    gate = ["sh", "-c", "while [ ! -e /workspace/gate ]; do sleep 0.05; done"]
    ref = backend.submit(_jobset("sus", [_rjob("worker", gate, pods=2)]))
    _wait_for(lambda: len(_pids_of(tmp_path)) == 2, what="two pods")
    backend.suspend(ref)
    _wait_for(lambda: parse_job_status(backend.get(ref)).phase is JobPhase.SUSPENDED, what="Suspended")
    _wait_for(lambda: _pids_of(tmp_path) == [], what="the pods to stop")
    backend.resume(ref)
    _wait_for(lambda: len(_pids_of(tmp_path)) == 2, what="two pods again")
    (backend.claim_dir(CLAIM) / "gate").touch()
    status, _ = _follow(backend, ref)
    assert status.phase is JobPhase.SUCCEEDED


GRPC_SERVER = """
    import os, pathlib, sys, time
    from concurrent import futures
    import grpc
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc
    work = pathlib.Path(os.environ["KUBETRAIN_WORKSPACE"])
    role, port = sys.argv[1], sys.argv[2]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    server.add_insecure_port(f"{os.environ['KUBETRAIN_BIND_ADDRESS']}:{port}")
    server.start()
    (work / f"{role}-{os.environ['KUBETRAIN_PS_INDEX']}.started").write_text(os.environ["KUBETRAIN_PS_ADDRS"])
    servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    workers = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    while role == "ps" or len(list(work.glob("done-*"))) < workers:
        time.sleep(0.05)
    server.stop(0)
"""

GRPC_WORKER = """
    import os, pathlib
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    work = pathlib.Path(os.environ["KUBETRAIN_WORKSPACE"])
    for address in [os.environ["KUBETRAIN_PS_MASTER"], *os.environ["KUBETRAIN_PS_ADDRS"].split(",")]:
        with grpc.insecure_channel(address) as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING, address
    (work / f"done-{os.environ['JOB_COMPLETION_INDEX']}").write_text("")
"""


def test_the_builders_ps_jobset_starts_in_order_on_grpc_readiness(backend: LocalBackend) -> None:
    pytest.importorskip("grpc_health.v1", reason="the ps extra (grpcio-health-checking) is part of make setup")
    server = _program(backend, "grpc_server.py", GRPC_SERVER)
    worker = _program(backend, "grpc_worker.py", GRPC_WORKER)
    spec = PSJobSpec(
        meta=JobMeta(name="psj"),
        master=ReplicaSpec(image="registry.example/ps:1", command=("python", server, "master", "50051", "2")),
        ps=ReplicaSpec(image="registry.example/ps:1", command=("python", server, "ps", "50052"), replicas=2),
        worker=ReplicaSpec(image="registry.example/ps:1", command=("python", worker), replicas=2),
        run_policy=RunPolicy(active_deadline_seconds=120),
        workspace=Workspace(claim_name=CLAIM),
    )
    ref = backend.submit(build_ps_jobset(spec))
    status, _ = _follow(backend, ref)
    assert status.phase is JobPhase.SUCCEEDED, status.message
    claim = backend.claim_dir(CLAIM)
    assert sorted(p.name for p in claim.glob("*.started")) == ["master-0.started", "ps-0.started", "ps-1.started"]
    # The servers' addresses as the workers saw them: each ps at its own loopback address, port kept.
    addresses = (claim / "ps-0.started").read_text().split(",")
    assert addresses == [f"{backend.pod_address(ref, f'psj-ps-{i}-0')}:50052" for i in range(2)]
    assert sorted(p.name for p in claim.glob("done-*")) == ["done-0", "done-1"]


def _workers_limited_per_index(command: list[str], pods: int) -> dict[str, Any]:
    """Workers as the PS JobSet runs them: restartPolicy Never, a limit of 1 failure per index, no
    failed index allowed (backoffLimitPerIndex 1, maxFailedIndexes 0; no Job-wide backoffLimit)."""
    rjob = _rjob("worker", command, pods=pods)
    job = rjob["template"]["spec"]
    del job["backoffLimit"]
    job.update({"completionMode": "Indexed", "backoffLimitPerIndex": 1, "maxFailedIndexes": 0})
    job["template"]["spec"]["restartPolicy"] = "Never"
    return rjob


def test_a_limit_per_index_replaces_each_failing_index_and_fails_the_job_once_one_index_exceeds_it(
    backend: LocalBackend,
) -> None:
    # Index 0 fails once and then trains; index 1 always fails: index 0's one failure is within its
    # own limit, index 1's second failure fails the Job at once.
    flaky_or_broken = ["sh", "-c", 'test "$JOB_COMPLETION_INDEX" = 0 && test -e /workspace/w0 && exit 0; '
                                   'touch /workspace/w$JOB_COMPLETION_INDEX; exit 3']  # fmt: skip
    ref = backend.submit(_jobset("perindex", [_workers_limited_per_index(flaky_or_broken, pods=2)]))
    status, _ = _follow(backend, ref, timeout=60)
    assert (status.phase, status.reason) == (JobPhase.FAILED, "FailedJobs"), status
    assert "MaxFailedIndexesExceeded" in status.message, status.message
    exits = sorted((p.name.rsplit("-", 2)[-2], p.exit_code) for p in backend.pods(ref))
    assert [code for index, code in exits if index == "1"] == [3, 3]  # replaced once, then failed for good


def test_a_limit_per_index_lets_every_index_fail_its_share_and_the_job_still_succeed(backend: LocalBackend) -> None:
    # Each index fails once (each within its own limit of 1), which a backoffLimit of 1 over the
    # whole Job would not survive.
    once_each = ["sh", "-c", "test -e /workspace/i$JOB_COMPLETION_INDEX && exit 0; "
                             "touch /workspace/i$JOB_COMPLETION_INDEX; exit 3"]  # fmt: skip
    ref = backend.submit(_jobset("eachonce", [_workers_limited_per_index(once_each, pods=3)]))
    status, _ = _follow(backend, ref, timeout=60)
    assert status.phase is JobPhase.SUCCEEDED, status
    assert sorted(-1 if p.exit_code is None else p.exit_code for p in backend.pods(ref)) == [0, 0, 0, 3, 3, 3]
