"""What the master, the servers and the workers share: the wire (gRPC helpers, tensors), the task
and outcome types, the errors, model names, metrics, key placement, embedding tables, optimizers and
the checkpoint format the servers write and the master reads."""
