"""Benchmark: the DDP program started as kubetrain starts it vs under `torchrun`, 3 processes.

    .venv/bin/python bench/ddp_vs_torchrun.py [--rounds 9] [--epochs 30] [--model mlp] [--json]

kubetrain side: three plain processes, each with exactly the environment the training-operator
injects into a PyTorchJob replica (Master + 2 Workers: MASTER_ADDR/MASTER_PORT/WORLD_SIZE/RANK and
the PET_* variables, `kubetrain.train.topology.pytorchjob_env`), the master address being a
loopback address of its own as kubetrain's local backend assigns it. torchrun side:
`torchrun --nproc_per_node 3` running the same module with the same flags. Both train the
built-in digits data set with gloo on CPU, OMP_NUM_THREADS=1, alternating in one run.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Side, alternate, base_env, digits_dataset, markdown, summary

from kubetrain.train.topology import pytorchjob_env

PROGRAM = "kubetrain.train.torch_ddp"
RANKS = 3
MASTER_ADDR = "127.0.77.1"  # pod 0 of a local job: kubetrain's backend gives each pod its own


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _kubetrain(out: Path, args: list[str]) -> list[subprocess.Popen[bytes]]:
    port = _free_port()
    procs = []
    for rank in range(RANKS):
        env = base_env() | pytorchjob_env(
            replica_index=0 if rank == 0 else rank - 1,
            is_master=rank == 0,
            replicas=RANKS,
            master_addr=MASTER_ADDR,
            master_port=port,
        )
        with open(out / f"rank{rank}.log", "wb") as log:
            cmd = [sys.executable, "-m", PROGRAM, *args]
            procs.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=log))
    return procs


def _torchrun(out: Path, args: list[str]) -> list[subprocess.Popen[bytes]]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(RANKS)]
    cmd += ["--master_addr", "127.0.0.1", "--master_port", str(_free_port())]
    with open(out / "torchrun.log", "wb") as log:
        cmd += ["-m", PROGRAM, *args]
        return [subprocess.Popen(cmd, env=base_env(), stdout=log, stderr=log)]


def main() -> int:
    """Run the benchmark and print the result (markdown, or JSON with --json)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--model", choices=("mlp", "cnn"), default="mlp")
    p.add_argument("--json", action="store_true")
    ns = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-ddp-") as tmp:
        work = Path(tmp)
        data = digits_dataset(work)
        train_args = ["--data", str(data), "--epochs", str(ns.epochs), "--model", ns.model]
        kt, tr = Side("kubetrain", _kubetrain), Side("torchrun", _torchrun)
        alternate(kt, tr, rounds=ns.rounds, train_args=train_args, workdir=work, timeout=600)
    cmd = " ".join(["bench/ddp_vs_torchrun.py", *sys.argv[1:]])
    result = summary(
        kt,
        tr,
        command=cmd,
        workload=f"builtin digits, {ns.model}, {ns.epochs} epochs, 3 ranks, gloo, CPU",
    )
    print(json.dumps(result, indent=2) if ns.json else markdown(result, "kubetrain", "torchrun"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
