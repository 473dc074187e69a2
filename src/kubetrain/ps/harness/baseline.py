"""The single-process PyTorch baseline a PS run is compared with: same model, data and init.

The model's tables become local `nn.Embedding(sparse=True)` tables initialised exactly as the PS
initialises rows, trained with `torch.optim.SparseAdam` (lazy Adam, as on the PS), the dense
layers with `torch.optim.Adam`; one process, no staleness. (`sgd` uses plain SGD for both.)

    python -m kubetrain.ps.harness.baseline --data DIR --model wide_deep --epochs 3 --lr 0.01
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from kubetrain.data.dataset_format import load_split, read_dataset_info
from kubetrain.errors import KubetrainError
from kubetrain.ps.common.embedding import initial_rows
from kubetrain.ps.common.evaluation import roc_auc
from kubetrain.ps.worker.models import MODEL_NAMES, PSModel, build_model

__all__ = ["train_baseline"]


def _tables(model: PSModel, num_ids: int, seed: int) -> nn.ModuleDict:
    tables = nn.ModuleDict()
    for cfg in model.tables:
        emb = nn.Embedding(num_ids, cfg.dim, sparse=True)
        with torch.no_grad():
            emb.weight.copy_(torch.from_numpy(initial_rows(cfg, seed, np.arange(num_ids, dtype=np.int64))))
        tables[cfg.name] = emb
    return tables


def _rows(model: PSModel, tables: nn.ModuleDict, xb: torch.Tensor) -> dict[str, torch.Tensor]:
    return {t: tables[t](torch.from_numpy(ids)) for t, ids in model.ids(xb).items()}


def train_baseline(
    data_dir: str | Path,
    *,
    model_name: str,
    epochs: int,
    batch_size: int = 32,
    lr: float = 0.01,
    optimizer: str = "adam",
    seed: int = 0,
    model_args: Mapping[str, Any] | None = None,
) -> dict[str, float]:
    """Train in one process; test_auc (binary), test_accuracy, test_loss, samples_per_second."""
    torch.set_num_threads(1)
    info = read_dataset_info(data_dir)
    x_train, y_train = load_split(data_dir, "train")
    x_test, y_test = load_split(data_dir, "test")
    model = build_model(
        model_name, feature_shape=info.feature_shape, num_classes=info.num_classes, seed=seed, model_args=model_args
    )
    num_ids = int(max(x_train.max(), x_test.max())) + 1 if model.tables else 0
    tables = _tables(model, num_ids, seed)
    dense_params = list(model.parameters())
    sparse_params = list(tables.parameters())
    opts: list[torch.optim.Optimizer] = []
    if optimizer == "adam":
        opts.append(torch.optim.Adam(dense_params, lr=lr))
        if sparse_params:
            opts.append(torch.optim.SparseAdam(sparse_params, lr=lr))
    else:
        opts.append(torch.optim.SGD(dense_params + sparse_params, lr=lr))
    rng = np.random.default_rng(seed)
    t0 = time.monotonic()
    for _ in range(epochs):
        order = rng.permutation(len(x_train))
        for lo in range(0, len(order), batch_size):
            idx = order[lo : lo + batch_size]
            xb, yb = torch.from_numpy(x_train[idx]), torch.from_numpy(y_train[idx])
            for o in opts:
                o.zero_grad(set_to_none=True)
            loss = model.loss(model(xb, _rows(model, tables, xb)), yb)
            loss.backward()
            for o in opts:
                o.step()
    train_s = time.monotonic() - t0
    with torch.no_grad():
        xt, yt = torch.from_numpy(x_test), torch.from_numpy(y_test)
        logits = model(xt, _rows(model, tables, xt))
        pred, score = model.predictions(logits)
        out = {
            "test_loss": float(model.loss(logits, yt)),
            "test_accuracy": float((pred == yt).double().mean()),
            "samples_per_second": epochs * len(x_train) / train_s,
        }
        if model.binary:
            out["test_auc"] = roc_auc(score.numpy(), y_test)
    return out


def main(argv: list[str] | None = None) -> int:
    """Train the baseline and print its metrics as JSON."""
    p = argparse.ArgumentParser(prog="python -m kubetrain.ps.harness.baseline", description=__doc__)
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--model", choices=MODEL_NAMES, default="wide_deep")
    p.add_argument("--model-args", default="{}")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--optimizer", choices=("adam", "sgd"), default="adam")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    try:
        metrics = train_baseline(
            args.data,
            model_name=args.model,
            epochs=args.epochs,
            batch_size=args.batch_size,
            lr=args.lr,
            optimizer=args.optimizer,
            seed=args.seed,
            model_args=json.loads(args.model_args),
        )
    except KubetrainError as e:
        print(f"baseline: {e}", file=sys.stderr)
        return int(e.exit_code)
    print(json.dumps(metrics))
    return 0


if __name__ == "__main__":
    sys.exit(main())
