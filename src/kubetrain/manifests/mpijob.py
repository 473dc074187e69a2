"""MPIJob `kubeflow.org/v2beta1` manifests (mpi-operator v0.8).

The launcher reaches the workers over SSH. Under the "restricted" Pod Security Standard a worker
cannot run the stock `/usr/sbin/sshd -De` (root, port 22): the images run sshd as the `mpiuser`
(uid 1000) on port 2222 from a config in that user's home, and the launcher's ssh client config
uses the same port, so no capability is needed and "restricted" holds for every pod.
"""

from __future__ import annotations

from kubetrain.manifests.kinds import MPI_CONTAINER, MPIJOB
from kubetrain.manifests.pod import Manifest, build_pod_template, job_metadata, run_policy_to_k8s, workspace_env
from kubetrain.specs.jobs import MPIJobSpec, common_priority_class

SSHD_PORT = 2222
SSHD_CONFIG = "/home/mpiuser/.sshd_config"
NON_ROOT_SSHD = ("/usr/sbin/sshd", "-De", "-f", SSHD_CONFIG)
# mpi-operator v2beta1 defaults (operator-contracts.md §6), written explicitly.
LAUNCHER_RESTART_POLICY = "OnFailure"
WORKER_RESTART_POLICY = "Never"
# Workers only run sshd, which never exits by itself: remove them once the launcher is done
# (the Chainer proposal's "workers scaled down after the run").
DEFAULT_CLEAN_POD_POLICY = "Running"


def build_mpijob(spec: MPIJobSpec) -> Manifest:
    """The MPIJob for `spec`: one launcher Job that runs mpirun, N worker pods that run sshd."""
    env = workspace_env(spec.workspace)
    launcher_policy = spec.launcher.restart_policy or LAUNCHER_RESTART_POLICY
    worker_policy = spec.worker.restart_policy or WORKER_RESTART_POLICY
    launcher = build_pod_template(
        meta=spec.meta,
        replica=spec.launcher,
        container_name=MPI_CONTAINER,
        role_labels={"kubetrain.io/replica-type": "launcher"},
        extra_env=[*env, {"name": "CHAINERMN_FORCE_ABORT_ON_EXCEPTION", "value": "1"}],
        pod_restart_policy=launcher_policy,
        workspace=spec.workspace,
    )
    worker_command = None
    if not spec.worker.command and not spec.worker.args and spec.worker.security.restricted:
        worker_command = NON_ROOT_SSHD
    worker = build_pod_template(
        meta=spec.meta,
        replica=spec.worker,
        container_name=MPI_CONTAINER,
        role_labels={"kubetrain.io/replica-type": "worker"},
        extra_env=env,
        ports=[{"name": "ssh", "containerPort": SSHD_PORT, "protocol": "TCP"}],
        pod_restart_policy=worker_policy,
        # WaitForWorkersReady starts the launcher once every worker is Ready: make Ready mean
        # "sshd accepts connections", not merely "container started".
        readiness_probe={"tcpSocket": {"port": SSHD_PORT}, "periodSeconds": 2, "failureThreshold": 30},
        workspace=spec.workspace,
        command_override=worker_command,
    )
    rp = spec.run_policy
    return {
        "apiVersion": MPIJOB.api_version,
        "kind": MPIJOB.kind,
        "metadata": job_metadata(spec.meta),
        "spec": {
            "slotsPerWorker": spec.slots_per_worker,
            "runLauncherAsWorker": spec.run_launcher_as_worker,
            "sshAuthMountPath": spec.ssh_auth_mount_path,
            "launcherCreationPolicy": spec.launcher_creation_policy,
            "mpiImplementation": spec.mpi_implementation,
            "runPolicy": run_policy_to_k8s(
                backoff_limit=rp.backoff_limit,
                active_deadline_seconds=rp.active_deadline_seconds,
                ttl=rp.ttl_seconds_after_finished,
                clean_pod_policy=rp.clean_pod_policy or DEFAULT_CLEAN_POD_POLICY,
                suspend=rp.suspend,
                priority_class=common_priority_class({"launcher": spec.launcher, "worker": spec.worker}),
            ),
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "restartPolicy": launcher_policy, "template": launcher},
                "Worker": {"replicas": spec.worker.replicas, "restartPolicy": worker_policy, "template": worker},
            },
        },
    }
