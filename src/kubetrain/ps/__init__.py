"""The parameter-server runtime: a master handing out tasks, sharded parameter servers, workers.

Processes (each a `python -m` entry point, run by the PS JobSet or locally):

- `kubetrain.ps.master`: cuts epochs into tasks, hands them out, takes reports, persists its
  state on the shared volume, evaluates through an eval queue, writes the model and metrics.
- `kubetrain.ps.server`: one shard of the parameters (dense by stable name hash, embedding rows by
  id modulo the shard count), with the optimizer, async or sync updates and checkpoints.
- `kubetrain.ps.worker`: get task, read, pull, forward/backward in PyTorch, push, report.

The protocol is `proto/kubetrain_ps.proto`. The packages: `master/`, `server/`, `worker/` (one per
process), `common/` (what they share), `proto/` (the protocol and its generated stubs) and
`harness/` (local runs, the baseline and data generators for tests and benchmarks; not part of a job).
"""
