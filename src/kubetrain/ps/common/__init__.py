"""What the master, the servers and the workers share: the wire (gRPC helpers, tensors), the task
and outcome types, the errors, model names, metrics, key placement, embedding tables and
optimizers."""
