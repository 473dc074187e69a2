"""The KFP tier's MLMD server (tools/cluster/kfp/mlmd_server.py), driven by MLMD's own Python gRPC client.

No cluster: the server and the client run from the services venv (tools/cluster/kfp/services_venv.py),
which the first run builds from PyPI (about 30 s) and caches. The client records what KFP's driver and
launcher record for one task (types, run context, execution, output artifacts, events, attributions
and associations), reads it back, and prints a JSON summary the tests assert on.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tools.cluster.kfp import services_venv
from tools.cluster.kfp.services_venv import REPO_ROOT, ServicesVenvError

SERVER = REPO_ROOT / "tools" / "cluster" / "kfp" / "mlmd_server.py"
pytestmark = [pytest.mark.timeout(900)]  # the first run builds the services venv

CLIENT = r"""
import json, sys
import grpc
from ml_metadata import errors
from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2 as mlmd
from ml_metadata.proto import metadata_store_service_pb2 as svc, metadata_store_service_pb2_grpc as svc_grpc

host, port, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
store = metadata_store.MetadataStore(mlmd.MetadataStoreClientConfig(host=host, port=port))
out = {}

def failure(call):
    try:
        call()
    except errors.StatusError as e:
        return [type(e).__name__, e.error_code, e.message]
    return None

if mode == "write":
    model = mlmd.ArtifactType(name="system.Model", properties={"framework": mlmd.STRING})
    out["type_ids"] = [store.put_artifact_type(model),
                       store.put_execution_type(mlmd.ExecutionType(name="system.ContainerExecution")),
                       store.put_context_type(mlmd.ContextType(name="system.PipelineRun"))]
    model_t, exec_t, run_t = out["type_ids"]
    out["same_type_again"] = store.put_artifact_type(model)
    [ctx] = store.put_contexts([mlmd.Context(type_id=run_t, name="run-1")])
    # The driver: the execution, in the run's context.
    running = mlmd.Execution(type_id=exec_t, name="run-1/train", last_known_state=mlmd.Execution.RUNNING)
    running.custom_properties["task_name"].string_value = "train"
    [execution] = store.put_executions([running])
    model_art = mlmd.Artifact(type_id=model_t, uri="s3://mlpipeline/run-1/train/model", state=mlmd.Artifact.LIVE)
    model_art.properties["framework"].string_value = "torch"
    [art] = store.put_artifacts([model_art])
    store.put_events([mlmd.Event(artifact_id=art, execution_id=execution, type=mlmd.Event.OUTPUT,
                                 path=mlmd.Event.Path(steps=[mlmd.Event.Path.Step(key="model")]))])
    store.put_attributions_and_associations([mlmd.Attribution(artifact_id=art, context_id=ctx)],
                                            [mlmd.Association(execution_id=execution, context_id=ctx)])
    # The launcher: the finished execution with a second output, in one PutExecution.
    done = mlmd.Execution(id=execution, type_id=exec_t, last_known_state=mlmd.Execution.COMPLETE)
    metrics = mlmd.Artifact(type_id=model_t, uri="s3://mlpipeline/run-1/train/metrics", state=mlmd.Artifact.LIVE)
    event = mlmd.Event(type=mlmd.Event.OUTPUT, path=mlmd.Event.Path(steps=[mlmd.Event.Path.Step(key="metrics")]))
    context = mlmd.Context(id=ctx, type_id=run_t, name="run-1")
    out["same_execution"] = store.put_execution(done, [(metrics, event)], [context])[0] == execution
    out["artifacts"] = sorted(a.uri for a in store.get_artifacts_by_context(ctx))
    out["framework"] = store.get_artifacts_by_id([art])[0].properties["framework"].string_value
    out["executions"] = [[e.name, mlmd.Execution.State.Name(e.last_known_state)]
                         for e in store.get_executions_by_context(ctx)]
    out["events"] = sorted([mlmd.Event.Type.Name(e.type), e.path.steps[0].key, e.artifact_id == art]
                           for e in store.get_events_by_execution_ids([execution]))
    out["unknown_type"] = failure(lambda: store.get_artifact_type("system.NoSuchType"))
    retyped = mlmd.ArtifactType(name="system.Model", properties={"framework": mlmd.INT})
    out["retyped"] = failure(lambda: store.put_artifact_type(retyped))
    grown = mlmd.ArtifactType(name="system.Model", properties={"framework": mlmd.STRING, "epochs": mlmd.INT})
    out["grown"] = failure(lambda: store.put_artifact_type(grown))
    out["grown_can_add_fields"] = store.put_artifact_type(grown, can_add_fields=True) == model_t
    out["duplicate_context"] = failure(lambda: store.put_contexts([mlmd.Context(type_id=run_t, name="run-1")]))
    stub = svc_grpc.MetadataStoreServiceStub(grpc.insecure_channel(f"{host}:{port}"))
    out["unimplemented"] = {}
    for name, request in [("GetLineageGraph", svc.GetLineageGraphRequest()),
                          ("GetParentContextsByContexts", svc.GetParentContextsByContextsRequest()),
                          ("GetChildrenContextsByContexts", svc.GetChildrenContextsByContextsRequest())]:
        try:
            getattr(stub, name)(request, timeout=30)
            out["unimplemented"][name] = None
        except grpc.RpcError as e:
            out["unimplemented"][name] = [e.code().name, e.details()]
else:
    ctx = store.get_context_by_type_and_name("system.PipelineRun", "run-1")
    out["artifacts"] = sorted(a.uri for a in store.get_artifacts_by_context(ctx.id))
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return services_venv.ensure(log=tmp_path_factory.mktemp("services-venv") / "build.log")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(venv: Path, sqlite: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    argv = [str(services_venv.python(venv)), str(SERVER), "--host", "127.0.0.1", "--port", str(port),
            "--sqlite", str(sqlite)]  # fmt: skip
    with log.open("ab") as err:
        return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, env=services_venv.environment())


@contextmanager
def _serving(venv: Path, sqlite: Path, log: Path) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """A started server, listening; killed on the way out if the test did not stop it."""
    port = _free_port()
    proc = _start(venv, sqlite, port, log)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, f"mlmd_server exited {proc.returncode}:\n{log.read_text()}"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, f"not listening on {port} after 60 s:\n{log.read_text()}"
                time.sleep(0.1)
        yield proc, port
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _client(venv: Path, port: int, mode: str) -> dict[str, Any]:
    done = subprocess.run([str(services_venv.python(venv)), "-c", CLIENT, "127.0.0.1", str(port), mode],
                          capture_output=True, text=True, env=services_venv.environment(), timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, f"client {mode} failed (exit {done.returncode}):\n{done.stderr[-3000:]}"
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_kfp_metadata_round_trip(venv: Path, tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    with _serving(venv, tmp_path / "metadata.sqlite", log) as (_, port):
        out = _client(venv, port, "write")
    assert len(set(out["type_ids"])) == 3
    assert out["same_type_again"] == out["type_ids"][0], "an identical type re-put must return the same id"
    assert out["artifacts"] == ["s3://mlpipeline/run-1/train/metrics", "s3://mlpipeline/run-1/train/model"]
    assert out["framework"] == "torch"
    assert out["same_execution"] is True
    assert out["executions"] == [["run-1/train", "COMPLETE"]]
    assert out["events"] == [["OUTPUT", "metrics", False], ["OUTPUT", "model", True]]
    assert out["unknown_type"][:2] == ["NotFoundError", 5]
    assert "system.NoSuchType" in out["unknown_type"][2]
    # MLMD's real answers to a redefined type: ALREADY_EXISTS for a changed property type and for a new
    # property without can_add_fields (what KFP's PutArtifactType calls must avoid).
    assert out["retyped"][:2] == ["AlreadyExistsError", 6], out["retyped"]
    assert out["grown"][:2] == ["AlreadyExistsError", 6], out["grown"]
    assert out["grown_can_add_fields"] is True
    assert out["duplicate_context"][:2] == ["AlreadyExistsError", 6], out["duplicate_context"]
    for name, answer in out["unimplemented"].items():
        assert answer is not None, f"{name} answered OK"
        assert answer[0] == "UNIMPLEMENTED", (name, answer)
        assert name in answer[1]
    assert sorted(out["unimplemented"]) == ["GetChildrenContextsByContexts", "GetLineageGraph",
                                           "GetParentContextsByContexts"]  # fmt: skip
    text = log.read_text()
    assert f"mlmd_server: serving ml_metadata.MetadataStoreService on 127.0.0.1:{port} (sqlite " in text
    assert "GetArtifactType: NOT_FOUND" in text, "failed calls are logged"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_stops_gracefully_and_a_restart_keeps_the_data(venv: Path, tmp_path: Path, signum: int) -> None:
    sqlite, log = tmp_path / "metadata.sqlite", tmp_path / "server.log"
    with _serving(venv, sqlite, log) as (proc, port):
        written = _client(venv, port, "write")["artifacts"]
        proc.send_signal(signum)
        assert proc.wait(timeout=60) == 0, log.read_text()  # the timeout only guards against a hang
    assert log.read_text().rstrip().endswith("mlmd_server: stopped")
    with _serving(venv, sqlite, log) as (proc, port):
        assert _client(venv, port, "read")["artifacts"] == written
        proc.terminate()
        assert proc.wait(timeout=60) == 0


def test_a_second_server_on_a_taken_port_fails_instead_of_sharing_it(venv: Path, tmp_path: Path) -> None:
    with _serving(venv, tmp_path / "a.sqlite", tmp_path / "a.log") as (_, port):
        second = _start(venv, tmp_path / "b.sqlite", port, tmp_path / "b.log")
        assert second.wait(timeout=60) == 2
    assert f"cannot listen on 127.0.0.1:{port}" in (tmp_path / "b.log").read_text()


def test_a_store_that_cannot_open_fails_with_the_reason(venv: Path, tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    proc = _start(venv, tmp_path / "no-such-dir" / "metadata.sqlite", _free_port(), log)
    assert proc.wait(timeout=60) == 2
    assert "mlmd_server: cannot open the metadata store: " in log.read_text()
    assert "unable to open database file" in log.read_text()


def test_every_canonical_code_maps_to_the_same_grpc_code_and_others_to_unknown(venv: Path) -> None:
    check = (
        "import sys; sys.path.insert(0, sys.argv[1]); import grpc, mlmd_server as m\n"
        "assert all(m.status(c).value[0] == c for c in range(17))\n"
        "assert m.status(99) is grpc.StatusCode.UNKNOWN and m.status(-1) is grpc.StatusCode.UNKNOWN\n"
        "print(len(m.handlers(None)))\n"
    )
    done = subprocess.run([str(services_venv.python(venv)), "-c", check, str(SERVER.parent)], capture_output=True,
                          text=True, env=services_venv.environment(), timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "52", "one handler per MetadataStoreService method"


def test_a_failed_venv_build_leaves_nothing_that_looks_ready(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(f"{tmp_path}/kubetrain_missing-1.0-py3-none-any.whl\n")
    link = services_venv.venv_dir(requirements)
    assert str(link).startswith(str(tmp_path / "cache" / "kubetrain" / "kfp-services"))
    (link.parent / "venv-killed" / "bin").mkdir(parents=True)  # what a build killed half-way leaves
    with pytest.raises(ServicesVenvError, match=r"`\S+/python -m pip install --no-deps -r \S+` failed \(exit 1\)"):
        services_venv.ensure(log=tmp_path / "build.log", requirements=requirements)
    assert not link.exists() and not link.is_symlink()
    assert sorted(p.name for p in link.parent.iterdir()) == [".lock"], "the failed and the stale build are removed"
    assert "kubetrain_missing-1.0-py3-none-any.whl" in (tmp_path / "build.log").read_text()
