"""Which KFP run and task a training step is, read from where KFP puts it: the step's output artifact URI.

A job's name must differ between two tasks of a DAG and between the iterations of a
`dsl.ParallelFor`, and stay the same when KFP retries a task (so the retry adopts its job). The
inputs `run_id`, `task_id` and `task_name` can say it, but a placeholder as an input's *default*
is not resolved by the KFP 2.17 driver (``driver/resolve.go`` substitutes ``{{$.pipeline_job_uuid}}``
and the rest only in a task's own constant arguments; an optional input left out is skipped and the
executor falls back to the function's default, the literal placeholder). So a call without them
finds its identity in the executor input instead, which every runner fills:

- **KFP backend** (2.17 ``driver.provisionOutputs``): each output artifact's URI is
  ``<pipeline root>/<pipeline name>/<run uuid>/<task name>/<uuid>/<output>``. The driver draws the
  last uuid once per task execution: every ParallelFor iteration has its own driver, hence its own
  uuid, while a retry reruns only the executor pod with the driver's executor input (Argo's
  retryStrategy sits on the executor template; ``launcher_v2.go`` notes that "all retry pods
  share the single URI that the driver provisioned"). Run = the run uuid, task = task name + uuid.
- **kfp.local** (2.17 ``executor_input_utils``): ``<pipeline root>/<pipeline>-<YYYY-mm-dd-HH-MM-SS-ffffff>/
  [<DAG task>/...]<component>/<output>``; a ParallelFor iteration's tasks sit under
  ``for-loop-N-iteration-I/``, and its retries reuse the same directory. Run = the timestamped
  segment, task = the path below it.

The pod's own metadata (KFP_POD_NAME, Argo's node-name annotation) changes with every retry or
needs a Kubernetes read of the pod, so it is not used. An input given explicitly wins over what
is read here, field by field.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from kubetrain.errors import InvalidInputError

IDENTITY_FIELDS = ("run_id", "task_id", "task_name")
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")
# kfp.local's pipeline resource name: `<pipeline name>-<datetime.now():%Y-%m-%d-%H-%M-%S-%f>`.
_LOCAL_RUN = re.compile(r"^.+-\d{4}-\d{2}-\d{2}-\d{2}-\d{2}-\d{2}-\d{6}\Z")


@dataclass(frozen=True, kw_only=True)
class TaskIdentity:
    """One task execution's identity within its run, and where it was read from."""

    run_id: str
    task_id: str
    task_name: str
    source: str  # "inputs", "kfp-backend" or "kfp-local"

    def __post_init__(self) -> None:
        for name in IDENTITY_FIELDS:
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise InvalidInputError(f"{name}: got {value!r}; expected a non-empty string")


def _segments(uri: str) -> list[str]:
    """The URI's path segments after its scheme and bucket, without empty ones."""
    path = uri.split("?", 1)[0].split("#", 1)[0]
    _, sep, rest = path.partition("://")
    return [s for s in (rest if sep else path).split("/") if s]


def from_output_uri(uri: str) -> TaskIdentity | None:
    """The identity an output artifact's URI holds, on the KFP backend or kfp.local; None for another form."""
    parts = _segments(uri)
    # Backend: .../<run uuid>/<task name>/<uuid>/<output>.
    if len(parts) >= 4 and _UUID.match(parts[-2]) and _UUID.match(parts[-4]):
        return TaskIdentity(run_id=parts[-4], task_id=parts[-2], task_name=parts[-3], source="kfp-backend")
    # kfp.local: .../<pipeline>-<timestamp>/[<DAG task>/...]<component>/<output>.
    for i in range(len(parts) - 3, -1, -1):
        if _LOCAL_RUN.match(parts[i]):
            task_path = parts[i + 1 : -1]
            return TaskIdentity(
                run_id=parts[i], task_id="/".join(task_path), task_name=task_path[-1], source="kfp-local"
            )
    return None


def resolve_identity(inputs: Mapping[str, object], *, output_uri: str) -> TaskIdentity:
    """The task's identity: each of run_id, task_id, task_name as given, else read from `output_uri`.

    Raises InvalidInputError naming the URI and the fix when some are missing and the URI is of
    no known runner's form.
    """
    given = {name: inputs.get(name) or "" for name in IDENTITY_FIELDS}
    for name, value in given.items():
        if not isinstance(value, str) or value.startswith("{{$"):
            raise InvalidInputError(
                f"{name}: got {value!r}; leave it out (the step finds its run and task itself), or pass a "
                "string, or pass the placeholder as the task's argument (dsl.PIPELINE_JOB_ID_PLACEHOLDER, "
                "dsl.PIPELINE_TASK_ID_PLACEHOLDER, dsl.PIPELINE_TASK_NAME_PLACEHOLDER): KFP resolves those "
                "only there, not as an input's default"
            )
    if all(given.values()):
        return TaskIdentity(**{k: str(v) for k, v in given.items()}, source="inputs")
    found = from_output_uri(output_uri)
    if found is None:
        missing = ", ".join(name for name, value in given.items() if not value)
        raise InvalidInputError(
            f"{missing}: not given, and the step's output URI {output_uri!r} is neither the KFP backend's form "
            "(<root>/<pipeline>/<run uuid>/<task>/<uuid>/<output>) nor kfp.local's; pass run_id, task_id and "
            "task_name (e.g. dsl.PIPELINE_JOB_ID_PLACEHOLDER, dsl.PIPELINE_TASK_ID_PLACEHOLDER, "
            "dsl.PIPELINE_TASK_NAME_PLACEHOLDER as the task's arguments)"
        )
    return TaskIdentity(
        run_id=str(given["run_id"] or found.run_id),
        task_id=str(given["task_id"] or found.task_id),
        task_name=str(given["task_name"] or found.task_name),
        source="inputs" if all(given.values()) else found.source,
    )
