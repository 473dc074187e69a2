"""A user's own ChainerMN program, as `chainermn_train(command=["python", "chainermn_train.py"])` runs it.

mpirun starts it on every rank (Open MPI's environment gives the ranks, ChainerMN's communicator
wraps them) and forwards KUBETRAIN_DATA_DIR and KUBETRAIN_OUTPUT_DIR. Rank 0 reads the data set,
scatters it, and at the end writes `model.npz` (`chainer.serializers.save_npz`), `model.json`
and `metrics.json`. The chainermn image sets SETUPTOOLS_USE_DISTUTILS=stdlib, which Chainer 7.8.1
needs to import; the local backend gives every pod the same.
"""

import argparse
import json
import os

import chainer
import chainer.functions as F  # noqa: N812
import chainer.links as L  # noqa: N812
import chainermn
import numpy as np


class Net(chainer.Chain):
    """Logistic regression: one linear layer."""

    def __init__(self, in_features: int, num_classes: int) -> None:
        super().__init__()
        with self.init_scope():
            self.fc = L.Linear(in_features, num_classes)

    def forward(self, x: chainer.Variable) -> chainer.Variable:
        return self.fc(x)


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

    comm = chainermn.create_communicator("naive")  # CPU; "pure_nccl" on GPUs
    data_dir = os.environ["KUBETRAIN_DATA_DIR"]
    info, x, y = load_split(data_dir, "train") if comm.rank == 0 else (None, None, None)
    info = comm.bcast_obj(info)
    features = int(np.prod(info["feature_shape"]))
    train = chainer.datasets.TupleDataset(x.reshape(len(x), features), y) if comm.rank == 0 else None
    train = chainermn.scatter_dataset(train, comm, shuffle=True, seed=0)  # this rank's records

    np.random.seed(0)  # the same initial weights on every rank
    model = Net(features, info["num_classes"])
    optimizer = chainermn.create_multi_node_optimizer(chainer.optimizers.SGD(lr=args.lr), comm)
    optimizer.setup(model)

    history, step = [], 0
    for epoch in range(args.epochs):
        for start in range(0, len(train), args.batch_size):
            xb, yb = chainer.dataset.concat_examples(train[start : start + args.batch_size])
            loss = F.softmax_cross_entropy(model(xb), yb)
            model.cleargrads()
            loss.backward()
            optimizer.update()  # allreduces the gradients across the ranks
            step += 1
            history.append({"step": step, "epoch": epoch, "loss": float(loss.array)})

    if comm.rank == 0:
        _, x_test, y_test = load_split(data_dir, "test")
        with chainer.using_config("train", False), chainer.no_backprop_mode():
            logits = model(x_test.reshape(len(x_test), features)).array
        accuracy = float((logits.argmax(1) == y_test).mean())
        out = os.environ["KUBETRAIN_OUTPUT_DIR"]
        os.makedirs(out, exist_ok=True)
        chainer.serializers.save_npz(os.path.join(out, "model.npz"), model)
        with open(os.path.join(out, "model.json"), "w") as f:
            json.dump({"in_features": features, "num_classes": info["num_classes"]}, f)
        with open(os.path.join(out, "metrics.json"), "w") as f:
            json.dump({"test_accuracy": accuracy, "world_size": comm.size, "history": history}, f)


if __name__ == "__main__":
    main()
