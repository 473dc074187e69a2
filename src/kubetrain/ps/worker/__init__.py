"""A PS worker (`python -m kubetrain.ps.worker`): asks the master for tasks, trains them (trainer,
models) pulling parameters from and pushing gradients to the shards (client)."""
