"""A parameter-server shard (`python -m kubetrain.ps.server`): the gRPC service (main) over its
parameter store (store) and the store's checkpoints on the shared volume (checkpoint)."""
