"""`ps_train`: parameter-server training as a JobSet (master, servers, workers), followed to its end."""

from typing import Any, Dict, List, NamedTuple, Optional  # noqa: UP035 (KFP reads only typing forms)

from kfp import dsl
from kfp.dsl import HTML, Dataset, Input, Metrics, Model, Output, TaskConfig

from kubetrain.components._shared import LAUNCHER_IMAGE, TRAINING_PASSTHROUGHS, carry_registry


# KFP's decorator is untyped; the component body runs from its source in the launcher image.
@dsl.component(  # type: ignore[untyped-decorator]
    base_image=LAUNCHER_IMAGE, install_kfp_package=False, task_config_passthroughs=TRAINING_PASSTHROUGHS
)
def ps_train(
    dataset: Input[Dataset],
    model: Output[Model],
    metrics: Output[Metrics],
    report: Output[HTML],
    task_config: TaskConfig,
    run_id: str = "",
    task_id: str = "",
    task_name: str = "",
    workspace_pvc: str = "kubetrain-workspace",
    ps_replicas: int = 2,
    workers: int = 3,
    min_workers: int = 0,
    max_workers: int = 0,
    straggler_factor: float = 3.0,
    mode: str = "async",
    records_per_task: int = 64,
    optimizer: str = "adam",
    epochs: int = 10,
    batch_size: int = 32,
    learning_rate: float = 0.002,
    architecture: str = "mlp",
    model_module: str = "",
    seed: int = 0,
    image: str = "",
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
) -> NamedTuple("TrainOutputs", [("job_name", str), ("status", str)]):  # type: ignore[valid-type]
    """Train with kubetrain's parameter servers in a JobSet (jobset.x-k8s.io/v1alpha2) and wait for it.

    The master cuts the data into tasks and hands them out; the parameter servers hold the sharded
    parameters; the workers pull parameters and push gradients. Lost work is re-queued and the
    master's state survives a master restart. Resources, node selectors, tolerations, node affinity,
    env and volumes set on this task go to the training pods (GPUs to the workers only).

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
        ps_replicas: Parameter servers (parameter shards).
        workers: Worker pods of a fixed-size job; it trains with those that are there.
        min_workers: With max_workers: an elastic job that trains while at least this many workers
            are there (below it, training pauses until workers join). 0 for a fixed-size job.
        max_workers: Upper bound of an elastic job: this many worker pods are asked for; those no
            node has room for wait Pending and join as room appears, a preempted one gives its tasks
            back at once and its replacement waits Pending. 0 for a fixed-size job (then `workers`).
        straggler_factor: A training task held longer than this many times the median task time
            (at least 10 s, after 5 tasks) goes out again to an idle worker; the first result
            counts, once. 0 never re-issues a task.
        mode: async (apply each gradient as it comes) or sync (one version per round of gradients).
        records_per_task: Records per task the master hands out.
        optimizer: Optimizer on the parameter servers: sgd or adam.
        epochs: Passes over the training data (10: asynchronous updates from stale versions need
            more passes than DDP's 5 to reach the same accuracy on a busy machine).
        batch_size: Records per worker step.
        learning_rate: Learning rate of the parameter servers' optimizer.
        architecture: Model: mlp (dense), cnn (conv net) or wide_deep (wide & deep, embedding tables on the servers).
        model_module: Your own model instead: an importable module path in `image` (e.g.
            "my_team.ctr_model") defining custom_model(feature_shape, num_classes), loss(logits,
            labels), optimizer(lr) (naming `optimizer`, which the servers apply) and feed(x, y),
            as ElasticDL's model zoo does; checked before training (README, "Your own model on the
            parameter servers"). Leave architecture at mlp. Empty: the built-in `architecture`.
        seed: Random seed.
        image: Training image; empty for kubetrain's parameter-server image of this version.
        cpu: CPU request of each worker pod (e.g. "2"); or set_cpu_request on the task.
        memory: Memory request of each pod (e.g. "4Gi"); or set_memory_request on the task.
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
        backoff_limit: Restarts allowed before the job fails.
        namespace: Namespace of the job; empty for the launcher pod's namespace.
        service_account: Service account of the training pods; empty for the namespace default.
        image_pull_secrets: Secrets the training pods pull the image with (a private registry).
        labels: Labels of the job and of every training pod, e.g. {"kueue.x-k8s.io/queue-name": "team-a"}
            to queue the job with Kueue. Kubernetes label keys and values; kubetrain's own keys
            (kubetrain.io/*, app.kubernetes.io/managed-by, sidecar.istio.io/inject) are refused.
        annotations: Annotations of the job and of every training pod (any string values; the
            same keys are kubetrain's own and refused, and so are AppArmor and seccomp profiles).
        priority_class: PriorityClass of every training pod (priorityClassName); empty
            for the cluster's default.
        manifest_patch: A JSON merge patch (RFC 7386) applied to the job's manifest, for what the
            inputs do not cover (e.g. {"spec": {"ttlSecondsAfterFinished": 600}}); the result is validated
            like every manifest, so a bad patch fails before submission, naming
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
        job_name: Name of the JobSet.
        status: Final status of the job (Succeeded).
    """
    from kubetrain.kfp_runtime.frameworks import train_ps

    return train_ps(
        dataset=dataset, model=model, metrics=metrics, report=report, task_config=task_config,
        run_id=run_id, task_id=task_id, task_name=task_name, workspace_pvc=workspace_pvc, ps_replicas=ps_replicas,
        workers=workers, min_workers=min_workers, max_workers=max_workers, straggler_factor=straggler_factor,
        mode=mode, records_per_task=records_per_task, optimizer=optimizer, epochs=epochs,
        batch_size=batch_size, learning_rate=learning_rate, architecture=architecture, model_module=model_module,
        seed=seed, image=image, cpu=cpu, memory=memory, gpus=gpus, timeout_seconds=timeout_seconds,
        start_timeout_seconds=start_timeout_seconds,
        delete_after=delete_after, backoff_limit=backoff_limit, namespace=namespace,
        service_account=service_account, image_pull_secrets=image_pull_secrets, labels=labels, annotations=annotations,
        priority_class=priority_class, manifest_patch=manifest_patch,
    )  # fmt: skip


carry_registry(ps_train)
