"""What every training request shares: the task's identity, the inputs every component takes, and the job it names.

A component hands its inputs over by the names it declares (`learning_rate`, `architecture`,
...); the request keeps those names, so an error names the input the user set. The one
translation into the training program's vocabulary (`--lr`, `--model`) is
:meth:`TrainingRequest.training_params`; what every builder takes alike (name, namespace, KFP run
and task, flags, image, pod options, workspace, run policy) is one
:class:`~kubetrain.presets.JobSettings`, made in :meth:`TrainingRequest.job_settings`.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Self, cast

from kubetrain.errors import InvalidInputError
from kubetrain.kfp_runtime.task_identity import IDENTITY_FIELDS
from kubetrain.kfp_runtime.taskconfig import ExplicitResources, pod_options
from kubetrain.launcher import DELETE_AFTER_CHOICES, AwaitOptions, DeleteAfter
from kubetrain.manifests import build_manifest
from kubetrain.manifests.patch import apply_manifest_patch, check_json_depth
from kubetrain.manifests.validate import validate_manifest
from kubetrain.names import is_dns1123_label, is_dns1123_subdomain, is_quantity
from kubetrain.presets import JobSettings, PodOptions, TrainingParams, UserProgram
from kubetrain.specs import MAX_REPLICAS, JobSpec, RunPolicy, limits
from kubetrain.specs.limits import Count, check_learning_rate, check_seconds
from kubetrain.specs.scheduling import check_priority_class, check_user_metadata

Framework = Literal["pytorch", "chainermn", "ps"]
# The inputs that identify a task at run time; every training component takes them.
IDENTITY_INPUTS = IDENTITY_FIELDS
DEFAULT_ARCHITECTURE = "mlp"
# How long the pods of a job may take to start before the step gives up on it. A cold pull of a
# multi-GB training image (CUDA builds of PyTorch are 5-10 GB) takes minutes on a node that has
# never run it; ten minutes covers that, while a mistyped image or a pod no node can take no
# longer holds the step (and its GPUs' quota) for the whole timeout_seconds.
DEFAULT_START_TIMEOUT_SECONDS = 600

# The whole-number inputs every training component takes, with their bounds and what they count,
# so an error names the input as the component names it (not the spec field it becomes).
COUNT_INPUTS: Mapping[str, Count] = {
    "epochs": limits.EPOCHS,
    "batch_size": limits.BATCH_SIZE,
    "seed": limits.SEED,
    "gpus": limits.GPUS,
    "backoff_limit": limits.BACKOFF_LIMIT,
}


def replica_count(minimum: int, meaning: str) -> Count:
    """A count of replicas (pods) of one role: from `minimum` to MAX_REPLICAS."""
    return Count(minimum, MAX_REPLICAS, meaning, "each replica is a pod; MAX_REPLICAS")


@dataclass(frozen=True, kw_only=True)
class JobPlan:
    """What a request needs at run time to become a spec: the job's name, program flags and pod options."""

    name: str
    params: TrainingParams
    pod: PodOptions


def check_name_input(name: str, value: object, what: str, *, empty: str = "or empty for the default") -> None:
    """A Kubernetes object name given as an input; empty (when `empty` says what it means) for the default."""
    if (value or not empty) and (not isinstance(value, str) or not is_dns1123_subdomain(value)):
        tail = f", {empty}" if empty else ""
        raise InvalidInputError(
            f"{name}: got {value!r}; expected the name of {what} (lower-case alphanumerics, '-' and '.'){tail}"
        )


def check_choice(name: str, value: object, choices: tuple[str, ...]) -> None:
    """One of a fixed set of words."""
    if value not in choices:
        raise InvalidInputError(f"{name}: got {value!r}; expected one of {', '.join(choices)}")


@dataclass(frozen=True, kw_only=True)
class TrainingRequest(abc.ABC):
    """The inputs every training component shares; one subclass per framework adds its own."""

    framework: ClassVar[Framework]
    models: ClassVar[tuple[str, ...]]
    default_image: ClassVar[str]
    # The framework's own whole-number inputs (workers, ps_replicas, ...), as COUNT_INPUTS.
    count_inputs: ClassVar[Mapping[str, Count]] = {}

    run_id: str
    task_id: str
    task_name: str
    workspace_pvc: str = "kubetrain-workspace"
    epochs: int = 5
    batch_size: int = 32
    learning_rate: float = 0.002
    architecture: str = DEFAULT_ARCHITECTURE
    seed: int = 0
    image: str = ""
    cpu: str = ""
    memory: str = ""
    gpus: int = 0
    timeout_seconds: float = 86400  # real training runs for hours; a day, as the peers default to
    start_timeout_seconds: float = DEFAULT_START_TIMEOUT_SECONDS
    delete_after: str = "success"
    backoff_limit: int = 3
    namespace: str = ""
    service_account: str = ""
    manifest_patch: dict[str, Any] | None = None
    image_pull_secrets: list[str] | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    priority_class: str = ""

    def __post_init__(self) -> None:
        for name in IDENTITY_INPUTS:
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip() or value.startswith("{{$"):
                raise InvalidInputError(
                    f"{name}: got {value!r}; leave run_id, task_id and task_name out (the step reads its run and "
                    "task from KFP), or pass dsl.PIPELINE_JOB_ID_PLACEHOLDER as run_id, "
                    "dsl.PIPELINE_TASK_ID_PLACEHOLDER as task_id and dsl.PIPELINE_TASK_NAME_PLACEHOLDER as "
                    "task_name (the KFP backend resolves these only as the task's arguments, not as input defaults)"
                )
        for name, count in {**COUNT_INPUTS, **self.count_inputs}.items():
            count.check(name, getattr(self, name))
        check_learning_rate(self.learning_rate)
        # Refused here, before anything is submitted, rather than by every replica's parser.
        check_choice("architecture", self.architecture, self.models)
        check_seconds("timeout_seconds", self.timeout_seconds)
        check_seconds("start_timeout_seconds", self.start_timeout_seconds, zero="0: no limit on starting")
        check_choice("delete_after", self.delete_after, DELETE_AFTER_CHOICES)
        self._check_pod_inputs()
        if self.image_pull_secrets is not None and not isinstance(self.image_pull_secrets, list):
            raise InvalidInputError(
                f"image_pull_secrets: got {self.image_pull_secrets!r}; expected a list of Secret names: ['regcred']"
            )
        for secret in self.image_pull_secrets or ():
            if not isinstance(secret, str) or not is_dns1123_subdomain(secret):
                raise InvalidInputError(
                    f"image_pull_secrets: got {secret!r}; expected the name of a Secret of type dockerconfigjson"
                )
        if self.manifest_patch is not None and not isinstance(self.manifest_patch, dict):
            raise InvalidInputError(
                f"manifest_patch: got {self.manifest_patch!r}; expected a JSON object (an RFC 7386 merge patch)"
            )
        check_json_depth(self.manifest_patch, "manifest_patch")
        for name in ("labels", "annotations"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, dict):
                raise InvalidInputError(
                    f"{name}: got {value!r}; expected a JSON object of strings, e.g. {{'team': 'a'}}"
                )
        check_user_metadata(self.labels or {}, self.annotations or {})
        check_priority_class(self.priority_class or None)

    def _check_pod_inputs(self) -> None:
        """The inputs that become the pods' fields, checked under the inputs' own names."""
        for name, example in (("cpu", "'2' or '500m'"), ("memory", "'4Gi'")):
            value = getattr(self, name)
            if value and (not isinstance(value, str) or not is_quantity(value)):
                raise InvalidInputError(
                    f"{name}: got {value!r}; expected a Kubernetes quantity such as {example}, or empty for none"
                )
        if not isinstance(self.image, str) or any(c.isspace() for c in self.image):
            raise InvalidInputError(
                f"image: got {self.image!r}; expected a container image reference such as ghcr.io/org/img:1.0, "
                "or empty for kubetrain's image"
            )
        check_name_input(
            "workspace_pvc", self.workspace_pvc, "the ReadWriteMany PersistentVolumeClaim every pod mounts", empty=""
        )
        if self.namespace and (not isinstance(self.namespace, str) or not is_dns1123_label(self.namespace)):
            raise InvalidInputError(
                f"namespace: got {self.namespace!r}; expected the name of a namespace (≤ 63 lower-case "
                "alphanumerics and '-'), or empty for the default"
            )
        check_name_input("service_account", self.service_account, "a ServiceAccount")

    @classmethod
    def from_inputs(cls, inputs: Mapping[str, Any]) -> Self:
        """The request from a component's inputs, by their declared names."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(inputs) - known)
        if unknown:
            raise InvalidInputError(
                f"{cls.framework} training: unknown inputs {', '.join(unknown)}; "
                f"expected some of {', '.join(sorted(known))}"
            )
        missing = [name for name in IDENTITY_INPUTS if not inputs.get(name)]
        if missing:
            # The steps fill them in (kfp_runtime.task_identity) before they get here.
            raise InvalidInputError(
                f"{', '.join(missing)}: missing; the task's identity, read from KFP by the step "
                "(kubetrain.kfp_runtime.task_identity), or dsl.PIPELINE_JOB_ID_PLACEHOLDER as run_id, "
                "dsl.PIPELINE_TASK_ID_PLACEHOLDER as task_id and dsl.PIPELINE_TASK_NAME_PLACEHOLDER as task_name"
            )
        return cls(**inputs)

    @property
    def task_key(self) -> str:
        """The task's identity within its run: the task id and the task's name.

        On the KFP backend the task id is the enclosing DAG's execution id, shared by every task of
        that DAG; the name tells them apart. It goes into the job name and the task label, so two
        tasks side by side never adopt each other's job while a retried task re-attaches to its own.
        """
        return f"{self.task_id}.{self.task_name}"

    @property
    def chosen_image(self) -> str:
        """The training image: the one given, else kubetrain's image for this framework and version."""
        return self.image or self.default_image

    @property
    def job_namespace(self) -> str | None:
        """The job's namespace, None for the backend's default (the launcher pod's own)."""
        return self.namespace or None

    @property
    def delete_policy(self) -> DeleteAfter:
        """`delete_after`, checked on construction."""
        return cast(DeleteAfter, self.delete_after)

    @property
    def active_deadline_seconds(self) -> int:
        """The timeout as the job's own deadline: a backstop should the launcher pod be lost."""
        return max(1, int(self.timeout_seconds))

    def await_options(self) -> AwaitOptions:
        """How the launcher follows the job: the timeouts and the delete policy (0 start timeout: none)."""
        return AwaitOptions(
            timeout_seconds=self.timeout_seconds,
            delete_after=self.delete_policy,
            start_timeout_seconds=self.start_timeout_seconds or None,
        )

    def run_policy(self) -> RunPolicy:
        """Restarts, plus the timeout as the job's own deadline."""
        return RunPolicy(backoff_limit=self.backoff_limit, active_deadline_seconds=self.active_deadline_seconds)

    def training_params(self, *, data_dir: str, output_dir: str, checkpoint_dir: str) -> TrainingParams:
        """The program's flags: the component's names become the program's (`--lr`, `--model`)."""
        return TrainingParams(
            data_dir=data_dir,
            output_dir=output_dir,
            checkpoint_dir=checkpoint_dir,
            epochs=self.epochs,
            batch_size=self.batch_size,
            lr=self.learning_rate,
            model=self.architecture,
            seed=self.seed,
        )

    def job_settings(self, plan: JobPlan) -> JobSettings:
        """What every builder takes alike, in one value, for the job named and placed by `plan`."""
        return JobSettings(
            name=plan.name,
            params=plan.params,
            namespace=self.job_namespace,
            kfp_run_id=self.run_id,
            kfp_task_id=self.task_key,
            labels=self.labels or {},
            annotations=self.annotations or {},
            image=self.chosen_image,
            pod=plan.pod,
            workspace_pvc=self.workspace_pvc,
            run_policy=self.run_policy(),
        )

    def pod_options(self, task_config: object) -> PodOptions:
        """The training pods' options: the task's settings (TaskConfig) plus this request's own pod inputs."""
        pod = pod_options(
            task_config,
            explicit=ExplicitResources(cpu=self.cpu, memory=self.memory, gpus=self.gpus),
            workspace_claim=self.workspace_pvc,
            service_account=self.service_account or None,
        )
        return dataclasses.replace(
            pod, image_pull_secrets=tuple(self.image_pull_secrets or ()), priority_class=self.priority_class or None
        )

    @property
    def model_name(self) -> str:
        """The model trained, as the report and the Model artifact name it."""
        return self.architecture

    def preflight(self, backend: str) -> None:
        """Checks that need the training program's environment, made before anything is submitted.

        Nothing by default; `backend` is where the job will run (`kubernetes` or `local`).
        """
        del backend

    def start_notice(self) -> str | None:
        """What the job waits for before its program starts, for the step's log; None when nothing."""
        return None

    @property
    def user_program(self) -> UserProgram | None:
        """The user's own program (command and args as lists); None for kubetrain's trainer."""
        return None

    @abc.abstractmethod
    def to_spec(self, plan: JobPlan) -> JobSpec:
        """The job spec this request makes, for the job named and placed by `plan`."""

    def manifest(self, plan: JobPlan) -> dict[str, Any]:
        """The job manifest this request submits: its spec's manifest, `manifest_patch` applied, validated.

        The training step submits exactly this, and `kubetrain render` prints exactly this.
        """
        manifest = build_manifest(self.to_spec(plan))
        if self.manifest_patch:
            return apply_manifest_patch(manifest, self.manifest_patch)  # validates the patched manifest
        validate_manifest(manifest)
        return manifest
