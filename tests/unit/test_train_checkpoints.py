"""Checkpoint files: naming, newest-complete lookup, pruning, and both frameworks' payloads."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import IO

import numpy as np
import pytest

from kubetrain.errors import TrainingError
from kubetrain.train.checkpoints import (
    CheckpointCorruptError,
    CheckpointDir,
    Progress,
    RunSignature,
)


def _write(data: bytes) -> Callable[[IO[bytes]], object]:
    return lambda f: f.write(data)


def _signature(*, model: str = "mlp", world_size: int = 3) -> RunSignature:
    return RunSignature(
        model=model, feature_shape=(1, 8, 8), num_classes=10, seed=0, batch_size=32, world_size=world_size
    )


def test_newest_complete_ignores_temporaries_dirs_and_other_suffixes(tmp_path: Path) -> None:
    ck = CheckpointDir(tmp_path, ".pt", keep=5)
    for step in (10, 30, 20):
        ck.save(step, _write(b"x"))
    (tmp_path / ".ckpt-0000000040.pt.abc.tmp").write_bytes(b"half")  # a killed writer's leftover
    (tmp_path / "ckpt-0000000050.npz").write_bytes(b"other framework")
    (tmp_path / "ckpt-0000000060.pt").mkdir()  # not a file
    assert [s for s, _ in ck.complete()] == [30, 20, 10]
    ck.prepare()
    assert not list(tmp_path.glob(".ckpt-*.tmp"))


def test_save_keeps_only_the_newest(tmp_path: Path) -> None:
    ck = CheckpointDir(tmp_path, ".npz", keep=2)
    for step in range(1, 6):
        ck.save(step, _write(b"x"))
    assert [s for s, _ in ck.complete()] == [5, 4]


def test_save_failure_is_a_training_error(tmp_path: Path) -> None:
    ck = CheckpointDir(tmp_path, ".pt")
    ck.file_for(7).mkdir()  # something already holds the final name
    with pytest.raises(TrainingError, match="cannot write checkpoint"):
        ck.save(7, _write(b"x"))


def test_unusable_checkpoint_dir_is_a_training_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(TrainingError, match="--checkpoint-dir"):
        CheckpointDir(blocker / "ck", ".pt").prepare()


def test_load_newest_skips_unreadable_checkpoints(tmp_path: Path) -> None:
    ck = CheckpointDir(tmp_path, ".pt")
    ck.save(1, _write(b"good"))
    ck.save(2, _write(b"bad"))
    warnings: list[str] = []

    def load(p: Path) -> bytes:
        data = p.read_bytes()
        if data == b"bad":
            raise CheckpointCorruptError("bad bytes")
        return data

    assert ck.load_newest(load, warn=warnings.append) == (1, b"good")
    assert len(warnings) == 1
    assert "ckpt-0000000002.pt" in warnings[0]


def test_empty_or_missing_dir_has_no_checkpoint(tmp_path: Path) -> None:
    assert CheckpointDir(tmp_path / "nope", ".pt").load_newest(Path.read_bytes, warn=print) is None


def test_progress_round_trips_and_rejects_garbage() -> None:
    p = Progress(epoch=2, batch_in_epoch=5, global_step=35, epoch_loss_sum=1.5, epoch_loss_count=3)
    p.history.append({"step": 30, "epoch": 1, "loss": 0.5})
    assert Progress.from_json(p.to_json()) == p
    with pytest.raises(CheckpointCorruptError):
        Progress.from_json('{"epoch": 1}')


def test_signature_refuses_another_model() -> None:
    saved = _signature(model="cnn").to_payload()
    with pytest.raises(TrainingError, match="model='cnn'"):
        _signature().check_resumable(saved, Path("ck.pt"))


def test_signature_remaps_position_when_the_global_batch_changes() -> None:
    same = _signature().to_payload()
    assert _signature().remap_position(same, 7) == 7
    # 7 batches of 32 x 3 ranks = 672 records consumed; at 32 x 2 that is batch 10.
    assert _signature(world_size=2).remap_position(same, 7) == 10


def test_torch_checkpoint_restores_model_optimizer_progress_and_rng(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from kubetrain.train import torch_state
    from kubetrain.train.torch_models import ModelShape, build_model

    shape = ModelShape((1, 8, 8), 10)
    torch.manual_seed(0)
    model = build_model("mlp", shape)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    model(torch.randn(4, 1, 8, 8)).sum().backward()
    opt.step()
    progress = Progress(epoch=1, batch_in_epoch=3, global_step=18)
    ck = CheckpointDir(tmp_path, ".pt")
    path = torch_state.save_checkpoint(ck, model=model, optimizer=opt, progress=progress, signature=_signature())
    expected_draws = (torch.rand(3), np.random.rand(2), random.random())

    payload = torch_state.load_checkpoint(path)
    torch.manual_seed(123)
    fresh = build_model("mlp", shape)
    fresh_opt = torch.optim.Adam(fresh.parameters(), lr=0.01)
    fresh.load_state_dict(payload["model"])
    fresh_opt.load_state_dict(payload["optimizer"])
    torch_state.restore_rng(payload["rng"])

    for a, b in zip(model.state_dict().values(), fresh.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    assert fresh_opt.state_dict()["state"][0]["step"] == opt.state_dict()["state"][0]["step"]
    assert Progress.from_json(payload["progress"]) == progress
    assert torch.equal(torch.rand(3), expected_draws[0])
    assert np.array_equal(np.random.rand(2), expected_draws[1])
    assert random.random() == expected_draws[2]


def test_truncated_torch_checkpoint_is_corrupt(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from kubetrain.train import torch_state

    bad = tmp_path / "ckpt-0000000001.pt"
    bad.write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(CheckpointCorruptError):
        torch_state.load_checkpoint(bad)


def test_chainer_checkpoint_restores_model_optimizer_and_progress(tmp_path: Path) -> None:
    from kubetrain.train import chainer_models, chainer_state
    from kubetrain.train.model_shapes import ModelShape

    chainer = chainer_models.chainer
    shape = ModelShape((1, 8, 8), 10)
    np.random.seed(0)
    model = chainer_models.build_model("cnn", shape)
    opt = chainer.optimizers.Adam(alpha=0.01)
    opt.setup(model)
    loss = chainer_models.F.sum(model(np.random.rand(4, 1, 8, 8).astype(np.float32)))
    model.cleargrads()
    loss.backward()
    opt.update()
    progress = Progress(epoch=3, batch_in_epoch=1, global_step=46)
    path = chainer_state.save_checkpoint(
        CheckpointDir(tmp_path, ".npz"),
        model=model,
        optimizer=opt,
        progress=progress,
        signature=_signature(model="cnn"),
    )
    expected_draw = np.random.rand(2)

    ckpt = chainer_state.load_checkpoint(path)
    np.random.seed(99)
    fresh = chainer_models.build_model("cnn", shape)
    fresh_opt = chainer.optimizers.Adam(alpha=0.01)
    fresh_opt.setup(fresh)
    ckpt.restore(model=fresh, optimizer=fresh_opt)

    for (name, a), (_, b) in zip(sorted(model.namedparams()), sorted(fresh.namedparams()), strict=True):
        assert np.array_equal(a.array, b.array), name
    assert fresh_opt.t == opt.t == 1
    assert ckpt.progress == progress
    assert ckpt.signature["model"] == "cnn"
    assert np.array_equal(np.random.rand(2), expected_draw)


def test_garbage_npz_checkpoint_is_corrupt(tmp_path: Path) -> None:
    from kubetrain.train import chainer_state

    bad = tmp_path / "ckpt-0000000001.npz"
    bad.write_bytes(b"not a zip")
    with pytest.raises(CheckpointCorruptError):
        chainer_state.load_checkpoint(bad)


def test_a_checkpoint_rank0_chose_must_be_visible_on_every_rank(tmp_path: Path) -> None:
    from kubetrain.train.checkpoints import require_visible

    with pytest.raises(TrainingError, match="every rank shares"):
        require_visible(tmp_path / "ckpt-0000000010.pt", rank=2)
    (tmp_path / "ckpt-0000000010.pt").write_bytes(b"x")
    require_visible(tmp_path / "ckpt-0000000010.pt", rank=2)
