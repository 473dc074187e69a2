"""The job's common settings, in the one value every builder takes: :class:`JobSettings`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kubetrain.names import LABEL_COMPONENT
from kubetrain.presets.defaults import PodOptions, TrainingParams, workspace_for
from kubetrain.specs import JobMeta, RunPolicy, Workspace


@dataclass(frozen=True, kw_only=True)
class JobSettings:
    """What every builder takes alike, in one value: who the job is, what its program is told, where its pods run.

    A builder takes this and only its own kind's parts (`workers`, `elastic`, ...): a request
    builds one (:meth:`~kubetrain.kfp_runtime.request_base.TrainingRequest.job_settings`) and hands
    it over whole. `image` None is kubetrain's image for the builder's framework; `run_policy` None
    is the builder's default (a TrainJob takes only its deadline: restarts are its runtime's).
    """

    name: str
    params: TrainingParams
    namespace: str | None = None
    kfp_run_id: str | None = None
    kfp_task_id: str | None = None
    image: str | None = None
    pod: PodOptions = field(default_factory=PodOptions)
    workspace_pvc: str | None = None
    run_policy: RunPolicy | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)

    def meta(self, component: str) -> JobMeta:
        """The job's metadata: name, namespace, the KFP run and task, the component label, the user's metadata."""
        return JobMeta(
            labels={LABEL_COMPONENT: component},
            name=self.name,
            namespace=self.namespace,
            kfp_run_id=self.kfp_run_id,
            kfp_task_id=self.kfp_task_id,
            user_labels=self.labels,
            user_annotations=self.annotations,
        )

    @property
    def workspace(self) -> Workspace | None:
        """The workspace claim mounted at the usual place, if there is one."""
        return workspace_for(self.workspace_pvc)
