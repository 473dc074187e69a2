"""A generated click-through data set whose labels come from known hidden embeddings.

Each record has one categorical id per field; ids of different fields live in disjoint ranges of
one global id space (field f's ids start after field f-1's), so one embedding table serves every
field. Ids are drawn from a Zipf-like law, as real categorical features are. The label is a
Bernoulli draw with probability sigmoid(logit), where

    logit = bias + sum_f w[x_f] + sum_{f<g} <e[x_f], e[x_g]>

with hidden per-id weights `w` (what the wide part can learn) and hidden per-id embeddings `e`
(pairwise interactions, what the deep part must learn). The best achievable AUC, that of the
true probabilities, is written into the dataset's `source` string.

    python -m kubetrain.ps.harness.click_data --out DIR [--train N] [--test N] [--shards S] [--seed S]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from kubetrain.data.dataset_format import DatasetInfo
from kubetrain.data.dataset_writer import write_dataset
from kubetrain.errors import KubetrainError, SpecError
from kubetrain.ps.common.evaluation import roc_auc

__all__ = ["ClickData", "make_click_data", "write_click_dataset"]

DEFAULT_VOCAB = (10, 20, 50, 100, 200, 400)


@dataclass(frozen=True)
class ClickData:
    """Generated records plus the hidden truth that labelled them."""

    x_train: npt.NDArray[np.int64]
    y_train: npt.NDArray[np.int64]
    x_test: npt.NDArray[np.int64]
    y_test: npt.NDArray[np.int64]
    p_test: npt.NDArray[np.float64]  # true click probabilities of the test records
    offsets: tuple[int, ...]

    @property
    def bayes_auc(self) -> float:
        """The test AUC of the true probabilities: no model can expect to beat it."""
        return roc_auc(self.p_test, self.y_test)


def make_click_data(
    *,
    train: int = 20000,
    test: int = 5000,
    vocab: Sequence[int] = DEFAULT_VOCAB,
    hidden_dim: int = 4,
    seed: int = 0,
) -> ClickData:
    """Draw `train` + `test` records from the hidden model (deterministic per seed)."""
    if train < 1 or test < 1:
        raise SpecError("train/test", (train, test), "record counts >= 1")
    if not vocab or min(vocab) < 1 or sum(vocab) >= 2**24:
        raise SpecError("vocab", tuple(vocab), "field sizes >= 1 summing below 2**24 (float32 ids)")
    rng = np.random.default_rng(seed)
    offsets = tuple(int(o) for o in np.concatenate([[0], np.cumsum(vocab)[:-1]]))
    total = int(sum(vocab))
    w = rng.normal(0.0, 0.6, total)
    e = rng.normal(0.0, 1.0 / np.sqrt(hidden_dim), (total, hidden_dim))
    bias = -0.5

    def draw(n: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        cols = []
        for size, off in zip(vocab, offsets, strict=True):
            p = 1.0 / np.arange(1, size + 1) ** 1.1
            cols.append(off + rng.choice(size, size=n, p=p / p.sum()))
        x = np.stack(cols, axis=1).astype(np.int64)
        logit = bias + w[x].sum(axis=1)
        emb = e[x]  # (n, fields, k)
        s = emb.sum(axis=1)
        # sum_{f<g} <e_f, e_g> = (|sum_f e_f|^2 - sum_f |e_f|^2) / 2
        logit += 0.5 * ((s * s).sum(axis=1) - (emb * emb).sum(axis=(1, 2)))
        return x, 1.0 / (1.0 + np.exp(-logit))

    x_tr, p_tr = draw(train)
    x_te, p_te = draw(test)
    y_tr = (rng.random(train) < p_tr).astype(np.int64)
    y_te = (rng.random(test) < p_te).astype(np.int64)
    return ClickData(x_tr, y_tr, x_te, y_te, p_te, offsets)


def write_click_dataset(
    out_dir: str | Path,
    *,
    train: int = 20000,
    test: int = 5000,
    shards: int = 2,
    vocab: Sequence[int] = DEFAULT_VOCAB,
    seed: int = 0,
) -> DatasetInfo:
    """Generate the data set and write it in the dataset format (ids stored as float32)."""
    data = make_click_data(train=train, test=test, vocab=vocab, seed=seed)
    return write_dataset(
        out_dir,
        name="clicks",
        x_train=data.x_train.astype(np.float32),
        y_train=data.y_train,
        x_test=data.x_test.astype(np.float32),
        y_test=data.y_test,
        num_classes=2,
        shards=shards,
        normalization={"mean": 0.0, "std": 1.0},
        source=(f"generated:clicks?seed={seed}&vocab={','.join(map(str, vocab))}&bayes_test_auc={data.bayes_auc:.4f}"),
    )


def main(argv: list[str] | None = None) -> int:
    """Write the click data set to --out."""
    p = argparse.ArgumentParser(prog="python -m kubetrain.ps.harness.click_data", description=__doc__)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--train", type=int, default=20000)
    p.add_argument("--test", type=int, default=5000)
    p.add_argument("--shards", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    try:
        info = write_click_dataset(args.out, train=args.train, test=args.test, shards=args.shards, seed=args.seed)
    except KubetrainError as e:
        print(f"click_data: {e}", file=sys.stderr)
        return int(e.exit_code)
    print(f"wrote {args.out}: {info.num_records('train')} train, {info.num_records('test')} test ({info.source})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
