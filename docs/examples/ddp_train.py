"""A user's own PyTorch DDP program, as `pytorch_train(command=["python", "ddp_train.py"], args=[...])` runs it.

It knows nothing of kubetrain beyond the environment: the rendezvous comes from the PyTorchJob
operator (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE), the directories from KUBETRAIN_DATA_DIR and
KUBETRAIN_OUTPUT_DIR. It reads the data set with numpy only, trains a logistic regression, and
rank 0 writes `model.pt` (the state dict), `model.json` (how to rebuild it) and `metrics.json`.
"""

import argparse
import json
import os

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def load_split(data_dir: str, split: str) -> tuple[dict, np.ndarray, np.ndarray]:
    """dataset.json and the split's shards concatenated: x float32 (n, *feature_shape), y int64 (n,)."""
    with open(os.path.join(data_dir, "dataset.json")) as f:
        info = json.load(f)
    xs, ys = [], []
    for shard in info["splits"][split]["shards"]:
        with np.load(os.path.join(data_dir, shard["file"])) as npz:
            xs.append(npz["x"])
            ys.append(npz["y"])
    return info, np.concatenate(xs), np.concatenate(ys)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.5)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()

    dist.init_process_group("gloo")  # reads MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # the same initial weights on every rank
    info, x, y = load_split(os.environ["KUBETRAIN_DATA_DIR"], "train")
    features = int(np.prod(info["feature_shape"]))
    x_mine = torch.from_numpy(x.reshape(len(x), features)[rank::world])  # this rank's records
    y_mine = torch.from_numpy(y[rank::world])
    model = DistributedDataParallel(nn.Linear(features, info["num_classes"]))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)

    history, step = [], 0
    for epoch in range(args.epochs):
        for start in range(0, len(x_mine), args.batch_size):
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(
                model(x_mine[start : start + args.batch_size]), y_mine[start : start + args.batch_size]
            )
            loss.backward()  # DDP averages the gradients across the ranks
            optimizer.step()
            step += 1
            history.append({"step": step, "epoch": epoch, "loss": loss.item()})

    if rank == 0:
        _, x_test, y_test = load_split(os.environ["KUBETRAIN_DATA_DIR"], "test")
        with torch.no_grad():
            logits = model.module(torch.from_numpy(x_test.reshape(len(x_test), features)))
        accuracy = float((logits.argmax(1).numpy() == y_test).mean())
        out = os.environ["KUBETRAIN_OUTPUT_DIR"]
        os.makedirs(out, exist_ok=True)
        torch.save(model.module.state_dict(), os.path.join(out, "model.pt"))
        with open(os.path.join(out, "model.json"), "w") as f:
            json.dump({"in_features": features, "num_classes": info["num_classes"]}, f)
        with open(os.path.join(out, "metrics.json"), "w") as f:
            json.dump({"test_accuracy": accuracy, "world_size": world, "history": history}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
