"""Benchmark: the ChainerMN program run as an MPIJob by kubetrain's local backend vs a bare `mpiexec -n 3`.

    .venv/bin/python bench/chainermn_vs_mpirun.py [--rounds 15] [--epochs 30] [--model mlp] [--json]

kubetrain side: `kubetrain.presets.mpi_job_spec` (3 workers × 1 slot; the launcher runs
`mpirun -n 3 --bind-to none -x ... python -m kubetrain.train.chainermn_mpi`), rendered with
`kubetrain.manifests.build_manifest` and run by `kubetrain.launcher.run_job` on a
`LocalBackend` — what `kubetrain launch -f JOB.yaml --local` does. The local backend gives the
launcher the environment mpi-operator sets (`OMPI_MCA_orte_default_hostfile` → a
`localhost slots=3` hostfile, ...) plus `OMPI_MCA_rmaps_base_oversubscribe=1` and
`OMPI_MCA_mpi_yield_when_idle=1`, because here the workers' slots share one machine's cores.
Bare side: `mpiexec -n 3 --allow-run-as-root --oversubscribe` with the same module and the
flags taken from the job's launcher, and the same `OMPI_MCA_mpi_yield_when_idle=1` so both
sides' ranks wait alike (the comparison is of the launch path, not of that MCA setting).
Built-in digits, naive communicator on CPU, OMP_NUM_THREADS=1, no checkpoints, alternating.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Side, alternate, base_env, digits_dataset, markdown, run_local_job, run_processes, summary

from kubetrain.backends.local.backend import LocalBackend
from kubetrain.manifests import build_manifest
from kubetrain.presets import JobSettings, PodOptions, TrainingParams, mpi_job_spec
from kubetrain.specs import EnvVar, MPIJobSpec, RunPolicy

PROGRAM = "kubetrain.train.chainermn_mpi"
WORKERS, SLOTS = 3, 1  # 3 ranks
TIMEOUT = 600.0
YIELD = "OMPI_MCA_mpi_yield_when_idle"


def _mpiexec() -> str:
    path = shutil.which("mpiexec")
    if path is None:
        raise SystemExit("mpiexec not found: install openmpi-bin (make setup)")
    return path


def job_spec(*, name: str, data: Path, out: Path, ns: argparse.Namespace) -> MPIJobSpec:
    """The MPIJob both sides' flags come from: 3 workers × 1 slot, local absolute paths."""
    params = TrainingParams(
        data_dir=str(data),
        output_dir=str(out),
        checkpoint_dir=None,  # the bare side writes none either; checkpoints are not what is timed
        epochs=ns.epochs,
        batch_size=ns.batch_size,
        lr=ns.lr,
        model=ns.model,
    )
    env = [EnvVar(name="OMP_NUM_THREADS", value="1")]
    if ns.no_yield:
        # The manifest's env comes after the backend's local additions, so this overrides them.
        env.append(EnvVar(name=YIELD, value="0"))
    return mpi_job_spec(
        JobSettings(
            name=name,
            params=params,
            pod=PodOptions(env=tuple(env)),
            run_policy=RunPolicy(backoff_limit=0),  # a failed launcher fails the run, not a retry inside the timing
        ),
        workers=WORKERS,
        slots_per_worker=SLOTS,
    )


def main() -> int:
    """Run the benchmark and print the result (markdown, or JSON with --json)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--lr", type=float, default=0.002, help="Adam learning rate (the program's default)")
    p.add_argument("--model", choices=("mlp", "cnn"), default="mlp")
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--no-yield",
        action="store_true",
        help=f"{YIELD}=0 in the job's env, and none on the bare side (shows the busy-polling trap)",
    )
    ns = p.parse_args()
    load_at_start = os.getloadavg()[0]
    names = (f"bench-mpi-{i}" for i in itertools.count(1))
    bare_env = base_env() if ns.no_yield else base_env({YIELD: "1"})
    with tempfile.TemporaryDirectory(prefix="bench-mpi-") as tmp:
        work = Path(tmp)
        data = digits_dataset(work)
        backend = LocalBackend(root=work / "local", stream_logs=False)

        def kubetrain(out: Path) -> str:
            manifest = build_manifest(job_spec(name=next(names), data=data, out=out, ns=ns))
            return run_local_job(manifest, backend=backend, out=out, timeout=TIMEOUT)

        def bare(out: Path) -> str:
            launcher = job_spec(name="flags", data=data, out=out, ns=ns).launcher
            cmd = [_mpiexec(), "-n", str(WORKERS * SLOTS), "--allow-run-as-root", "--oversubscribe"]
            cmd += [sys.executable, "-m", PROGRAM, *launcher.args]
            label = f"mpiexec -n {WORKERS * SLOTS} --oversubscribe"
            return run_processes(cmd, label=label, env=bare_env, log=out / "mpiexec.log", timeout=TIMEOUT)

        kt, mp = Side("kubetrain", kubetrain), Side("mpiexec", bare)
        try:
            alternate(kt, mp, rounds=ns.rounds, workdir=work)
        finally:
            backend.close()
    cmd = " ".join(["bench/chainermn_vs_mpirun.py", *sys.argv[1:]])
    result = summary(
        kt,
        mp,
        command=cmd,
        workload=(
            f"builtin digits, {ns.model}, {ns.epochs} epochs, batch {ns.batch_size}/rank, lr {ns.lr}, "
            f"3 ranks, naive communicator, CPU, OMP_NUM_THREADS=1, {YIELD}={'0/unset' if ns.no_yield else '1 both'}"
        ),
        load_at_start=load_at_start,
    )
    print(json.dumps(result, indent=2) if ns.json else markdown(result, "kubetrain", "mpiexec"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
