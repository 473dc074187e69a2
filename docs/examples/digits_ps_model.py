"""A user's own model for the parameter servers: `ps_train(model_module="digits_ps_model", ...)`.

The four names kubetrain's PS workers call (src/kubetrain/ps/worker/user_model.py is the
contract). The module must be importable in the training image (installed, or on PYTHONPATH).
After the run, the step's Model holds `model.npz` with one array per parameter, named
`dense/net.<name in custom_model's named_parameters()>`, and `model.json`.
"""

import math

import numpy as np
import torch
from torch import nn


def custom_model(feature_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """Logistic regression over the flattened features."""
    return nn.Linear(math.prod(feature_shape), num_classes)


def loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The batch's mean cross-entropy."""
    return nn.functional.cross_entropy(logits, labels)


def optimizer(lr: float) -> str:
    """What the parameter servers apply: ps_train(optimizer="sgd", learning_rate=lr)."""
    return "sgd"


def feed(x: np.ndarray, y: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch of records -> (model input, labels)."""
    flat = np.ascontiguousarray(x.reshape(len(x), -1))
    return torch.from_numpy(flat), torch.from_numpy(y)
