"""`chainermn_train`: ChainerMN over MPI as an MPIJob (mpi-operator v2beta1), followed to its end."""

from typing import Any, Dict, List, NamedTuple, Optional  # noqa: UP035 (KFP reads only typing forms)

from kfp import dsl
from kfp.dsl import HTML, Dataset, Input, Metrics, Model, Output, TaskConfig

from kubetrain.components._shared import LAUNCHER_IMAGE, TRAINING_PASSTHROUGHS, carry_registry


# KFP's decorator is untyped; the component body runs from its source in the launcher image.
@dsl.component(  # type: ignore[untyped-decorator]
    base_image=LAUNCHER_IMAGE, install_kfp_package=False, task_config_passthroughs=TRAINING_PASSTHROUGHS
)
def chainermn_train(
    dataset: Input[Dataset],
    model: Output[Model],
    metrics: Output[Metrics],
    report: Output[HTML],
    task_config: TaskConfig,
    run_id: str = "",
    task_id: str = "",
    task_name: str = "",
    workspace_pvc: str = "kubetrain-workspace",
    workers: int = 2,
    slots_per_worker: int = 1,
    epochs: int = 5,
    batch_size: int = 32,
    learning_rate: float = 0.002,
    architecture: str = "mlp",
    seed: int = 0,
    image: str = "",
    command: Optional[List[str]] = None,  # noqa: UP006, UP045 (KFP reads only typing forms)
    args: Optional[List[str]] = None,  # noqa: UP006, UP045
    cpu: str = "",
    memory: str = "",
    gpus: int = 0,
    timeout_seconds: int = 86400,
    start_timeout_seconds: int = 600,
    delete_after: str = "success",
    backoff_limit: int = 3,
    namespace: str = "",
    service_account: str = "",
    image_pull_secrets: Optional[List[str]] = None,  # noqa: UP006, UP045
    labels: Optional[Dict[str, str]] = None,  # noqa: UP006, UP045
    annotations: Optional[Dict[str, str]] = None,  # noqa: UP006, UP045
    priority_class: str = "",
    manifest_patch: Optional[Dict[str, Any]] = None,  # noqa: UP006, UP045 (KFP reads only typing forms)
    job_api: str = "mpijob",
    runtime: str = "",
) -> NamedTuple("TrainOutputs", [("job_name", str), ("status", str)]):  # type: ignore[valid-type]
    """Train with ChainerMN in an MPIJob (kubeflow.org/v2beta1) and wait for it to finish.

    The launcher runs mpirun over workers x slots_per_worker ranks; the workers run sshd as a
    non-root user. The job is named from the KFP run and task execution, so a retried task re-attaches to its
    job. Resources, node selectors, tolerations, node affinity, env and volumes set on this task go
    to the training pods. The step fails when the job fails, times out or is cancelled.

    Args:
        dataset: Output of download_dataset: its metadata names the data directory on the workspace.
        task_config: Filled by KFP from the task's settings (set_cpu_limit, set_accelerator_type,
            kfp.kubernetes tolerations, node selectors, node affinity, env, volumes); not set by hand.
        run_id: Leave empty: the step reads its run from KFP (its output URI). An override.
        task_id: Leave empty: the step reads its task execution from KFP (each ParallelFor iteration
            its own, a retry the same). An override.
        task_name: Leave empty: the step reads its task's name from KFP. An override.
        workspace_pvc: ReadWriteMany PersistentVolumeClaim holding data, checkpoints and models;
            mount it on this task at /workspace (the kubetrain pipelines do).
        workers: MPI worker pods.
        slots_per_worker: MPI ranks per worker pod.
        epochs: Training epochs.
        batch_size: Records per rank per step.
        learning_rate: Adam learning rate.
        architecture: Model: mlp or cnn.
        seed: Random seed.
        image: Training image; empty for kubetrain's ChainerMN image of this version.
        command: Your own MPI program in `image`, as a list, which mpirun starts on every rank
            with `args` and no kubetrain flags; it gets KUBETRAIN_DATA_DIR, KUBETRAIN_OUTPUT_DIR and
            KUBETRAIN_CHECKPOINT_DIR (forwarded with mpirun -x). What it leaves in the output
            directory becomes `model`; the numbers in its metrics.json there, `metrics`. Empty:
            kubetrain's ChainerMN trainer.
        args: Arguments of `command`.
        cpu: CPU request of each worker pod (e.g. "2"); or set_cpu_request on the task.
        memory: Memory request of each worker pod (e.g. "4Gi"); or set_memory_request on the task.
        gpus: GPUs per worker pod (nvidia.com/gpu limit); or set_accelerator_limit on the task.
        timeout_seconds: Overall limit; then the job is deleted and the step fails.
        start_timeout_seconds: Limit on the job's start: if it is not running by then (an image
            that does not pull: ImagePullBackOff, ErrImagePull; a pod no node can take:
            Unschedulable, with the scheduler's message), the job is deleted and the step fails
            with exit code 3, naming the pending pods and why. 600 s covers a cold pull of a
            multi-GB training image (CUDA builds are 5-10 GB) on a node that never ran it. Raise it
            where nodes are added on demand or jobs wait in a queue (Kueue); 0 for no limit
            (then only timeout_seconds ends a job that never starts).
        delete_after: Delete the job when it ends: never, success (failed jobs stay) or always.
        backoff_limit: Launcher restarts allowed before the job fails.
        namespace: Namespace of the job; empty for the launcher pod's namespace.
        service_account: Service account of the training pods; empty for the namespace default.
        job_api: mpijob (mpi-operator, kubeflow.org/v2beta1) or trainjob (Kubeflow Trainer v2: the
            launcher and `workers` nodes of the kubetrain-mpi runtime in deploy/runtimes/).
        runtime: With job_api=trainjob, the ClusterTrainingRuntime to run on; empty for
            kubetrain-mpi.
        image_pull_secrets: Secrets the training pods pull the image with (a private registry).
        labels: Labels of the job and of every training pod, e.g. {"kueue.x-k8s.io/queue-name": "team-a"}
            to queue the job with Kueue. Kubernetes label keys and values; kubetrain's own keys
            (kubetrain.io/*, app.kubernetes.io/managed-by, sidecar.istio.io/inject) are refused.
        annotations: Annotations of the job and of every training pod (any string values; the
            same keys are kubetrain's own and refused, and so are AppArmor and seccomp profiles).
        priority_class: PriorityClass of every training pod (priorityClassName), also the job's
            runPolicy.schedulingPolicy.priorityClass (a gang scheduler's PodGroup); empty for the
            cluster's default. Not with job_api=trainjob: set it in the training runtime.
        manifest_patch: A JSON merge patch (RFC 7386) applied to the job's manifest, for what the
            inputs do not cover (e.g. {"spec": {"runPolicy": {"ttlSecondsAfterFinished": 600}}}); the
            result is validated like every manifest, so a bad patch fails before submission, naming
            the field. It may not cross the "restricted" Pod Security line (host namespaces, paths
            or ports, privileged, security contexts, added containers, Secrets, projected or CSI
            volumes) nor change what the step owns: image, command and args, the service account and
            its token, kubetrain's volumes, mounts, env, labels and annotations, and the deadline
            (which may only be lowered). Lists replace, but for containers, env, volumes, volumeMounts,
            ports and replicatedJobs, whose items merge by name (mountPath, containerPort): name
            only the items you add or change.

    Returns:
        model: The model files and metrics.json; metadata has framework, job name and status.
        metrics: test_accuracy, test_loss, train_loss, samples_per_second, duration_seconds,
            job_seconds, world_size, epochs.
        report: HTML page with the final metrics and the loss and accuracy curves.
        job_name: Name of the MPIJob.
        status: Final status of the job (Succeeded).
    """
    from kubetrain.kfp_runtime.frameworks import train_chainermn

    return train_chainermn(
        dataset=dataset, model=model, metrics=metrics, report=report, task_config=task_config,
        run_id=run_id, task_id=task_id, task_name=task_name, workspace_pvc=workspace_pvc, workers=workers,
        slots_per_worker=slots_per_worker, epochs=epochs, batch_size=batch_size,
        learning_rate=learning_rate, architecture=architecture, seed=seed, image=image, command=command, args=args,
        cpu=cpu, memory=memory, gpus=gpus, timeout_seconds=timeout_seconds,
        start_timeout_seconds=start_timeout_seconds, delete_after=delete_after,
        backoff_limit=backoff_limit, namespace=namespace, service_account=service_account,
        image_pull_secrets=image_pull_secrets, labels=labels, annotations=annotations,
        priority_class=priority_class, manifest_patch=manifest_patch, job_api=job_api,
        runtime=runtime,
    )  # fmt: skip


carry_registry(chainermn_train)
