"""A user's model on kubetrain's parameter servers: the contract a model module meets (ElasticDL's model zoo).

`ps_train(model_module="my_team.ctr_model")` trains the model that module defines, the way an
ElasticDL model-zoo module is trained: the module says *what* to train, kubetrain's master, servers
and workers do the rest (tasks, parameters, gradients, evaluation, checkpoints, the final model).
The module must be importable in the training image (installed, or on `PYTHONPATH`) and define,
at module level:

=========================================================  ==========================================
``custom_model(feature_shape, num_classes) -> nn.Module``  the model (keyword arguments: the data
                                                           set's record shape, e.g. ``(1, 8, 8)``,
                                                           and its number of classes); its
                                                           ``forward(x)`` returns logits shaped
                                                           ``(batch, num_classes)``
``loss(logits, labels) -> Tensor``                         the batch's mean loss, a scalar
``optimizer(lr) -> OptimizerSpec | str``                   the optimizer the parameter servers
                                                           apply (``"sgd"`` or ``"adam"``, or an
                                                           :class:`OptimizerSpec`), given the job's
                                                           learning rate
``feed(x, y) -> (Tensor, Tensor)``                         a batch of data set records (``x``
                                                           float32 ``(batch, *feature_shape)``,
                                                           ``y`` int64 ``(batch,)``, numpy) turned
                                                           into the model's input and the labels
=========================================================  ==========================================

The parameter servers, not the workers, apply the updates, and they are started with the
optimizer and learning rate of the job (`ps_train`'s `optimizer` and `learning_rate`); the
module's `optimizer(lr)` must name the same optimizer, and a worker checks that it does. Every
check here runs before a worker trains anything, and a module that misses the contract fails with
one :class:`UserModelError` naming the module and everything it lacks. Accuracy is the argmax of
the logits against the labels; a user's model keeps all its parameters dense on the servers
(embedding tables on the servers are the built-in `wide_deep`'s).

This is the one module that imports another by a path only known at run time (`importlib`):
`tests/unit/test_layering.py` names it as that test's single exception.
"""

from __future__ import annotations

import importlib
import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from torch import nn

from kubetrain.errors import InvalidInputError
from kubetrain.ps.common.model_names import is_module_path
from kubetrain.ps.common.optimizers import OptimizerSpec
from kubetrain.ps.worker.models import PSModel

__all__ = ["CONTRACT", "ModelContract", "UserModel", "UserModelError", "build_user_model", "load_contract"]

# name -> (its shape in messages, positional and keyword arguments it is called with). Checked with
# inspect.signature(...).bind, so defaults, *args and **kwargs count the way the calls here use them.
CONTRACT: dict[str, tuple[str, tuple[object, ...], dict[str, object]]] = {
    "custom_model": ("custom_model(feature_shape, num_classes)", (), {"feature_shape": (), "num_classes": 2}),
    "loss": ("loss(logits, labels)", (None, None), {}),
    "optimizer": ("optimizer(lr)", (), {"lr": 0.1}),
    "feed": ("feed(x, y)", (None, None), {}),
}
README_SECTION = "README, 'Your own model on the parameter servers'"


class UserModelError(InvalidInputError):
    """A model module that cannot be imported or does not meet the contract: nothing can train with it."""


@dataclass(frozen=True)
class ModelContract:
    """A model module's four functions, checked against the contract."""

    module: str
    custom_model: Callable[..., Any]
    loss: Callable[..., Any]
    optimizer: Callable[..., Any]
    feed: Callable[..., Any]


def _import(path: str) -> object:
    if not is_module_path(path):
        raise UserModelError(
            f"model_module: got {path!r}; expected an importable module path such as my_team.ctr_model"
        )
    try:
        return importlib.import_module(path)
    except ModuleNotFoundError as e:
        if e.name is not None and (path == e.name or path.startswith(f"{e.name}.")):
            raise UserModelError(
                f"model module {path}: no module named {e.name!r} here; it must be importable in the training "
                "image (installed, or on PYTHONPATH)"
            ) from e
        raise UserModelError(f"model module {path}: importing it failed: {type(e).__name__}: {e}") from e
    except Exception as e:  # the user's module-level code: whatever it raises, name it
        raise UserModelError(f"model module {path}: importing it failed: {type(e).__name__}: {e}") from e


def load_contract(path: str, *, lr: float, servers: OptimizerSpec | None) -> ModelContract:
    """Import `path` and check the contract; with `servers`, its optimizer must be theirs.

    Every missing or mis-shaped function is named in one error, so one round of fixes suffices.
    """
    module = _import(path)
    problems: list[str] = []
    found: dict[str, Callable[..., Any]] = {}
    for name, (shape, args, kwargs) in CONTRACT.items():
        fn = getattr(module, name, None)
        if fn is None:
            problems.append(f"missing {shape}")
            continue
        if not callable(fn):
            problems.append(f"{name} is a {type(fn).__name__}, not a function {shape}")
            continue
        try:
            inspect.signature(fn).bind(*args, **kwargs)
        except TypeError as e:
            problems.append(f"{name} cannot be called as {shape} ({e})")
        except ValueError:
            pass  # no signature to read (a builtin): it is called as it is
        found[name] = fn
    if problems:
        raise UserModelError(
            f"model module {path} does not meet kubetrain's model contract: {'; '.join(problems)}. A model "
            f"module defines {', '.join(shape for shape, _, _ in CONTRACT.values())} ({README_SECTION})"
        )
    contract = ModelContract(module=path, **found)
    optimizer = _optimizer(contract, lr)
    if servers is not None and optimizer != servers:
        raise UserModelError(
            f"model module {path}: optimizer(lr={lr!r}) gives {optimizer} but the parameter servers apply "
            f"{servers} (ps_train's optimizer and learning_rate); make them agree: the servers apply the updates"
        )
    return contract


def _optimizer(contract: ModelContract, lr: float) -> OptimizerSpec:
    where = f"model module {contract.module}: optimizer(lr={lr!r})"
    try:
        out = contract.optimizer(lr=lr)
        spec = OptimizerSpec(name=out, lr=lr) if isinstance(out, str) else out
    except Exception as e:  # the user's code, or OptimizerSpec refusing its name
        raise UserModelError(f"{where} failed: {type(e).__name__}: {e}") from e
    if not isinstance(spec, OptimizerSpec):
        raise UserModelError(f"{where} returned {out!r}; expected 'sgd', 'adam' or an OptimizerSpec")
    return spec


class UserModel(PSModel):
    """A user's model as the PS trainer drives it: dense parameters only, the module's feed and loss."""

    def __init__(self, contract: ModelContract, net: nn.Module) -> None:
        super().__init__()
        self.net = net
        self.contract = contract

    def feed(self, x: npt.NDArray[np.float32], y: npt.NDArray[np.int64]) -> tuple[torch.Tensor, torch.Tensor]:
        """The module's feed over a batch of records."""
        xb, yb = self.contract.feed(x, y)
        return xb, yb

    def forward(self, x: torch.Tensor, rows: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """The module's model: (batch, num_classes) logits."""
        del rows  # no embedding tables on the servers
        out: torch.Tensor = self.net(x)
        return out

    def loss(self, logits: torch.Tensor, y: torch.Tensor, *, reduction: str = "mean") -> torch.Tensor:
        """The module's mean loss (times the batch size for a sum, as evaluation asks)."""
        mean: torch.Tensor = self.contract.loss(logits, y)
        return mean if reduction == "mean" else mean * y.shape[0]


def build_user_model(
    contract: ModelContract,
    *,
    feature_shape: Sequence[int],
    num_classes: int,
    seed: int,
    sample: tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]],
) -> UserModel:
    """The module's model with seeded initial weights, tried once on `sample` records before any training."""
    where = f"model module {contract.module}"
    torch.manual_seed(seed)  # every worker builds the same initial weights; the first offer wins anyway
    try:
        net = contract.custom_model(feature_shape=tuple(feature_shape), num_classes=num_classes)
    except Exception as e:
        raise UserModelError(f"{where}: custom_model(feature_shape={tuple(feature_shape)}, "
                             f"num_classes={num_classes}) failed: {type(e).__name__}: {e}") from e  # fmt: skip
    if not isinstance(net, nn.Module) or not any(p.requires_grad for p in net.parameters()):
        raise UserModelError(f"{where}: custom_model returned {type(net).__name__}; expected a torch.nn.Module "
                             "with trainable parameters")  # fmt: skip
    model = UserModel(contract, net)
    x, y = sample
    step = "feed(x, y)"
    try:
        with torch.no_grad():  # a check, not a step: no gradients to leave behind
            fed = contract.feed(x, y)
            if not (isinstance(fed, tuple) and len(fed) == 2 and all(isinstance(t, torch.Tensor) for t in fed)):
                raise TypeError(f"returned {type(fed).__name__}; expected a (model input, labels) pair of tensors")
            step = "the model's forward(x)"
            logits = model(fed[0], {})
            if logits.ndim != 2 or logits.shape != (len(y), num_classes):
                raise ValueError(f"gave logits shaped {tuple(logits.shape)}; expected ({len(y)}, {num_classes})")
            step = "loss(logits, labels)"
            value = model.loss(logits, fed[1])
            if value.ndim != 0 or not math.isfinite(float(value)):
                raise ValueError(f"gave {value!r}; expected a finite scalar (the batch's mean loss)")
    except Exception as e:
        raise UserModelError(
            f"{where}: {step} failed on {len(y)} records of the training data: {type(e).__name__}: {e}"
        ) from e
    return model
