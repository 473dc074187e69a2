"""AUC, the generated click data, the record-accounting audit, and the models' sparse gradients."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

from kubetrain.data.dataset_format import load_split, read_dataset_info
from kubetrain.ps.common.evaluation import roc_auc
from kubetrain.ps.harness.accounting import audit
from kubetrain.ps.harness.click_data import make_click_data, write_click_dataset
from kubetrain.ps.worker.models import build_model


def test_roc_auc_matches_sklearn_including_ties() -> None:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 500)
    scores = np.round(rng.random(500) + 0.3 * y, 1)  # rounded: many ties
    assert roc_auc(scores, y) == pytest.approx(roc_auc_score(y, scores))
    assert np.isnan(roc_auc([0.1, 0.2], [1, 1]))


def test_click_data_is_deterministic_and_learnable(tmp_path: Path) -> None:
    a, b = make_click_data(train=300, test=2000, seed=5), make_click_data(train=300, test=2000, seed=5)
    assert np.array_equal(a.x_train, b.x_train) and np.array_equal(a.y_test, b.y_test)
    assert 0.75 < a.bayes_auc < 0.95  # the hidden model carries real signal
    fields = a.x_test.shape[1]
    for f in range(fields):  # each field's ids stay in their own range
        lo = a.offsets[f]
        hi = a.offsets[f + 1] if f + 1 < fields else 10**9
        assert ((a.x_test[:, f] >= lo) & (a.x_test[:, f] < hi)).all()
    info = write_click_dataset(tmp_path / "clicks", train=300, test=100, shards=3, seed=5)
    assert info.num_records("train") == 300 and len(info.shards("train")) == 3
    assert "bayes_test_auc=" in read_dataset_info(tmp_path / "clicks").source
    x, _ = load_split(tmp_path / "clicks", "train")
    assert np.array_equal(x.astype(np.int64), make_click_data(train=300, test=100, seed=5).x_train)


def test_wide_deep_row_gradients_equal_an_embedding_layers() -> None:
    # The worker pulls unique rows, gathers them per record and pushes the rows' gradients:
    # that must equal what nn.Embedding would compute for the same (duplicated) ids.
    model = build_model("wide_deep", feature_shape=(3,), num_classes=2, seed=0, model_args={"dim": 4})
    x = torch.tensor([[1.0, 5.0, 9.0], [1.0, 6.0, 9.0], [2.0, 5.0, 9.0]])
    y = torch.tensor([1, 0, 1])
    full = {t.name: torch.nn.Embedding(10, t.dim) for t in model.tables}
    ids = model.ids(x)
    rows, leaves = {}, {}
    for table, table_ids in ids.items():
        uniq, inv = np.unique(table_ids, return_inverse=True)
        leaves[table] = full[table].weight.detach()[torch.from_numpy(uniq)].clone().requires_grad_(True)
        rows[table] = leaves[table][torch.from_numpy(inv.reshape(table_ids.shape))]
    model.loss(model(x, rows), y).backward()
    ref = {t: e(torch.from_numpy(ids[t])) for t, e in full.items()}
    model.zero_grad()
    model.loss(model(x, ref), y).backward()
    for table, e in full.items():
        uniq = np.unique(ids[table])
        assert torch.allclose(leaves[table].grad, e.weight.grad[torch.from_numpy(uniq)], atol=1e-6)


def _log(path: Path, lines: list[dict[str, object]], *, cut_last: bool = False) -> None:
    text = "".join(json.dumps(x) + "\n" for x in lines)
    path.write_text(text[:-3] if cut_last else text)


def test_audit_counts_coverage_duplicates_and_lost_batches(tmp_path: Path) -> None:
    def line(epoch: int, start: int, end: int, version: int, gen: int = 1) -> dict[str, object]:
        return {"epoch": epoch, "shard": 0, "start": start, "end": end, "push": [[0, gen, version]]}

    _log(tmp_path / "a.jsonl", [line(0, 0, 4, 1), line(0, 4, 8, 2), line(1, 0, 8, 3)])
    _log(tmp_path / "b.jsonl", [line(0, 0, 2, 4), line(1, 0, 8, 9)], cut_last=True)
    logs = sorted(tmp_path.glob("*.jsonl"))
    ok = audit(logs, epochs=2, train_shards=[8], generations={0: [-1]})
    assert ok.complete and ok.batches == 4 and ok.records_trained_twice == 2 and ok.extra_trainings == 2
    # Shard 0 restarted from version 2: the batches at versions 3 and 4 were lost.
    lost = audit(logs, epochs=2, train_shards=[8], generations={0: [-1, 2]})
    assert lost.lost_batches == 2 and lost.records_untrained == 8 and not lost.complete
    assert lost.untrained_examples[0] == (1, 0, 0)
    # Batches pushed to the restarted generation itself count.
    _log(tmp_path / "c.jsonl", [line(1, 0, 8, 5, gen=2)])
    assert audit(sorted(tmp_path.glob("*.jsonl")), epochs=2, train_shards=[8], generations={0: [-1, 2]}).complete
