"""`pytorch_train`: distributed PyTorch (DDP) as a PyTorchJob, followed to its end."""

from typing import Any, Dict, List, NamedTuple, Optional  # noqa: UP035 (KFP reads only typing forms)

from kfp import dsl
from kfp.dsl import HTML, Dataset, Input, Metrics, Model, Output, TaskConfig

from kubetrain.components._shared import LAUNCHER_IMAGE, TRAINING_PASSTHROUGHS, carry_registry


# KFP's decorator is untyped; the component body runs from its source in the launcher image.
@dsl.component(  # type: ignore[untyped-decorator]
    base_image=LAUNCHER_IMAGE, install_kfp_package=False, task_config_passthroughs=TRAINING_PASSTHROUGHS
)
def pytorch_train(
    dataset: Input[Dataset],
    model: Output[Model],
    metrics: Output[Metrics],
    report: Output[HTML],
    task_config: TaskConfig,
    run_id: str = "",
    task_id: str = "",
    task_name: str = "",
    workspace_pvc: str = "kubetrain-workspace",
    workers: int = 1,
    elastic_min_workers: int = 0,
    elastic_max_workers: int = 0,
    epochs: int = 5,
    batch_size: int = 32,
    learning_rate: float = 0.002,
    architecture: str = "mlp",
    backend: str = "gloo",
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
    job_api: str = "pytorchjob",
    runtime: str = "",
) -> NamedTuple("TrainOutputs", [("job_name", str), ("status", str)]):  # type: ignore[valid-type]
    """Train with PyTorch DDP in a PyTorchJob (kubeflow.org/v1) and wait for it to finish.

    The job is named from the KFP run and task execution, so a retried task re-attaches to its job.
    Resources, node selectors, tolerations, node affinity, env and volumes set on this task go to the
    training pods. The step fails when the job fails, times out or is cancelled (the job is then deleted).

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
        workers: Worker replicas besides the master (0: a master-only job).
        elastic_min_workers: With elastic_max_workers > 0: an elastic job (torchrun, workers only)
            between these bounds. 0 for a fixed-size job.
        elastic_max_workers: Upper bound of an elastic job; 0 for a fixed-size job.
        epochs: Training epochs.
        batch_size: Records per process per step.
        learning_rate: Adam learning rate.
        architecture: Model: mlp or cnn.
        backend: torch.distributed backend: gloo (CPU) or nccl (GPU).
        seed: Random seed.
        image: Training image; empty for kubetrain's PyTorch image of this version.
        command: Your own program in `image`, as a list (e.g. ["python", "/app/train.py"]); run with
            `args` and no kubetrain flags, under the operator's environment plus KUBETRAIN_DATA_DIR,
            KUBETRAIN_OUTPUT_DIR and KUBETRAIN_CHECKPOINT_DIR. What it leaves in the output
            directory becomes `model`; the numbers in its metrics.json there, `metrics`. Empty:
            kubetrain's DDP trainer (the training inputs above apply to it only).
        args: Arguments of `command`.
        cpu: CPU request of each training pod (e.g. "2"); or set_cpu_request on the task.
        memory: Memory request of each training pod (e.g. "4Gi"); or set_memory_request on the task.
        gpus: GPUs per training pod (nvidia.com/gpu limit); or set_accelerator_limit on the task.
        timeout_seconds: Overall limit; then the job is deleted and the step fails.
        start_timeout_seconds: Limit on the job's start: if it is not running by then (an image
            that does not pull: ImagePullBackOff, ErrImagePull; a pod no node can take:
            Unschedulable, with the scheduler's message), the job is deleted and the step fails
            with exit code 3, naming the pending pods and why. 600 s covers a cold pull of a
            multi-GB training image (CUDA builds are 5-10 GB) on a node that never ran it. Raise it
            where nodes are added on demand or jobs wait in a queue (Kueue); 0 for no limit
            (then only timeout_seconds ends a job that never starts).
        delete_after: Delete the job when it ends: never, success (failed jobs stay) or always.
        backoff_limit: Container restarts the operator allows, summed over every replica, before
            the job fails. One rank's crash ends every rank of a DDP job (its peers' collectives
            fail), so each failure costs workers + 1 restarts: the default 3 survives none with 2
            workers; allow (workers + 1) x the failures to survive, each resuming from the newest
            checkpoint.
        namespace: Namespace of the job; empty for the launcher pod's namespace.
        service_account: Service account of the training pods; empty for the namespace default.
        job_api: pytorchjob (training-operator v1, kubeflow.org/v1) or trainjob (Kubeflow Trainer
            v2, trainer.kubeflow.org/v1alpha1: 1 + workers nodes under torchrun; not elastic).
        runtime: With job_api=trainjob, the ClusterTrainingRuntime to run on; empty for
            torch-distributed, which Trainer ships.
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
        job_name: Name of the PyTorchJob or TrainJob.
        status: Final status of the job (Succeeded).
    """
    from kubetrain.kfp_runtime.frameworks import train_pytorch

    return train_pytorch(
        dataset=dataset, model=model, metrics=metrics, report=report, task_config=task_config,
        run_id=run_id, task_id=task_id, task_name=task_name, workspace_pvc=workspace_pvc, workers=workers,
        elastic_min_workers=elastic_min_workers, elastic_max_workers=elastic_max_workers, epochs=epochs,
        batch_size=batch_size, learning_rate=learning_rate, architecture=architecture, backend=backend,
        seed=seed, image=image, command=command, args=args, cpu=cpu, memory=memory, gpus=gpus,
        timeout_seconds=timeout_seconds,
        start_timeout_seconds=start_timeout_seconds, delete_after=delete_after, backoff_limit=backoff_limit,
        namespace=namespace, service_account=service_account,
        image_pull_secrets=image_pull_secrets, labels=labels, annotations=annotations,
        priority_class=priority_class, manifest_patch=manifest_patch, job_api=job_api, runtime=runtime,
    )  # fmt: skip


carry_registry(pytorch_train)
