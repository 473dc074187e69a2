"""Specs validate themselves: every bad value is refused with a SpecError naming field, value, fix."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kubetrain.errors import InvalidInputError, SpecError
from kubetrain.manifests import build_manifest
from kubetrain.names import derive_job_name, is_dns1035_label, sanitize_label_value
from kubetrain.specs import (
    ElasticPolicy,
    EnvVar,
    JobMeta,
    KeyRef,
    MPIJobSpec,
    PSJobSpec,
    PyTorchJobSpec,
    ReplicaSpec,
    Resources,
    RunPolicy,
    Toleration,
    Volume,
    VolumeMount,
)
from tests.crd_schema import strict_errors

IMG = "ghcr.io/kubetrain/pytorch:0.1.0"


def _pt(name: str = "job", workers: int = 2, **kw: object) -> PyTorchJobSpec:
    return PyTorchJobSpec(
        meta=JobMeta(name=name),
        master=ReplicaSpec(image=IMG),
        worker=ReplicaSpec(image=IMG, replicas=workers) if workers else None,
        **kw,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    ("build", "field", "value"),
    [
        (lambda: JobMeta(name="Bad_Name"), "name", "Bad_Name"),
        (lambda: JobMeta(name="1abc"), "name", "1abc"),
        (lambda: JobMeta(name="a" * 64), "name", "a" * 64),
        (lambda: ReplicaSpec(image=IMG, replicas=-1), "replicas", -1),
        (lambda: ReplicaSpec(image=""), "image", ""),
        (lambda: ReplicaSpec(image=IMG, restart_policy="Sometimes"), "restart_policy", "Sometimes"),  # type: ignore[arg-type]
        (lambda: ReplicaSpec(image=IMG, command="python train.py"), "command", "python train.py"),  # type: ignore[arg-type]
        (lambda: Resources(cpu="two"), "resources.cpu", "two"),
        (lambda: Resources(memory="4GB"), "resources.memory", "4GB"),
        (lambda: Resources(gpus=-1), "resources.gpus", -1),
        (lambda: EnvVar(name="1BAD", value="x"), "env.name", "1BAD"),
        (lambda: RunPolicy(backoff_limit=-1), "run_policy.backoff_limit", -1),
        (lambda: RunPolicy(active_deadline_seconds=-5), "run_policy.active_deadline_seconds", -5),
        (lambda: RunPolicy(clean_pod_policy="Some"), "run_policy.clean_pod_policy", "Some"),  # type: ignore[arg-type]
        (lambda: ElasticPolicy(min_replicas=4, max_replicas=2), "elastic.min_replicas", 4),
        (lambda: ElasticPolicy(min_replicas=0, max_replicas=2), "elastic.min_replicas", 0),
        (lambda: _pt(master_port=70000), "master_port", 70000),
        (lambda: _pt(backend="mpi"), "backend", "mpi"),
        (lambda: VolumeMount(name="data", mount_path="relative"), "volume_mounts[data].mount_path", "relative"),
        (lambda: Toleration(key="k", operator="Exists", value="v"), "tolerations.value", "v"),
    ],
)
def test_invalid_values_name_field_value_and_expectation(build: object, field: str, value: object) -> None:
    with pytest.raises(SpecError) as info:
        build()  # type: ignore[operator]
    assert info.value.field == field
    assert info.value.value == value
    assert repr(value)[:40] in str(info.value)
    assert "expected" in str(info.value)
    assert isinstance(info.value, InvalidInputError)


def test_master_must_be_exactly_one() -> None:
    with pytest.raises(SpecError, match=r"master.replicas: got 2; expected exactly 1"):
        PyTorchJobSpec(meta=JobMeta(name="j"), master=ReplicaSpec(image=IMG, replicas=2))


def test_worker_replicas_must_be_positive_when_present() -> None:
    with pytest.raises(SpecError, match=r"worker.replicas: got 0"):
        PyTorchJobSpec(meta=JobMeta(name="j"), master=ReplicaSpec(image=IMG), worker=ReplicaSpec(image=IMG, replicas=0))


def test_name_leaves_room_for_derived_pod_names() -> None:
    # 54 characters + "-worker-10" is 64: the operator could not name the last worker's pod.
    with pytest.raises(SpecError, match=r"operator derives .*-worker-10.* use at most 53 characters"):
        _pt(name="a" * 54, workers=11)
    _pt(name="a" * 53, workers=11)


def test_elastic_needs_workers_within_bounds() -> None:
    with pytest.raises(SpecError, match="elasticPolicy requires Worker"):
        PyTorchJobSpec(meta=JobMeta(name="j"), master=ReplicaSpec(image=IMG),
                       elastic=ElasticPolicy(min_replicas=1, max_replicas=2))  # fmt: skip
    with pytest.raises(SpecError, match=r"worker.replicas: got 5; expected between"):
        PyTorchJobSpec(meta=JobMeta(name="j"), master=None, worker=ReplicaSpec(image=IMG, replicas=5),
                       elastic=ElasticPolicy(min_replicas=1, max_replicas=4))  # fmt: skip


def test_mpi_restart_policy_is_limited_to_what_mpi_operator_accepts() -> None:
    with pytest.raises(SpecError, match="Never or OnFailure"):
        MPIJobSpec(meta=JobMeta(name="m"), launcher=ReplicaSpec(image=IMG, restart_policy="ExitCode"),
                   worker=ReplicaSpec(image=IMG))  # fmt: skip


def test_mount_must_name_a_declared_volume() -> None:
    with pytest.raises(SpecError, match=r"worker.volume_mounts\[/data\].name: got 'data'"):
        PyTorchJobSpec(meta=JobMeta(name="j"), master=ReplicaSpec(image=IMG),
                       worker=ReplicaSpec(image=IMG, volume_mounts=(VolumeMount(name="data", mount_path="/data"),)))  # fmt: skip


def test_env_needs_exactly_one_source() -> None:
    with pytest.raises(SpecError, match="exactly one of"):
        EnvVar(name="A", value="1", secret_key_ref=KeyRef(name="s", key="k"))
    EnvVar(name="TOKEN", secret_key_ref=KeyRef(name="creds", key="token"))


def test_volume_needs_exactly_one_source() -> None:
    with pytest.raises(SpecError, match="exactly one of"):
        Volume(name="v")
    with pytest.raises(SpecError, match="exactly one of"):
        Volume(name="v", claim_name="c", empty_dir=True)


def test_specs_are_frozen_and_maps_read_only() -> None:
    replica = ReplicaSpec(image=IMG, labels={"a": "b"})
    with pytest.raises(AttributeError):
        replica.image = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        replica.labels["c"] = "d"  # type: ignore[index]


def test_derived_job_name_is_stable_unique_and_fits() -> None:
    a = derive_job_name(prefix="pytorch", run_id="run-1", task_id="task-9", max_length=40)
    assert a == derive_job_name(prefix="pytorch", run_id="run-1", task_id="task-9", max_length=40)
    assert a != derive_job_name(prefix="pytorch", run_id="run-2", task_id="task-9", max_length=40)
    assert is_dns1035_label(a) and len(a) <= 40
    long_id = "x" * 200
    assert len(sanitize_label_value(long_id)) <= 63


# --- property tests -----------------------------------------------------------------------------

_names = st.from_regex(r"[a-z][a-z0-9-]{0,30}[a-z0-9]", fullmatch=True)
_bad_names = st.one_of(
    st.text(min_size=1, max_size=80).filter(lambda s: not is_dns1035_label(s)),
    st.just(""),
)
_quantities = st.sampled_from(["1", "500m", "2Gi", "0.5", "1e3", "128Mi", "4"])


@settings(max_examples=60, deadline=None)
@given(name=_bad_names)
def test_any_invalid_name_raises_spec_error(name: str) -> None:
    with pytest.raises(SpecError):
        JobMeta(name=name)


@settings(max_examples=60, deadline=None)
@given(replicas=st.integers(max_value=-1) | st.booleans(), image=st.text(max_size=5))
def test_any_invalid_replica_raises_spec_error_never_a_crash(replicas: int, image: str) -> None:
    with pytest.raises(SpecError):
        ReplicaSpec(image=image or IMG, replicas=replicas)


@settings(max_examples=60, deadline=None)
@given(
    cpu=st.text(min_size=1, max_size=6).filter(lambda s: not s.replace(".", "").isdigit()),
)
def test_any_garbage_quantity_raises_spec_error(cpu: str) -> None:
    from kubetrain.names import is_quantity

    if is_quantity(cpu):
        Resources(cpu=cpu)
    else:
        with pytest.raises(SpecError):
            Resources(cpu=cpu)


@settings(max_examples=40, deadline=None)
@given(
    name=_names,
    workers=st.integers(min_value=0, max_value=12),
    cpu=st.none() | _quantities,
    gpus=st.integers(min_value=0, max_value=8),
    deadline=st.none() | st.integers(min_value=1, max_value=10**6),
    policy=st.sampled_from([None, "Never", "OnFailure", "ExitCode", "Always"]),
    backoff=st.none() | st.integers(min_value=0, max_value=20),
)
def test_every_valid_pytorch_spec_renders_a_strictly_valid_manifest(
    name: str, workers: int, cpu: str | None, gpus: int, deadline: int | None, policy: str | None, backoff: int | None
) -> None:
    replica = ReplicaSpec(image=IMG, resources=Resources(cpu=cpu, gpus=gpus), restart_policy=policy)  # type: ignore[arg-type]
    spec = PyTorchJobSpec(
        meta=JobMeta(name=name, kfp_run_id="run", kfp_task_id="task"),
        master=replica,
        worker=ReplicaSpec(image=IMG, replicas=workers, restart_policy=policy) if workers else None,  # type: ignore[arg-type]
        run_policy=RunPolicy(active_deadline_seconds=deadline, backoff_limit=backoff),
    )
    assert strict_errors(build_manifest(spec)) == []


@settings(max_examples=30, deadline=None)
@given(name=_names, workers=st.integers(1, 8), slots=st.integers(1, 4), ps=st.integers(1, 4))
def test_every_valid_mpi_and_ps_spec_renders_a_strictly_valid_manifest(
    name: str, workers: int, slots: int, ps: int
) -> None:
    mpi = MPIJobSpec(meta=JobMeta(name=name), launcher=ReplicaSpec(image=IMG),
                     worker=ReplicaSpec(image=IMG, replicas=workers), slots_per_worker=slots)  # fmt: skip
    assert strict_errors(build_manifest(mpi)) == []
    psjob = PSJobSpec(meta=JobMeta(name=name), master=ReplicaSpec(image=IMG), ps=ReplicaSpec(image=IMG, replicas=ps),
                      worker=ReplicaSpec(image=IMG, replicas=workers))  # fmt: skip
    assert strict_errors(build_manifest(psjob)) == []
