"""Elastic scheduling in real pods: a higher-priority pod preempts a parameter-server worker, or a server.

The kube-scheduler's own preemption, on the real node: the scenario's workers hold the node's
`kubetrain.io/e2e-slot`s (tests/cluster/preemption.py), and an "online" pod at a higher priority
asks for one. The scheduler must evict one worker; the master must hear it from its pod watch and
put that worker's tasks back at once; the worker's Job must not count it against backoffLimit;
the replacement pod must wait Pending until the online pod goes, then join; and the run must end
with every record trained once and the preemption in the step's log and metrics.

A server holds a shard of the model and runs above the workers (`kubetrain-ps-control`, 1000),
but work above that class preempts it all the same (docs/elastic.md): its Job makes a new pod,
which restores the shard from its checkpoint, and the master re-queues what the restart lost.

For comparison, an elastic DDP job (torchrun under the training-operator's elasticPolicy) loses a
worker the same way: the operator makes its pod again, torchrun's rendezvous takes it back in, and
training resumes from the newest checkpoint without a container restart against backoffLimit.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubetrain.data.dataset_format import read_dataset_info
from kubetrain.presets import image_ref
from kubetrain.ps.common.tasks import TRAIN, cut_split
from kubetrain.ps.master.state import OWNER_FILE
from tests.cluster import jobs, preemption, real_pods
from tests.cluster.real_pods import RealNode
from tools.cluster import node
from tools.cluster.controlplane import STATE, Cluster

pytestmark = pytest.mark.timeout(1800)
TARGET = 0.95
JOB = "ps-preempt"
WORKERS = f"jobset.sigs.k8s.io/jobset-name={JOB},jobset.sigs.k8s.io/replicatedjob-name=worker"
RJOB = "jobset.sigs.k8s.io/replicatedjob-name"
DDP_JOB_LABEL = "training.kubeflow.org/job-name"


@pytest.fixture(scope="module")
def real_ps(cluster: Cluster) -> RealNode:
    """The real node with the launcher and parameter-server images and the digits on its claim."""
    if not node.running(STATE):
        pytest.skip("no real node in this cluster (KUBETRAIN_REAL_NODE=0)")
    return real_pods.prepare(cluster, ["launcher", "ps"])


def _pods(real: RealNode, selector: str) -> list[dict[str, Any]]:
    pods: list[dict[str, Any]] = json.loads(real.kubectl("get", "pods", "-l", selector, "-o", "json"))["items"]
    return pods


def test_a_preempted_worker_gives_its_tasks_back_waits_for_room_and_nothing_is_lost(
    real_ps: RealNode, tmp_path: Path
) -> None:
    real_ps.fresh_run(JOB)
    real_ps.kubectl("delete", "pod", "online-preemptor", "--ignore-not-found", "--wait=true")
    preemption.advertise_slots(real_ps, 3)
    # min_workers = max_workers: training pauses while a worker is missing, so the job cannot end
    # before its preempted worker's replacement has waited for room and joined (no race with it).
    # 60 epochs (12 take about 20 s here): the online pod is placed well before the job could end.
    manifest = real_pods.render("psjob", JOB, "--min-workers", "3", "--max-workers", "3", "--ps-replicas", "2",
                                "--epochs", "60", "--cpu", "200m", "--memory", "1Gi")  # fmt: skip
    preemption.hold_slots(manifest, "worker")
    proc = jobs.launch(real_ps.cluster, manifest, tmp_path, "--start-timeout", "600", "--timeout", "1500",
                       "--delete-after", "never")  # fmt: skip
    state = real_ps.workspace / "runs" / JOB / "output" / "ps-state" / "master_state.json"

    def three_training() -> bool:
        # Every worker registered and training under way (not only their pods Running: a worker
        # preempted before it asked for work is a case of its own, test_elastic_worker_pods).
        try:
            book = json.loads(state.read_text())["book"]
        except (OSError, ValueError, KeyError):
            return False  # not written yet, or caught mid-replace
        alive = [w for w in book["workers"].values() if w[2]]
        return len(alive) == 3 and int(book["counters"].get("tasks_done", 0)) >= 5

    jobs.until("three workers training", three_training, 600)
    preemption.online_pod(real_ps, "online-preemptor", image=image_ref("launcher"))
    real_ps.wait_pod("online-preemptor", "Running", 120)

    def replacement_pending() -> dict[str, Any] | None:
        for pod in _pods(real_ps, WORKERS):
            conditions = {c["type"]: c for c in pod["status"].get("conditions", [])}
            scheduled = conditions.get("PodScheduled", {})
            if pod["status"].get("phase") == "Pending" and scheduled.get("reason") == "Unschedulable":
                return pod
        return None

    waiting = jobs.until("the preempted worker's replacement Pending, Unschedulable", replacement_pending, 120)
    assert preemption.SLOT in json.dumps(waiting["status"]["conditions"]), waiting["status"]
    # Room again: the online work is done; the replacement is placed and joins.
    real_ps.kubectl("delete", "pod", "online-preemptor", "--wait=false")

    def replacement_running() -> dict[str, Any] | None:
        # Read while the job runs (training waits for the third worker, so it cannot end first):
        # a JobSet that succeeds deletes its child Jobs still active, the workers' among them.
        if sum(p["status"].get("phase") == "Running" for p in _pods(real_ps, WORKERS)) < 3:
            return None
        job: dict[str, Any] = json.loads(real_ps.kubectl("get", "job", f"{JOB}-worker-0", "-o", "json"))
        return job

    worker_job = jobs.until("the replacement worker Running", replacement_running, 600)
    code, result, err = jobs.finish(proc, timeout=1600)
    assert code == 0, err[-4000:]
    assert result["phase"] == "Succeeded", result
    written = real_pods.metrics(real_ps, JOB)
    assert written["records_untrained"] == 0, written  # the master's audit: every record trained
    assert written["preemptions"] == 1, written
    assert written["max_workers_seen"] == 3, written
    assert written["test_accuracy"] >= TARGET, written
    lines = err.splitlines()
    said = [line for line in lines if " preempted (by " in line]
    assert said and "re-queued" in said[0], err[-4000:]
    assert any("waiting for workers: 2 of at least 3 here" in line for line in lines), err[-4000:]
    assert any("grew to 3 workers" in line and "joined" in line for line in lines), err[-4000:]
    # The preemption did not use up the workers' Job's retries (podFailurePolicy: Ignore).
    assert not worker_job["status"].get("failed"), worker_job["status"]
    real_ps.kubectl("delete", "jobset", JOB, "--wait=true")


def test_a_master_pod_deleted_mid_training_comes_back_from_its_state_and_nothing_is_lost(
    real_ps: RealNode, tmp_path: Path
) -> None:
    job = "ps-master-gone"
    real_ps.fresh_run(job)
    manifest = real_pods.render("psjob", job, "--workers", "3", "--ps-replicas", "2", "--epochs", "40",
                                "--cpu", "200m", "--memory", "1Gi")  # fmt: skip
    proc = jobs.launch(real_ps.cluster, manifest, tmp_path, "--start-timeout", "600", "--timeout", "1500",
                       "--delete-after", "never")  # fmt: skip
    label = f"jobset.sigs.k8s.io/jobset-name={job},jobset.sigs.k8s.io/replicatedjob-name=master"
    state = real_ps.workspace / "runs" / job / "output" / "ps-state" / "master_state.json"

    def tasks_done() -> int:
        try:
            return int(json.loads(state.read_text())["book"]["counters"].get("tasks_done", 0))
        except (OSError, ValueError, KeyError):
            return 0  # not written yet, or caught mid-replace

    def master_mid_training() -> str | None:
        pods = json.loads(real_ps.kubectl("get", "pods", "-l", label, "-o", "json"))["items"]
        running = [p["metadata"]["name"] for p in pods if p["status"].get("phase") == "Running"]
        # Tasks done are on the claim: the master is past its start, with work still ahead.
        return running[0] if running and tasks_done() >= 10 else None

    first = jobs.until("the master training", master_mid_training, 600)
    real_ps.kubectl("delete", "pod", first, "--wait=false")
    code, result, err = jobs.finish(proc, timeout=1600)
    assert code == 0, err[-4000:]
    assert result["phase"] == "Succeeded", result
    masters = json.loads(real_ps.kubectl("get", "pods", "-l", label, "-o", "json"))["items"]
    assert [p["metadata"]["name"] for p in masters] != [first], "a new master pod ran the job to its end"
    written = real_pods.metrics(real_ps, job)
    # The same end as a run where nothing was deleted (test_real_pods' PS scenario): every record
    # trained, counted once, and the accuracy bar.
    assert written["records_untrained"] == 0, written
    assert written["test_accuracy"] >= TARGET, written
    # The second master claimed the first one's state (its fencing generation), not a fresh start.
    owner = json.loads((state.parent / OWNER_FILE).read_text())
    assert owner["generation"] >= 2, owner
    real_ps.kubectl("delete", "jobset", job, "--wait=true")


def test_a_preempted_parameter_server_comes_back_from_its_checkpoint_and_nothing_is_lost(
    real_ps: RealNode, tmp_path: Path
) -> None:
    job = "ps-server-preempt"
    real_ps.fresh_run(job)
    real_ps.kubectl("delete", "pod", "online-server-preemptor", "--ignore-not-found", "--wait=true")
    # Only the two servers hold slots, at the default kubetrain-ps-control (1000): the online pod
    # (100000) is work above it, and one server is the only pod it can take the room from.
    preemption.advertise_slots(real_ps, 2)
    manifest = real_pods.render("psjob", job, "--workers", "3", "--ps-replicas", "2", "--epochs", "12",
                                "--cpu", "200m", "--memory", "1Gi")  # fmt: skip
    preemption.hold_slots(manifest, "ps")
    start = time.monotonic()
    proc = jobs.launch(real_ps.cluster, manifest, tmp_path, "--start-timeout", "600", "--timeout", "1500",
                       "--delete-after", "never")  # fmt: skip
    state = real_ps.workspace / "runs" / job / "output" / "ps-state" / "master_state.json"
    servers = f"jobset.sigs.k8s.io/jobset-name={job},{RJOB}=ps"

    def training() -> bool:
        try:
            return int(json.loads(state.read_text())["book"]["counters"].get("tasks_done", 0)) >= 10
        except (OSError, ValueError, KeyError):
            return False  # not written yet, or caught mid-replace

    jobs.until("the job training", training, 600)
    # The server's CPU too: the shared node's other pods (the KFP scenarios') would take it otherwise.
    preemption.online_pod(real_ps, "online-server-preemptor", image=image_ref("launcher"), cpu="200m")

    def preempted() -> dict[str, Any] | None:
        for pod in _pods(real_ps, servers):
            conditions = {c["type"]: c for c in pod["status"].get("conditions", [])}
            if conditions.get("DisruptionTarget", {}).get("reason") == "PreemptionByScheduler":
                return pod
        return None

    victim = jobs.until("a server preempted", preempted, 120)
    shard = victim["metadata"]["labels"]["jobset.sigs.k8s.io/job-index"]
    victim_job = victim["metadata"]["labels"]["batch.kubernetes.io/job-name"]

    def replacement_pending() -> bool:
        pods = _pods(real_ps, f"batch.kubernetes.io/job-name={victim_job}")
        return any(p["metadata"]["uid"] != victim["metadata"]["uid"] and p["status"].get("phase") == "Pending"
                   for p in pods)  # fmt: skip

    jobs.until("the preempted server's Job making a new pod", replacement_pending, 120)
    real_ps.kubectl("delete", "pod", "online-server-preemptor", "--wait=false")  # room again
    code, result, err = jobs.finish(proc, timeout=1400)
    seconds = time.monotonic() - start
    assert code == 0, err[-4000:]
    assert result["phase"] == "Succeeded", result
    written = real_pods.metrics(real_ps, job)
    assert written["test_accuracy"] >= TARGET, written
    assert written["ps_generations"] == {shard: 2, str(1 - int(shard)): 1}, written
    # What the master promises after a server restore: every task of every epoch counted once, by
    # a report whose update survived (a task whose gradients the restore lost is trained again,
    # each extra training counted in records_trained_twice), and nothing dropped.
    info = read_dataset_info(real_ps.workspace / "datasets" / "digits")
    tasks = len(cut_split([s.records for s in info.shards("train")], 64, kind=TRAIN, split="train")) * 12
    assert (written["records_untrained"], written["records_dropped"]) == (0, 0), written
    assert written["tasks_done"] == tasks, written
    assert written["records_trained"] - written["records_trained_twice"] == written["records_per_epoch"] * 12
    said = [line for line in err.splitlines() if f"PS shard {shard} restarted" in line]
    assert len(said) == 1, err[-4000:]
    assert f"{written['tasks_retrained_after_ps_restore']} finished task" in said[0], (said, written)
    # A server pod lost counts against its Job's backoffLimit (no podFailurePolicy: its pods restart
    # in place, OnFailure): one failure of the default 3.
    ps_job = json.loads(real_ps.kubectl("get", "job", victim_job, "-o", "json"))
    assert ps_job["status"].get("failed") == 1, ps_job["status"]
    print(f"server preempted: shard {shard}, {said[0].split(': ', 1)[-1]}; accuracy "
          f"{written['test_accuracy']:.4f}; launch to return {seconds:.1f}s")  # fmt: skip
    real_ps.kubectl("delete", "jobset", job, "--wait=true")


@pytest.fixture(scope="module")
def real_ddp(cluster: Cluster) -> RealNode:
    """The real node with the launcher and pytorch images and the digits on its claim."""
    if not node.running(STATE):
        pytest.skip("no real node in this cluster (KUBETRAIN_REAL_NODE=0)")
    return real_pods.prepare(cluster, ["launcher", "pytorch"])


def test_an_elastic_ddp_worker_preempted_mid_training_is_recreated_and_training_resumes_from_a_checkpoint(
    real_ddp: RealNode, tmp_path: Path
) -> None:
    # For comparison with the PS job: torchrun under the training-operator's elasticPolicy.
    job, online, budget = "ddp-preempt", "online-ddp-preemptor", "ddp-preempt-rdzv-host"
    real_ddp.fresh_run(job)
    real_ddp.kubectl("delete", "pod", online, "--ignore-not-found", "--wait=true")
    preemption.advertise_slots(real_ddp, 2)
    manifest = real_pods.render("pytorchjob", job, "--workers", "2", "--elastic", "1:2", "--epochs", "16",
                                "--cpu", "300m", "--memory", "1Gi")  # fmt: skip
    preemption.hold_slots(manifest, "Worker")
    # Worker 0 hosts the c10d rendezvous (the operator's PET_RDZV_ENDPOINT): a budget that allows
    # it no disruption makes the scheduler take worker 1, deterministically (it spares the pods a
    # budget protects when another victim will do).
    pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": budget},
           "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {
               "training.kubeflow.org/job-name": job, "training.kubeflow.org/replica-index": "0"}}}}  # fmt: skip
    real_ddp.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(pdb))
    start = time.monotonic()
    proc = jobs.launch(real_ddp.cluster, manifest, tmp_path, "--start-timeout", "600", "--timeout", "1200",
                       "--delete-after", "never")  # fmt: skip
    checkpoints = real_ddp.workspace / "runs" / job / "checkpoints"
    jobs.until("a checkpoint on the claim", lambda: checkpoints.is_dir() and any(checkpoints.iterdir()), 600)
    first = {p["metadata"]["name"]: p["metadata"]["uid"] for p in _pods(real_ddp, f"{DDP_JOB_LABEL}={job}")}
    preemption.online_pod(real_ddp, online, image=image_ref("launcher"), cpu="300m")

    def recreated_pending() -> bool:
        pods = _pods(real_ddp, f"{DDP_JOB_LABEL}={job},training.kubeflow.org/replica-index=1")
        return any(p["metadata"]["uid"] != first[f"{job}-worker-1"] and p["status"].get("phase") == "Pending"
                   for p in pods)  # fmt: skip

    jobs.until("worker 1 preempted and recreated, Pending", recreated_pending, 120)
    real_ddp.kubectl("delete", "pod", online, "--wait=false")  # room again
    code, result, err = jobs.finish(proc, timeout=1200)
    seconds = time.monotonic() - start
    assert code == 0, err[-4000:]
    assert result["phase"] == "Succeeded", result
    pods = {p["metadata"]["name"]: p for p in _pods(real_ddp, f"{DDP_JOB_LABEL}={job}")}
    assert pods[f"{job}-worker-0"]["metadata"]["uid"] == first[f"{job}-worker-0"]
    assert pods[f"{job}-worker-1"]["metadata"]["uid"] != first[f"{job}-worker-1"]  # a new pod, same name
    # The operator counts its pods' container restarts against backoffLimit: a preempted pod is
    # replaced, not restarted, and the survivor's torchrun restarted its worker process in place.
    restarts = {n: sum(c["restartCount"] for c in p["status"]["containerStatuses"]) for n, p in pods.items()}
    assert restarts == dict.fromkeys(pods, 0), restarts
    written = real_pods.metrics(real_ddp, job)
    assert written["resumed_from_step"] > 0, written  # from a checkpoint, not from scratch
    assert written["world_size"] == 2, written  # the new worker 1 rejoined
    assert written["test_accuracy"] >= TARGET, written
    log = real_ddp.kubectl("logs", f"{job}-worker-0")
    resumed = [line for line in log.splitlines() if "resumed from" in line]
    assert resumed and int(resumed[-1].split("(epoch ")[1].split(",")[0]) >= 1, log[-4000:]
    print(f"ddp worker preempted: {resumed[-1]}; worker 0's starts {_starts(log)}; accuracy "
          f"{written['test_accuracy']:.4f}; launch to return {seconds:.1f}s")  # fmt: skip
    real_ddp.kubectl("delete", "pdb", budget, "--wait=false")
    real_ddp.kubectl("delete", "pytorchjob", job, "--wait=true")


def _starts(log: str) -> list[str]:
    """`rank/world size` of each start of the training program in a pod's log (`torchrun: rank 0/2 ...`)."""
    return [line.split(" rank ")[1].split()[0] for line in log.splitlines() if "torchrun: rank " in line]
