"""KFP's namespace hook (upstream's `sync.py`, unchanged) and the metacontroller stand-in that calls it.

In a multi-user Kubeflow, metacontroller runs KFP's DecoratorController
(`multi-user/pipelines-profile-controller/decorator-controller.yaml`): for every namespace labelled
`pipelines.kubeflow.org/enabled: "true"` it POSTs `{"controller", "object", "attachments"}` to
`sync.py`'s HTTP server and creates the attachments it answers with. metacontroller is refused by
the Go module proxy, so this module plays its part: `sync_namespace` POSTs what it would and
returns the objects, and `to_create` keeps those not there yet (the DecoratorController's `OnDelete`
strategy for Secrets and ConfigMaps: never updated once created). What comes back for a namespace:
ConfigMaps `kfp-launcher` (`defaultPipelineRoot: minio://mlpipeline/private-artifacts/<ns>/v2/artifacts`),
`metadata-grpc-configmap` and `artifact-repositories`, and the Secret `mlpipeline-minio-artifact`
with keys `sync.py` minted through SeaweedFS's IAM API, scoped to the namespace's prefixes.

`sync.py` itself runs as upstream ships it, from the KFP source tree, in an interpreter with
botocore (the KFP services venv). One difference, in how it is started (`hook_argv`): upstream's
`main()` binds every interface; here it is served on loopback, because it holds the store's admin
keys and answers any POST with fresh keys for the namespace named in it, and pods can reach the
host's other addresses.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

HOOK_SCRIPT = "manifests/kustomize/base/installs/multi-user/pipelines-profile-controller/sync.py"
CONTROLLER = "kubeflow-pipelines-profile-controller"
ENABLED_LABEL = "pipelines.kubeflow.org/enabled"
# The attachment kinds of KFP's DecoratorController that sync.py reads (the Istio ones it no longer
# returns are left out), in metacontroller's "Kind.apiVersion" spelling.
ATTACHMENT_KINDS = {"Secret": "v1", "ConfigMap": "v1", "Deployment": "apps/v1", "Service": "v1"}
TIMEOUT_S = 60  # one sync makes a few IAM and S3 calls; the store may be slow under load


class ProfileHookError(RuntimeError):
    """The hook could not be reached or answered nonsense; the message says where to look."""


@dataclass(frozen=True)
class HookSettings:
    """The hook's environment, as KFP's `pipelines-profile-controller/deployment.yaml` sets it."""

    kfp_version: str
    iam_url: str  # SeaweedFS's IAM API (upstream: http://seaweedfs.kubeflow:8111)
    s3_url: str  # its S3 API (upstream: http://seaweedfs.kubeflow:8333)
    access_key: str  # the store's admin keys (the `kubeflow` namespace's mlpipeline-minio-artifact)
    secret_key: str
    port: int
    artifact_retention_days: int = -1  # pipeline-install-config's default: no lifecycle rule

    def environment(self) -> dict[str, str]:
        """The variables `sync.py` reads (add them to a clean environment of the venv's)."""
        return {
            "KFP_VERSION": self.kfp_version, "CONTROLLER_PORT": str(self.port),
            "DISABLE_ISTIO_SIDECAR": "true",  # no mesh here
            "AWS_ENDPOINT_URL": self.iam_url, "S3_ENDPOINT_URL": self.s3_url, "AWS_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "ARTIFACTS_PROXY_ENABLED": "false", "OBJECT_STORE_HOST": "seaweedfs",
            "ARTIFACT_RETENTION_DAYS": str(self.artifact_retention_days),
        }  # fmt: skip


def hook_script(kfp_src: Path) -> Path:
    """`sync.py` in the KFP source tree (`manifests.kfp_tree`)."""
    path = kfp_src / HOOK_SCRIPT
    if not path.is_file():
        raise ProfileHookError(f"{path} is missing: run tools/kfp/build.sh (it extracts the KFP source tree)")
    return path


def hook_argv(python: Path, script: Path, host: str = "127.0.0.1") -> list[str]:
    """Serve upstream's `sync.py` on `host`: its own `server_factory` and settings, only the address ours."""
    serve = ("import sys; sys.path.insert(0, sys.argv[1]); import sync; "
             "sync.server_factory(**sync.get_settings_from_env(), url=sys.argv[2]).serve_forever()")  # fmt: skip
    return [str(python), "-u", "-c", serve, str(script.parent), host]


def attachments(observed: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Mapping[str, Any]]]:
    """metacontroller's `attachments` map: {"Kind.apiVersion": {"namespace/name": object}}, every kind present."""
    out: dict[str, dict[str, Mapping[str, Any]]] = {f"{k}.{v}": {} for k, v in ATTACHMENT_KINDS.items()}
    for obj in observed:
        key = f"{obj.get('kind')}.{obj.get('apiVersion')}"
        if key in out:
            meta = obj.get("metadata", {})
            out[key][f"{meta.get('namespace')}/{meta.get('name')}"] = obj
    return out


def sync_namespace(url: str, namespace: Mapping[str, Any],
                   observed: Iterable[Mapping[str, Any]] = ()) -> list[dict[str, Any]]:  # fmt: skip
    """POST one sync as metacontroller does; the objects the hook wants in the namespace.

    `namespace` is the Namespace object (its labels decide: without `pipelines.kubeflow.org/enabled:
    "true"` the hook wants nothing). `observed` is what the namespace holds of the attachment
    kinds: an existing `mlpipeline-minio-artifact` is handed back as is, otherwise the hook mints
    new keys. The answer holds the Secret: never log it.
    """
    name = namespace.get("metadata", {}).get("name")
    body = {"controller": {"metadata": {"name": CONTROLLER}}, "object": dict(namespace),
            "attachments": attachments(observed)}  # fmt: skip
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as reply:
            answer = json.loads(reply.read())
    except (urllib.error.URLError, OSError, ValueError) as e:
        # sync.py answers a failed IAM call by dropping the connection: its log has the traceback.
        raise ProfileHookError(f"KFP's sync hook at {url} failed for namespace {name!r} ({e}); "
                               "its log has the reason (an IAM or S3 call, usually)") from e  # fmt: skip
    objects = answer.get("attachments") if isinstance(answer, dict) else None
    if not isinstance(objects, list):
        got = sorted(answer) if isinstance(answer, dict) else type(answer).__name__
        raise ProfileHookError(f"KFP's sync hook at {url} answered namespace {name!r} without a list of "
                               f"attachments (got {got})")  # fmt: skip
    return objects


def to_create(desired: Iterable[Mapping[str, Any]], observed: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The desired objects not in `observed` (by kind, namespace and name): created once, never updated."""

    def key(obj: Mapping[str, Any]) -> tuple[str, str, str]:
        meta = obj.get("metadata", {})
        return str(obj.get("kind")), str(meta.get("namespace")), str(meta.get("name"))

    there = {key(o) for o in observed}
    return [o for o in desired if key(o) not in there]


def manifest(objects: Iterable[Mapping[str, Any]]) -> str:
    """Objects as one multi-document YAML for `kubectl create -f -` (it may hold a Secret)."""
    return yaml.safe_dump_all([dict(o) for o in objects], sort_keys=True)


def hook_url(port: int, host: str = "127.0.0.1") -> str:
    """Where `hook_argv` serves (the DecoratorController's webhook URL, here)."""
    return f"http://{host}:{port}/sync"
