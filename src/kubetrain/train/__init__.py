"""The training programs that run in a job's pods, and as local processes on one machine.

- `python -m kubetrain.train.torch_ddp`: PyTorch DDP (a PyTorchJob's replicas, plain or under torchrun).
- `python -m kubetrain.train.chainermn_mpi`: ChainerMN under MPI (an MPIJob's launcher and workers).

Both read a dataset directory in kubetrain's format and run one loop (`loop`): resume from the
latest checkpoint, train, evaluate, checkpoint; rank 0 writes the model and `metrics.json`. Each
framework brings only its steps, models, checkpoint format and process group.
"""
