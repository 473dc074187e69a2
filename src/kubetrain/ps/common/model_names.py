"""The models the PS runtime trains, by name (torch-free, so the master and shards need no torch).

A job trains one of the built-in models (`MODEL_NAMES`) or a user's model module (ElasticDL's
"model zoo" contract, :mod:`kubetrain.ps.worker.user_model`). The master tells every worker which
one in `JobInfo.model`: a built-in name as it is, a user's module as `module:<dotted.path>`, so a
user's module that happens to be called `mlp` is never taken for the built-in one.
"""

from __future__ import annotations

import keyword

__all__ = ["MODEL_NAMES", "USER_MODEL_PREFIX", "is_module_path", "user_model_ref", "user_module_of"]

MODEL_NAMES = ("mlp", "cnn", "wide_deep")
USER_MODEL_PREFIX = "module:"


def is_module_path(path: str) -> bool:
    """True for an importable dotted module path such as `my_team.ctr_model` (identifiers joined by dots)."""
    parts = path.split(".") if isinstance(path, str) else []
    return bool(parts) and all(p.isidentifier() and not keyword.iskeyword(p) for p in parts)


def user_model_ref(module: str) -> str:
    """What the master tells workers for a user's model module."""
    return f"{USER_MODEL_PREFIX}{module}"


def user_module_of(model: str) -> str | None:
    """The user's module path a worker is told to train, or None for a built-in model."""
    return model.removeprefix(USER_MODEL_PREFIX) if model.startswith(USER_MODEL_PREFIX) else None
