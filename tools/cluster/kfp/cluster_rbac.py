"""The multi-user tier's cluster-wide RBAC (issue 47), from upstream's own files.

- Kubeflow's `kubeflow-admin`/`-edit`/`-view` and `kubeflow-kubernetes-*`: kubeflow/manifests is
  refused by the Go module proxy, so `kubeflow-roles.yaml` beside this module is a copy, rule for
  rule, with its source cited.
- KFP's multi-user RBAC, from the KFP source tree tools/kfp/build.sh extracts: the
  `kubeflow-pipelines-edit`/`-view` roles aggregated into Kubeflow's, and the ClusterRoles and
  bindings of the pieces this tier runs in multi-user mode: the API server (SubjectAccessReview,
  TokenReview, every namespace's `kfp-launcher`), the persistence agent (every namespace's
  workflows, `report`) and the UI server (every namespace's pods, logs and events). The scheduled
  workflow controller, the cache server, the viewer controller and the metadata writer do not run
  here (docs/design/multi-user.md), so their roles are not applied.
- The operators' aggregated roles, from the Go module cache at the versions tools/controlplane
  pins: training-operator's `kubeflow-training-*`, mpi-operator's `kubeflow-mpijobs-*` and
  Trainer v2's `kubeflow-trainer-*`. JobSet ships none (docs/cluster.md says why none is added).

Everything is read, nothing is applied: `cluster_rbac` returns the texts for the caller's
`kubectl apply --server-side -f -`.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tools.cluster.kfp import manifests

REPO_ROOT = Path(__file__).resolve().parents[3]
KUBEFLOW_ROLES = Path(__file__).with_name("kubeflow-roles.yaml")
MULTI_USER = "manifests/kustomize/base/installs/multi-user"
# Relative to the KFP source tree, as manifests.KFP_FILES lists the standalone ones.
KFP_MULTIUSER_FILES = tuple(
    f"{MULTI_USER}/{name}.yaml"
    for name in (
        "view-edit-cluster-roles",
        "api-service/cluster-role", "api-service/cluster-role-binding",
        "persistence-agent/cluster-role", "persistence-agent/cluster-role-binding",
        "pipelines-ui/cluster-role", "pipelines-ui/cluster-role-binding",
    )
)  # fmt: skip


@dataclass(frozen=True)
class Operator:
    """One operator's aggregated roles: its module, the go.mod that pins it, the file in the module."""

    module: str
    pinned_in: Path
    path: str
    # Only the ClusterRoles whose names start so (mpi-operator's file is its whole deployment).
    name_prefix: str = ""


CONTROLPLANE = REPO_ROOT / "tools" / "controlplane"
OPERATORS = (
    Operator("github.com/kubeflow/training-operator", CONTROLPLANE / "training-operator" / "go.mod",
             "manifests/overlays/kubeflow/kubeflow-training-roles.yaml"),
    Operator("github.com/kubeflow/mpi-operator", CONTROLPLANE / "k8s" / "go.mod",
             "deploy/v2beta1/mpi-operator.yaml", name_prefix="kubeflow-mpijobs-"),
    Operator("github.com/kubeflow/trainer/v2", CONTROLPLANE / "k8s" / "go.mod",
             "manifests/overlays/kubeflow-platform/kubeflow-trainer-roles.yaml"),
)  # fmt: skip


class ClusterRbacError(RuntimeError):
    """An upstream file is missing or not what was expected; the message names it and the fix."""


@dataclass(frozen=True)
class RbacFile:
    """One text to apply and the upstream file it comes from (for the caller's error messages)."""

    source: Path
    text: str


def cluster_rbac(kfp_src: Path, gomodcache: Path) -> list[RbacFile]:
    """Every cluster-wide RBAC object of the tier, in apply order: Kubeflow's, KFP's, the operators'.

    `kfp_src` is the extracted KFP tree (`manifests.kfp_tree`),
    `gomodcache` is `go env GOMODCACHE` (`go_mod_cache()`), where the control plane's build put the
    operators' modules.
    """
    out = [RbacFile(KUBEFLOW_ROLES, KUBEFLOW_ROLES.read_text())]
    for relative in KFP_MULTIUSER_FILES:
        path = kfp_src / relative
        out.append(RbacFile(path, yaml.safe_dump_all([_in_kubeflow(d) for d in _documents(path)], sort_keys=False)))
    for operator in OPERATORS:
        path = operator_file(operator, gomodcache)
        docs = [d for d in _documents(path) if d["kind"] in ("ClusterRole", "ClusterRoleBinding")
                and d["metadata"]["name"].startswith(operator.name_prefix)]  # fmt: skip
        if not docs:
            pin = f"{operator.pinned_in}'s pin of {operator.module}"
            raise ClusterRbacError(f"{path} has no ClusterRole named {operator.name_prefix}*: is {pin} the "
                                   "version this expects?")  # fmt: skip
        out.append(RbacFile(path, yaml.safe_dump_all(docs, sort_keys=False)))
    return out


def operator_file(operator: Operator, gomodcache: Path) -> Path:
    """The operator's roles file in the module cache, at the version its go.mod pins."""
    version = pinned_version(operator.pinned_in, operator.module)
    path = gomodcache / f"{_escape(operator.module)}@{version}" / operator.path
    if not path.is_file():
        raise ClusterRbacError(f"{path} is missing: the control plane's build downloads {operator.module} "
                               f"{version} (`make controlplane`), or GOMODCACHE is not {gomodcache}")  # fmt: skip
    return path


def pinned_version(gomod: Path, module: str) -> str:
    """The version `gomod` requires `module` at (direct or `// indirect`)."""
    found = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", gomod.read_text(), re.MULTILINE)
    if found is None:
        raise ClusterRbacError(f"{gomod} does not require {module}: pin it there (the operator's build does)")
    return found.group(1)


def go_mod_cache() -> Path:
    """`go env GOMODCACHE`, with the Go the control plane's build uses (/usr/local/go/bin on the PATH)."""
    env = {**os.environ, "PATH": os.pathsep.join([os.environ.get("PATH", ""), "/usr/local/go/bin"])}
    try:
        done = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True, env=env, check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        raise ClusterRbacError(f"`go env GOMODCACHE` failed ({e}): install Go (DESIGN.md's environment notes)") from e
    return Path(done.stdout.strip())


def _escape(module: str) -> str:
    """The module cache's spelling of a module path: each capital letter as '!' and its lower case."""
    return re.sub(r"[A-Z]", lambda m: "!" + m.group(0).lower(), module)


def _documents(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise ClusterRbacError(f"{path} is missing: run tools/kfp/build.sh (it extracts the KFP source tree)")
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _in_kubeflow(doc: dict[str, Any]) -> dict[str, Any]:
    """What KFP's kustomization (`namespace: kubeflow`) does to a binding: its ServiceAccount subjects
    with no namespace are in `kubeflow` (a ClusterRoleBinding's must name one; the API server refuses it otherwise)."""
    if doc.get("kind") in ("ClusterRoleBinding", "RoleBinding"):
        for subject in doc.get("subjects", []):
            if subject.get("kind") == "ServiceAccount" and not subject.get("namespace"):
                subject["namespace"] = manifests.NAMESPACE
    return doc
