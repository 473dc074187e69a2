"""The store's IAM switch (tools/cluster/kfp/object_store.py) and the pure parts of the metacontroller
stand-in (tools/cluster/kfp/profile_hook.py); tests/integration/test_kfp_profile_hook.py runs them for real."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tools.cluster.kfp import object_store, profile_hook


def test_the_store_runs_no_iam_server_unless_asked(tmp_path: Path) -> None:
    plain = object_store.WeedPorts(s3=1, master=2, volume=3, filer=4)
    argv = object_store.weed_argv(Path("/w"), ip="10.0.0.1", data_dir=tmp_path, config=tmp_path / "c", ports=plain)
    assert not [a for a in argv if a.startswith(("-iam", "-filer.saveToFilerLimit"))]
    assert len(plain.all()) == 8


def test_with_an_iam_port_the_store_serves_the_iam_api_and_keeps_identity_files_inline(tmp_path: Path) -> None:
    ports = object_store.WeedPorts(s3=1, master=2, volume=3, filer=4, iam=5)
    argv = object_store.weed_argv(Path("/w"), ip="10.0.0.1", data_dir=tmp_path, config=tmp_path / "c", ports=ports)
    assert {"-iam", "-iam.port=5", "-filer.saveToFilerLimit=4096"} <= set(argv)
    assert 5 in ports.all() and ports.described()[5] == "SeaweedFS (IAM API)"
    with pytest.raises(object_store.ObjectStoreError, match="the same"):
        object_store.WeedPorts(s3=1, master=2, volume=3, filer=4, iam=1)


def test_the_admin_identity_is_stored_as_s3_configure_stores_it() -> None:
    identity = json.loads(object_store.admin_identity("AK", "SK"))
    # weed/credential/filer_etc reads the file with encoding/json: the proto fields' snake_case names.
    assert identity == {"name": "kubeflow-admin", "credentials": [{"access_key": "AK", "secret_key": "SK"}],
                        "actions": ["Admin"]}  # fmt: skip
    ports = object_store.WeedPorts(s3=1, master=2, volume=3, filer=4, iam=5)
    assert object_store.admin_identity_url("h", ports) == "http://h:4/etc/iam/identities/kubeflow-admin.json"


def test_the_hook_is_served_on_loopback_with_upstreams_settings() -> None:
    argv = profile_hook.hook_argv(Path("/venv/bin/python"), Path("/kfp/sync.py"))
    assert argv[-2:] == ["/kfp", "127.0.0.1"]  # not every interface: it mints keys for any POST
    settings = profile_hook.HookSettings(kfp_version="2.17.0", iam_url="http://h:8111", s3_url="http://h:8333",
                                         access_key="AK", secret_key="SK", port=9)  # fmt: skip
    env = settings.environment()
    assert env["AWS_ENDPOINT_URL"] == "http://h:8111" and env["S3_ENDPOINT_URL"] == "http://h:8333"
    assert env["DISABLE_ISTIO_SIDECAR"] == "true" and env["ARTIFACTS_PROXY_ENABLED"] == "false"
    assert env["CONTROLLER_PORT"] == "9" and env["ARTIFACT_RETENTION_DAYS"] == "-1"


def test_metacontrollers_attachments_are_keyed_by_kind_and_name_with_every_kind_present() -> None:
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "mlpipeline-minio-artifact",
                                                                  "namespace": "alice"}}  # fmt: skip
    unrelated = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "alice"}}
    observed = profile_hook.attachments([secret, unrelated])
    assert observed == {"Secret.v1": {"alice/mlpipeline-minio-artifact": secret}, "ConfigMap.v1": {},
                        "Deployment.apps/v1": {}, "Service.v1": {}}  # fmt: skip


def test_what_exists_is_never_created_again_or_updated() -> None:
    def obj(kind: str, name: str, value: str = "") -> dict[str, Any]:
        return {"kind": kind, "metadata": {"name": name, "namespace": "alice"}, "data": {"v": value}}

    desired = [obj("ConfigMap", "kfp-launcher", "new"), obj("Secret", "mlpipeline-minio-artifact")]
    observed = [obj("ConfigMap", "kfp-launcher", "old")]
    assert profile_hook.to_create(desired, observed) == [obj("Secret", "mlpipeline-minio-artifact")]
