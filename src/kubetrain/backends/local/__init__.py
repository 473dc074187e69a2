"""The local backend (`backend.LocalBackend`): PyTorchJob, MPIJob and JobSet manifests run on this
machine, as the operators would run them.

The package imports nothing: its watchdog runs as `python -m kubetrain.backends.local.watchdog`
and should start without loading the backend.

Every replica ("pod") is one process tree in its own session, with its own loopback address
(127.x.y.z, one block per job, see `addresses`), the environment a pod would have (its image's
ENV, its manifest's env, what its operator injects; of this machine's environment only what a
process needs to run here: `env.MACHINE_ENV`), its volumes mapped to local directories, and its
stdout+stderr captured to a file (and, with `stream_logs`, printed as `[master-0] ...`). A
supervisor thread per job plays the operator: it starts, restarts and stops the processes by the
job's policies and writes the `status` the operator would write, so
`kubetrain.status.parse_job_status` and the launcher read a local job exactly like a cluster one. The kinds:

- PyTorchJob (training-operator v1.9): `operators.pytorchjob`;
- MPIJob v2beta1 (mpi-operator v0.8): `operators.mpijob` — the launcher's `mpirun` starts the ranks on
  this machine through a `localhost slots=N` hostfile; the workers' sshd does not run;
- JobSet v1alpha2 (v0.12): `operators.jobset`, with child batch Jobs in `operators.batchjob`.

Translation (`env`, `podspec`): host names the manifest uses (`<job>-master-0`,
`<js>-ps-1-0.<js>`, with or without `.<ns>.svc.cluster.local`) become loopback addresses and mount
paths become local directories, in literal env values and in command and args (also inside
shell strings); not inside files a program reads, and not in values the API supplies
(downward-API fields, secrets). `python`/`python3` run this interpreter, also inside shell
commands. A command that does not exist here fails its job at once, naming the replica and image.
Every replica also gets `KUBETRAIN_BIND_ADDRESS=<its address>`: servers should listen there (or
on the host of their own entry in the address lists the manifest passes), not on 0.0.0.0 — two
replicas binding the wildcard address on one port collide here (with SO_REUSEPORT, as gRPC sets
it, they silently share connections), where on a cluster each pod has its own IP.
Ports stay as the manifest has them, but for those where programs host a rendezvous store:
torch's TCPStore (an `env://` program's rank 0 at MASTER_PORT, torchrun's static agent there)
and torchrun's c10d rendezvous store (an elastic job's `rdzvPort`) listen on every interface,
and torch has no setting to bind them to one address, so two jobs with the same port would meet
there (the second fails EADDRINUSE, or its workers join the first job's store). Each local job
is therefore given a port of its own for each of those (`addresses.AddressBlock.hold_port`), and
MASTER_PORT, PET_MASTER_PORT and PET_RDZV_ENDPOINT (a TrainJob's PET_MASTER_PORT) carry it; a
port a program writes into its own command line stays as written.

Directories under `root` (default `$KUBETRAIN_LOCAL_ROOT`, else `~/.kubetrain/local`):
`claims/<claimName>/` for each PersistentVolumeClaim (shared by all replicas, kept across runs:
put input data there and read outputs from there, see `claim_dir`), and
`jobs/<namespace>/<name>-<uid8>/` per job with `logs/<pod>.<n>.log` (one file per container
start) and `pods/<pod>/volumes/` (fresh emptyDirs).

Processes never outlive their job: each container runs under a child subreaper (`reaper`), so
every process it starts stays in its process tree whatever it does to its session or environment;
they are stopped (SIGTERM to every process of the container, SIGKILL after a grace period capped
at `max_grace_seconds`, see `process`) and reaped on success, failure, deadline, `delete`,
`suspend` and `close`, and when the backend is garbage-collected or the interpreter exits; if this
process dies hard (SIGKILL), each reaper stops its container, and a watchdog process stops what is
left (`watchdog`). Jobs live as long as this backend object; a job name submitted again with the
same KFP run and task labels is adopted, with other labels it is a conflict.

Not imitated: scheduling (nodeSelector, tolerations, resources are not enforced, GPUs are not
isolated), readOnly mounts, image contents (the image's entrypoint, files and environment),
init containers and sidecars (skipped with a Warning event), Services other than the per-pod
names, a Job's podFailurePolicy rules on pod conditions (nothing disrupts a local pod),
JobSet's BlockingRecreate and InPlaceRestart (both act as Recreate).
Restart back-off and probe periods are scaled down (`restart_backoff_seconds`,
`probe_period_seconds`) so local runs take seconds.
"""
