"""Strict validation of manifests against the upstream CRDs (the pinned operator modules, tests/crds.py).

Undeclared fields count as errors (what `fieldValidation=Strict` rejects and what the API server
would otherwise prune), and the webhook/controller rules of operator-contracts.md apply too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubetrain.manifests.schema import schema_errors
from kubetrain.manifests.validate import validate_manifest
from tests.conftest import CRD_DIR


def strict_errors(manifest: Mapping[str, Any]) -> list[str]:
    """Every schema violation of `manifest` against its upstream CRD (empty when valid)."""
    return schema_errors(manifest, CRD_DIR)


def validate_strict(manifest: Mapping[str, Any]) -> None:
    """Raise ValueError listing schema violations; ManifestError for controller/webhook rules."""
    errors = strict_errors(manifest)
    if errors:
        raise ValueError("manifest is not valid against its CRD:\n  " + "\n  ".join(errors))
    validate_manifest(manifest)
