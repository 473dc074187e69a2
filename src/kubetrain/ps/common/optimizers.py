"""Optimizers that run on the parameter server: SGD and Adam, for dense tensors and sparse rows.

Each optimizer owns its slot state (Adam's moments and step counts) next to the parameters, so a
checkpoint holds everything needed to carry on. Sparse Adam is "lazy": only the rows a gradient
touches move; the bias correction uses the table's step count, as torch's SparseAdam and TF's
LazyAdam do, so the PS and a single-process `SparseAdam` baseline make the same updates.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kubetrain.errors import SpecError

__all__ = ["OPTIMIZERS", "OptimizerSpec", "SlotArrays", "apply_dense", "apply_rows", "new_slots"]

OPTIMIZERS = ("sgd", "adam")

F32 = npt.NDArray[np.float32]
SlotArrays = dict[str, npt.NDArray[np.float32]]


@dataclass(frozen=True)
class OptimizerSpec:
    """Which optimizer, and its hyper-parameters."""

    name: str = "sgd"
    lr: float = 0.1
    momentum: float = 0.0
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8

    def __post_init__(self) -> None:
        if self.name not in OPTIMIZERS:
            raise SpecError("optimizer", self.name, f"one of {list(OPTIMIZERS)}")
        if not self.lr > 0:
            raise SpecError("lr", self.lr, "a positive number")
        if not 0 <= self.momentum < 1:
            raise SpecError("momentum", self.momentum, "a number in [0, 1)")
        for field in ("beta1", "beta2"):
            value = getattr(self, field)
            if not 0 <= value < 1:
                raise SpecError(field, value, "a number in [0, 1)")
        if not self.eps > 0:
            raise SpecError("eps", self.eps, "a positive number")


def new_slots(spec: OptimizerSpec, shape: tuple[int, ...], *, rows: bool = False) -> SlotArrays:
    """Zeroed slot arrays for a dense parameter of `shape`, or for rows (shape (n, dim))."""
    del rows  # the same slots for both: moments shaped like the parameter, one step count
    if spec.name == "adam":
        return {
            "m": np.zeros(shape, np.float32),
            "v": np.zeros(shape, np.float32),
            "t": np.zeros((), np.float32),
        }
    if spec.momentum > 0:
        return {"buf": np.zeros(shape, np.float32)}
    return {}


def apply_dense(spec: OptimizerSpec, param: F32, grad: F32, slots: SlotArrays, lr: float) -> None:
    """Update a dense `param` in place with `grad` at learning rate `lr`."""
    if spec.name == "adam":
        m, v, t = slots["m"], slots["v"], slots["t"]
        t += 1
        m *= spec.beta1
        m += (1 - spec.beta1) * grad
        v *= spec.beta2
        v += (1 - spec.beta2) * grad * grad
        step = float(t)
        m_hat = m / (1 - spec.beta1**step)
        v_hat = v / (1 - spec.beta2**step)
        param -= (lr * m_hat / (np.sqrt(v_hat) + spec.eps)).astype(np.float32)
    elif spec.momentum > 0:
        buf = slots["buf"]
        buf *= spec.momentum
        buf += grad
        param -= np.float32(lr) * buf
    else:
        param -= np.float32(lr) * grad


def apply_rows(
    spec: OptimizerSpec,
    table: F32,
    rows: npt.NDArray[np.int64],
    grad: F32,
    slots: SlotArrays,
    lr: float,
) -> None:
    """Update rows `rows` (unique positions into `table`) in place with `grad` (one row each)."""
    if spec.name == "adam":
        m, v, t = slots["m"], slots["v"], slots["t"]
        t += 1
        m[rows] = spec.beta1 * m[rows] + (1 - spec.beta1) * grad
        v[rows] = spec.beta2 * v[rows] + (1 - spec.beta2) * grad * grad
        step = float(t)
        m_hat = m[rows] / (1 - spec.beta1**step)
        v_hat = v[rows] / (1 - spec.beta2**step)
        table[rows] -= (lr * m_hat / (np.sqrt(v_hat) + spec.eps)).astype(np.float32)
    elif spec.momentum > 0:
        buf = slots["buf"]
        buf[rows] = spec.momentum * buf[rows] + grad
        table[rows] -= np.float32(lr) * buf[rows]
    else:
        table[rows] -= np.float32(lr) * grad
