"""KFP's real namespace hook (upstream's sync.py) minting per-profile keys on a real SeaweedFS with its IAM API.

No cluster: one `weed server` with `-iam` (tools/cluster/kfp/object_store.py, `WeedPorts.iam`), the
admin identity put into its filer, upstream's sync.py from the extracted KFP tree served by
tools/cluster/kfp/profile_hook.py, and two profiles' namespaces POSTed to it as metacontroller
would. The keys it hands back are then used with boto3 (tests/integration/namespace_keys_check.py,
in the KFP services venv). Skips, saying what to build, when `weed`, the services venv or the KFP
source tree is missing.
"""

from __future__ import annotations

import base64
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration import weed_server
from tools.cluster import build_script
from tools.cluster.kfp import api_server, backend, manifests, object_store, profile_hook, services_venv
from tools.cluster.kfp.profiles import Profile, profile_documents

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
CHECK = Path(__file__).with_name("namespace_keys_check.py")
WEED = object_store.built_weed()
PYTHON = services_venv.python(services_venv.venv_dir())
KFP_SRC = (
    (build_script.printed_folder(backend.BUILD_SCRIPT, "--print-bin") or Path("/nonexistent")).parent
    / "src"
    / "pipelines"
)
if WEED is None:
    pytest.skip("SeaweedFS is not built: run tools/seaweedfs/build.sh (make e2e builds it)", allow_module_level=True)
if not PYTHON.exists():
    pytest.skip("the KFP services venv (botocore for sync.py, boto3 for the checks) is not built: "
                "python -c 'from tools.cluster.kfp import services_venv; services_venv.ensure()'",
                allow_module_level=True)  # fmt: skip
if not (KFP_SRC / profile_hook.HOOK_SCRIPT).is_file():
    pytest.skip(f"KFP's source tree is not extracted ({KFP_SRC}): run tools/kfp/build.sh", allow_module_level=True)


@pytest.fixture(scope="module")
def hook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(the hook's URL, the store's S3 URL): weed with its IAM API, the admin in its filer, sync.py serving."""
    assert WEED is not None
    run = tmp_path_factory.mktemp("profile-hook")
    taken: set[int] = set()
    ports = weed_server.free_ports(taken)
    access_key, secret_key = manifests.S3_ACCESS_KEY, manifests.S3_SECRET_KEY
    argv = object_store.prepare_seaweedfs(run, WEED, ip="127.0.0.1", ports=ports, access_key=access_key,
                                          secret_key=secret_key)  # fmt: skip
    s3 = f"http://127.0.0.1:{ports.s3}"
    with weed_server.process(argv, run / "weed.log", object_store.wait_ready_url("127.0.0.1", ports)):
        object_store.put_admin_identity("127.0.0.1", ports, access_key=access_key, secret_key=secret_key)
        _check("bucket", s3)
        settings = profile_hook.HookSettings(kfp_version=api_server.kfp_version(), iam_url=f"http://127.0.0.1:{ports.iam}",
                                             s3_url=s3, port=weed_server.free_port(taken), access_key=access_key,
                                             secret_key=secret_key)  # fmt: skip
        argv = profile_hook.hook_argv(PYTHON, profile_hook.hook_script(KFP_SRC))
        url = profile_hook.hook_url(settings.port)
        env = {**services_venv.environment(), **settings.environment()}
        with weed_server.process(argv, run / "sync.log", url, env=env, ok_only=False):
            yield url, s3


def _check(scenario: str, s3: str, extra: dict[str, str] | None = None) -> None:
    env = {**services_venv.environment(), "S3_ENDPOINT": s3, "S3_ACCESS_KEY": manifests.S3_ACCESS_KEY,
           "S3_SECRET_KEY": manifests.S3_SECRET_KEY, **(extra or {})}  # fmt: skip
    done = subprocess.run([str(PYTHON), str(CHECK), scenario], capture_output=True, text=True, env=env, timeout=180,
                          check=False)  # fmt: skip
    assert done.returncode == 0 and f"ok {scenario}" in done.stdout, done.stdout + done.stderr[-4000:]


def _namespace(name: str) -> dict[str, Any]:
    return profile_documents(Profile(name, f"{name}@example.com"))[0]


def _keys(objects: list[dict[str, Any]]) -> tuple[str, str]:
    (secret,) = [o for o in objects if o["kind"] == "Secret"]
    assert secret["metadata"]["name"] == "mlpipeline-minio-artifact"
    data = secret["data"]  # base64, as sync.py puts it
    return base64.b64decode(data["accesskey"]).decode(), base64.b64decode(data["secretkey"]).decode()


def test_each_profile_gets_the_hooks_objects_and_keys_that_reach_only_its_own_prefix(hook: tuple[str, str]) -> None:
    url, s3 = hook
    alice = profile_hook.sync_namespace(url, _namespace("alice"))
    bob = profile_hook.sync_namespace(url, _namespace("bob"))
    names = {(o["kind"], o["metadata"]["name"]) for o in alice}
    assert names == {("Secret", "mlpipeline-minio-artifact"), ("ConfigMap", "kfp-launcher"),
                     ("ConfigMap", "metadata-grpc-configmap"), ("ConfigMap", "artifact-repositories")}  # fmt: skip
    (launcher,) = [o for o in alice if o["metadata"]["name"] == "kfp-launcher"]
    assert launcher["data"]["defaultPipelineRoot"] == "minio://mlpipeline/private-artifacts/alice/v2/artifacts"
    assert {o["metadata"]["namespace"] for o in alice} == {"alice"}
    (alice_key, alice_secret), (bob_key, bob_secret) = _keys(alice), _keys(bob)
    assert alice_key != bob_key and manifests.S3_ACCESS_KEY not in (alice_key, bob_key)
    _check("isolation", s3, {"OWN": "alice", "OTHER": "bob", "OWN_ACCESS_KEY": alice_key, "OWN_SECRET_KEY": alice_secret,
                             "OTHER_ACCESS_KEY": bob_key, "OTHER_SECRET_KEY": bob_secret})  # fmt: skip


def test_a_namespace_that_has_its_secret_keeps_it_and_nothing_is_created_twice(hook: tuple[str, str]) -> None:
    url, _ = hook
    first = profile_hook.sync_namespace(url, _namespace("carol"))
    again = profile_hook.sync_namespace(url, _namespace("carol"), observed=first)
    assert _keys(again) == _keys(first)  # the DecoratorController's OnDelete: no new keys on a resync
    assert profile_hook.to_create(again, observed=first) == []


def test_a_namespace_without_the_pipelines_label_gets_nothing(hook: tuple[str, str]) -> None:
    url, _ = hook
    plain = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "dave", "labels": {}}}
    assert profile_hook.sync_namespace(url, plain) == []
