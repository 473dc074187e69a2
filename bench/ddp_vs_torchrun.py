"""Benchmark: the DDP program run as a PyTorchJob by kubetrain's local backend vs under `torchrun`, 3 processes.

    .venv/bin/python bench/ddp_vs_torchrun.py [--rounds 15] [--epochs 30] [--model mlp] [--workers 2] [--json]

kubetrain side: `kubetrain.presets.pytorch_job_spec` (Master + 2 Workers running
`python -m kubetrain.train.torch_ddp`), rendered with `kubetrain.manifests.build_manifest` and
run by `kubetrain.launcher.run_job` on a `LocalBackend` — what `kubetrain launch -f JOB.yaml
--local` does: one process per replica, each on its own loopback address with the environment
the training-operator injects, a supervisor thread writing the job's status, the launcher
watching it to the end. torchrun side: `torchrun --nproc_per_node 3` running the same module
with the flags taken from the job's master replica (so both sides train with identical flags).
Both train the built-in digits data set with gloo on CPU, OMP_NUM_THREADS=1, no checkpoints,
alternating in one run.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import socket
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Side, alternate, base_env, digits_dataset, markdown, run_local_job, run_processes, summary

from kubetrain.backends.local.backend import LocalBackend
from kubetrain.manifests import build_manifest
from kubetrain.presets import JobSettings, PodOptions, TrainingParams, pytorch_job_spec
from kubetrain.specs import EnvVar, PyTorchJobSpec, RunPolicy

PROGRAM = "kubetrain.train.torch_ddp"
WORKERS = 2  # + the master: 3 processes, as torchrun --nproc_per_node 3 (--workers changes it)
TIMEOUT = 600.0


def _free_port() -> int:
    # The wildcard address: that is where rank 0's TCPStore (and torchrun's agent store) listens.
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def job_spec(*, name: str, data: Path, out: Path, ns: argparse.Namespace) -> PyTorchJobSpec:
    """The PyTorchJob both sides' flags come from: master + 2 workers, local absolute paths."""
    params = TrainingParams(
        data_dir=str(data),
        output_dir=str(out),
        checkpoint_dir=None,  # the torchrun side writes none either; checkpoints are not what is timed
        epochs=ns.epochs,
        batch_size=ns.batch_size,
        lr=ns.lr,
        model=ns.model,
    )
    spec = pytorch_job_spec(
        JobSettings(
            name=name,
            params=params,
            # As a user sets it in the pod template; the torchrun side gets it from base_env().
            pod=PodOptions(env=(EnvVar(name="OMP_NUM_THREADS", value="1"),)),
            # A failed rank fails the run instead of being restarted into the timing.
            run_policy=RunPolicy(backoff_limit=0),
        ),
        workers=ns.workers,
        backend="gloo",
    )
    # A free port rather than the operator's default 23456: rank 0's TCPStore listens on the
    # wildcard address, not on its pod's loopback address, so a concurrent local PyTorchJob on
    # this machine (a colleague's test) would make it fail with EADDRINUSE. torchrun gets a
    # free port too.
    return dataclasses.replace(spec, master_port=_free_port())


def main() -> int:
    """Run the benchmark and print the result (markdown, or JSON with --json)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--batch-size", type=int, default=32, help="per process")
    p.add_argument("--lr", type=float, default=0.002, help="Adam learning rate (the program's default)")
    p.add_argument("--model", choices=("mlp", "cnn"), default="mlp")
    # The smoke test (tests/integration/test_train_bench.py) runs one worker: 2 ranks a side
    # still make both launchers rendezvous, at two fewer torch processes.
    p.add_argument("--workers", type=int, default=WORKERS, help="PyTorchJob workers beside the master")
    p.add_argument("--json", action="store_true")
    ns = p.parse_args()
    if ns.workers < 1:
        p.error(f"--workers: got {ns.workers}; expected an integer >= 1 (a distributed job on both sides)")
    load_at_start = os.getloadavg()[0]
    names = (f"bench-ddp-{i}" for i in itertools.count(1))
    with tempfile.TemporaryDirectory(prefix="bench-ddp-") as tmp:
        work = Path(tmp)
        data = digits_dataset(work)
        backend = LocalBackend(root=work / "local", stream_logs=False)

        def kubetrain(out: Path) -> str:
            manifest = build_manifest(job_spec(name=next(names), data=data, out=out, ns=ns))
            return run_local_job(manifest, backend=backend, out=out, timeout=TIMEOUT)

        def torchrun(out: Path) -> str:
            master = job_spec(name="flags", data=data, out=out, ns=ns).master
            if master is None:  # a non-elastic job always has one; this guards the type
                raise RuntimeError("the PyTorchJob preset made no master replica")
            cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(ns.workers + 1)]
            cmd += ["--master_addr", "127.0.0.1", "--master_port", str(_free_port()), "-m", PROGRAM]
            cmd += list(master.args)
            label = f"torchrun --nproc_per_node {ns.workers + 1}"
            return run_processes(cmd, label=label, env=base_env(), log=out / "torchrun.log", timeout=TIMEOUT)

        kt, tr = Side("kubetrain", kubetrain), Side("torchrun", torchrun)
        try:
            alternate(kt, tr, rounds=ns.rounds, workdir=work)
        finally:
            backend.close()
    cmd = " ".join(["bench/ddp_vs_torchrun.py", *sys.argv[1:]])
    result = summary(
        kt,
        tr,
        command=cmd,
        workload=(
            f"builtin digits, {ns.model}, {ns.epochs} epochs, batch {ns.batch_size}/rank, lr {ns.lr}, "
            f"{ns.workers + 1} ranks, gloo, CPU, OMP_NUM_THREADS=1"
        ),
        load_at_start=load_at_start,
    )
    print(json.dumps(result, indent=2) if ns.json else markdown(result, "kubetrain", "torchrun"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
