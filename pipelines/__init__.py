"""kubetrain's KFP pipelines (importable as `kubetrain.pipelines`), each compiled to YAML beside its source.

- `mnist_pytorch`: download → PyTorch DDP.
- `mnist_chainermn`: download → ChainerMN over MPI.
- `mnist_ps`: download → parameter-server training.
- `compare_frameworks`: download once → the three in parallel → a comparison table.

Each takes `dataset` (default `builtin:digits`, which needs no network) and `workspace_pvc`, the
ReadWriteMany claim shared by the launcher steps and the training jobs.
"""
