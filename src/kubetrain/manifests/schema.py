"""Strict validation of a manifest against its CRD's `openAPIV3Schema` (or a built-in kind's OpenAPI schema).

The API server prunes fields a structural schema does not declare (silently, unless the client asks
for `fieldValidation=Strict`). Here every undeclared field is an error, so a misplaced field (the
old launchers' `spec.cleanPodPolicy`) is caught before anything is submitted. The CRD files are
not part of this package: callers pass their location (tests use `../shared/crds`; at run time
`KUBETRAIN_CRD_DIR` may point at a copy). On a cluster the Kubernetes backend also creates with
`fieldValidation=Strict`, so the API server applies the installed CRD itself.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from kubetrain.errors import ManifestError
from kubetrain.names import is_dns1123_subdomain, is_label_key, is_label_value

CRD_DIR_ENV = "KUBETRAIN_CRD_DIR"
# Where each (apiVersion, kind) is defined, relative to a CRD directory laid out like ../shared/crds.
CRD_FILES: Mapping[tuple[str, str], str] = {
    ("kubeflow.org/v1", "PyTorchJob"): "training-operator-v1/kubeflow.org_pytorchjobs.yaml",
    ("kubeflow.org/v2beta1", "MPIJob"): "mpi-operator-v2beta1/kubeflow.org_mpijobs.yaml",
    ("jobset.x-k8s.io/v1alpha2", "JobSet"): "jobset/jobset.x-k8s.io_jobsets.yaml",
    ("trainer.kubeflow.org/v1alpha1", "TrainJob"): "trainer-v2/trainer.kubeflow.org_trainjobs.yaml",
    ("trainer.kubeflow.org/v1alpha1", "ClusterTrainingRuntime"): (
        "trainer-v2/trainer.kubeflow.org_clustertrainingruntimes.yaml"
    ),
    # Built-in kinds: the API server's own OpenAPI v3 document of the group (kubernetes' api/openapi-spec).
    ("networking.k8s.io/v1", "NetworkPolicy"): "kubernetes-v1.36/apis__networking.k8s.io__v1_openapi.json",
}


def _strict(node: Any) -> Any:
    """Translate Kubernetes schema extensions to JSON Schema, forbidding undeclared properties."""
    if isinstance(node, list):
        return [_strict(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {k: _strict(v) for k, v in node.items() if not k.startswith("x-kubernetes-")}
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    out.pop("nullable", None)
    if (
        out.get("type") == "object"
        and "properties" in out
        and "additionalProperties" not in out
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def _openapi_schema(document: Mapping[str, Any], api_version: str, kind: str) -> dict[str, Any]:
    """The schema of `kind` in an OpenAPI v3 document of the API server, its `$ref`s resolvable."""
    group, version = api_version.split("/", 1)
    schemas = copy.deepcopy(dict(document["components"]["schemas"]))
    # As for CRDs: metadata is checked as ObjectMeta by _metadata_errors, not by its long schema.
    schemas["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"] = {"type": "object"}
    for schema in schemas.values():
        if {"group": group, "version": version, "kind": kind} in schema.get("x-kubernetes-group-version-kind", ()):
            # The `$ref`s point into #/components/schemas: carry them along under the root.
            return dict(_strict({**schema, "components": {"schemas": schemas}}))
    raise ManifestError("kind", f"{kind} {api_version} is not in the OpenAPI document")


@lru_cache(maxsize=8)
def _load_schema(path: str, api_version: str, kind: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as fh:
        crd = yaml.safe_load(fh)
    if path.endswith(".json"):
        return _openapi_schema(crd, api_version, kind)
    version = api_version.split("/", 1)[1]
    for entry in crd["spec"]["versions"]:
        if entry["name"] == version:
            schema = copy.deepcopy(entry["schema"]["openAPIV3Schema"])
            # The CRD declares metadata as a bare object; the API server validates it as ObjectMeta.
            schema["properties"]["metadata"] = {"type": "object"}
            return dict(_strict(schema))
    raise ManifestError("apiVersion", f"{api_version} is not served by the CRD in {path}")


def crd_dir_from_env() -> Path | None:
    """The CRD directory named by `KUBETRAIN_CRD_DIR`, if set."""
    value = os.environ.get(CRD_DIR_ENV)
    return Path(value) if value else None


def schema_errors(manifest: Mapping[str, Any], crd_dir: Path) -> list[str]:
    """Every violation of the CRD schema (undeclared fields included), as `path: message` lines."""
    key = (str(manifest.get("apiVersion")), str(manifest.get("kind")))
    if key not in CRD_FILES:
        return [f"kind: no CRD known for {key[1]} {key[0]}"]
    schema = _load_schema(str(crd_dir / CRD_FILES[key]), key[0], key[1])
    validator = jsonschema.Draft7Validator(schema)
    errors = []
    for error in sorted(validator.iter_errors(manifest), key=lambda e: list(map(str, e.absolute_path))):
        path = ".".join(str(p) for p in error.absolute_path) or "<root>"
        if error.validator == "additionalProperties":
            errors.append(f"{path}: {error.message} (the API server would drop or reject it)")
        else:
            errors.append(f"{path}: {error.message}")
    errors.extend(_metadata_errors(manifest.get("metadata")))
    return errors


def _metadata_errors(metadata: object) -> list[str]:
    if not isinstance(metadata, Mapping):
        return ["metadata: must be an object with at least a name"]
    errors = []
    name = metadata.get("name")
    if not isinstance(name, str) or not is_dns1123_subdomain(name):
        errors.append(f"metadata.name: {name!r} is not a valid object name")
    namespace = metadata.get("namespace")
    if namespace is not None and (not isinstance(namespace, str) or not is_dns1123_subdomain(namespace)):
        errors.append(f"metadata.namespace: {namespace!r} is not a valid namespace")
    for field_name in ("labels", "annotations"):
        entries = metadata.get(field_name) or {}
        for k, v in entries.items():
            if not is_label_key(str(k)):
                errors.append(f"metadata.{field_name}.{k}: invalid key")
            if not isinstance(v, str) or (field_name == "labels" and not is_label_value(v)):
                errors.append(f"metadata.{field_name}.{k}: invalid value {v!r}")
    allowed = {"name", "namespace", "labels", "annotations", "generateName", "ownerReferences", "finalizers",
               "uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "deletionTimestamp",
               "deletionGracePeriodSeconds", "selfLink"}  # fmt: skip
    errors.extend(f"metadata.{k}: not an ObjectMeta field" for k in metadata if k not in allowed)
    return errors


def validate_against_crd(manifest: Mapping[str, Any], crd_dir: Path) -> None:
    """Raise ManifestError listing every schema violation of `manifest`."""
    errors = schema_errors(manifest, crd_dir)
    if errors:
        raise ManifestError(str(manifest.get("kind", "manifest")), "; ".join(errors))
