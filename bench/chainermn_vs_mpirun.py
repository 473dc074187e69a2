"""Benchmark: the ChainerMN program launched as an MPIJob launcher does vs a bare `mpiexec -n 3`.

    .venv/bin/python bench/chainermn_vs_mpirun.py [--rounds 9] [--epochs 60] [--model mlp] [--json]

kubetrain side: `mpirun -n 3 python -m kubetrain.train.chainermn_mpi ...` with the environment
mpi-operator gives an MPIJob's launcher container (OpenMPI: `OMPI_MCA_orte_default_hostfile`
pointing at a hostfile, `OMPI_MCA_orte_keep_fqdn_hostnames`, `OMPI_MCA_plm_rsh_args`,
`OMPI_MCA_orte_set_default_slots`, `K_MPI_JOB_ROLE=launcher`; operator-contracts.md §6), the
hostfile naming this machine with 3 slots, plus `OMPI_MCA_mpi_yield_when_idle=1` because here the
"pods" share one machine's cores (see the comment in `_kubetrain`). Bare side: `mpiexec -n 3 --allow-run-as-root
--oversubscribe` with the same module and flags. Built-in digits, naive communicator on CPU,
OMP_NUM_THREADS=1, alternating in one run.
"""

from __future__ import annotations

import argparse
import functools
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Side, alternate, base_env, digits_dataset, markdown, summary

PROGRAM = "kubetrain.train.chainermn_mpi"
RANKS = 3


def _mpiexec() -> str:
    path = shutil.which("mpiexec")
    if path is None:
        raise SystemExit("mpiexec not found: install openmpi-bin (make setup)")
    return path


def _kubetrain(out: Path, args: list[str], *, ns_yield: bool) -> list[subprocess.Popen[bytes]]:
    hostfile = out / "hostfile"
    hostfile.write_text(f"localhost slots={RANKS}\n")
    env = base_env() | {
        "K_MPI_JOB_ROLE": "launcher",
        "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
        "OMPI_MCA_orte_default_hostfile": str(hostfile),
        "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10",
        "OMPI_MCA_orte_set_default_slots": str(RANKS),
        # Launcher images run as root; Open MPI wants both variables to allow that.
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    }
    if ns_yield:
        # On one machine the job's "pods" share its cores. Open MPI yields the CPU while waiting
        # only when it knows it oversubscribes, and a hostfile claiming 3 slots hides that: its
        # ranks then busy-poll against each other (measured ~45x slower on 2 cores).
        env["OMPI_MCA_mpi_yield_when_idle"] = "1"
    cmd = [_mpiexec().replace("mpiexec", "mpirun"), "-n", str(RANKS)]
    with open(out / "mpirun.log", "wb") as log:
        cmd += [sys.executable, "-m", PROGRAM, *args]
        return [subprocess.Popen(cmd, env=env, stdout=log, stderr=log)]


def _bare(out: Path, args: list[str]) -> list[subprocess.Popen[bytes]]:
    cmd = [_mpiexec(), "-n", str(RANKS), "--allow-run-as-root", "--oversubscribe"]
    with open(out / "mpiexec.log", "wb") as log:
        cmd += [sys.executable, "-m", PROGRAM, *args]
        return [subprocess.Popen(cmd, env=base_env(), stdout=log, stderr=log)]


def main() -> int:
    """Run the benchmark and print the result (markdown, or JSON with --json)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--epochs", type=int, default=60)
    p.add_argument("--model", choices=("mlp", "cnn"), default="mlp")
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--no-yield",
        action="store_true",
        help="leave out OMPI_MCA_mpi_yield_when_idle=1 on the kubetrain side (shows the trap)",
    )
    ns = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-mpi-") as tmp:
        work = Path(tmp)
        data = digits_dataset(work)
        train_args = ["--data", str(data), "--epochs", str(ns.epochs), "--model", ns.model]
        kt = Side("kubetrain", functools.partial(_kubetrain, ns_yield=not ns.no_yield))
        bare = Side("mpiexec", _bare)
        alternate(kt, bare, rounds=ns.rounds, train_args=train_args, workdir=work, timeout=600)
    cmd = " ".join(["bench/chainermn_vs_mpirun.py", *sys.argv[1:]])
    result = summary(
        kt,
        bare,
        command=cmd,
        workload=f"builtin digits, {ns.model}, {ns.epochs} epochs, 3 ranks, naive communicator, CPU",
    )
    print(json.dumps(result, indent=2) if ns.json else markdown(result, "kubetrain", "mpiexec"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
