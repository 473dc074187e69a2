"""The operators, imitated on this machine: one controller per job kind, and the batch Job they share.

Each controller reads its manifest, starts the replicas as local pods, applies the kind's restart,
success and deadline rules, and writes back the `status.conditions` the real operator writes.
"""
