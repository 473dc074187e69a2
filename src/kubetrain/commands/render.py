"""`kubetrain render`: print the manifest a component would submit, validated, without submitting it."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TypedDict

import yaml

from kubetrain.errors import ExitCode, SpecError
from kubetrain.manifests import build_manifest
from kubetrain.manifests.validate import validate_manifest
from kubetrain.presets import (
    CHAINERMN_IMAGE,
    PS_IMAGE,
    PYTORCH_IMAGE,
    WORKSPACE_MOUNT,
    PodOptions,
    TrainingParams,
    mpi_job_spec,
    mpi_trainjob_spec,
    ps_job_spec,
    pytorch_job_spec,
    pytorch_trainjob_spec,
)
from kubetrain.specs import JobSpec, Resources


def _count(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"got {value!r}; expected an integer ≥ 0") from None
    if number < 0:
        raise argparse.ArgumentTypeError(f"got {number}; expected an integer ≥ 0")
    return number


def _elastic(value: str) -> tuple[int, int]:
    low, sep, high = value.partition(":")
    if not sep or not low.isdigit() or not high.isdigit():
        raise argparse.ArgumentTypeError(f"got {value!r}; expected MIN:MAX, e.g. 1:4")
    return int(low), int(high)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `render` subcommand."""
    p = subparsers.add_parser(
        "render",
        help="print the job manifest a training component would submit",
        description="Print the PyTorchJob, MPIJob, parameter-server JobSet or Trainer v2 TrainJob exactly as the "
        "components submit it.",
    )
    p.add_argument("kind", choices=("pytorchjob", "mpijob", "psjob", "trainjob"))
    p.add_argument(
        "--framework",
        choices=("pytorch", "chainermn"),
        default="pytorch",
        help="trainjob: PyTorch DDP on torch-distributed, or ChainerMN over MPI on kubetrain-mpi",
    )
    p.add_argument("--name", required=True, help="job name (DNS-1035; components derive it from the KFP run)")
    p.add_argument("--namespace", default=None)
    p.add_argument(
        "--workers",
        type=_count,
        default=None,
        help="worker replicas (pytorch: 0 = master only; trainjob: nodes besides node 0, or MPI nodes)",
    )
    p.add_argument("--ps", type=_count, default=2, help="parameter servers (psjob)")
    p.add_argument("--slots-per-worker", type=_count, default=1, help="MPI slots per worker (mpijob)")
    p.add_argument("--elastic", type=_elastic, default=None, metavar="MIN:MAX", help="elastic PyTorchJob bounds")
    p.add_argument("--image", default=None, help="training image (default: the project's image for the kind)")
    p.add_argument("--data", default=f"{WORKSPACE_MOUNT}/datasets/digits", help="dataset directory in the pod")
    p.add_argument("--output-dir", default=f"{WORKSPACE_MOUNT}/runs/output", help="output directory in the pod")
    p.add_argument("--workspace-pvc", default=None, help="ReadWriteMany claim mounted at /workspace in every pod")
    # The same defaults as the training components, so `render` shows what they submit.
    defaults = TrainingParams()
    p.add_argument("--epochs", type=int, default=defaults.epochs)
    p.add_argument("--batch-size", type=int, default=defaults.batch_size)
    p.add_argument("--lr", type=float, default=defaults.lr, help="Adam learning rate")
    p.add_argument("--model", default=defaults.model, help="mlp or cnn (psjob: mlp or wide_deep)")
    p.add_argument("--mode", choices=("async", "sync"), default="async", help="PS update mode (psjob)")
    p.add_argument("--backend", choices=("gloo", "nccl"), default="gloo", help="torch.distributed backend")
    p.add_argument("--cpu", default=None, help="CPU request per training pod, e.g. 2 or 500m")
    p.add_argument("--memory", default=None, help="memory request per training pod, e.g. 4Gi")
    p.add_argument("--gpus", type=_count, default=0, help="GPUs per training pod (nvidia.com/gpu)")
    p.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml")
    p.set_defaults(func=run)


class PresetArgs(TypedDict):
    """What every preset takes from `render`'s flags, whatever the kind: the job's name and
    namespace, the program's flags and the pods' options (typed, so each preset call is checked)."""

    name: str
    namespace: str | None
    params: TrainingParams
    pod: PodOptions
    workspace_pvc: str | None


def preset_args(args: argparse.Namespace) -> PresetArgs:
    """The arguments every preset takes, from `render`'s parsed flags."""
    params = TrainingParams(
        data_dir=args.data,
        output_dir=args.output_dir,
        checkpoint_dir=f"{args.output_dir}/checkpoints",
        epochs=args.epochs,
        batch_size=args.batch_size,
        lr=args.lr,
        model=args.model,
    )
    return PresetArgs(
        name=args.name,
        namespace=args.namespace,
        params=params,
        pod=PodOptions(resources=Resources(cpu=args.cpu, memory=args.memory, gpus=args.gpus)),
        workspace_pvc=args.workspace_pvc,
    )


def build_spec(args: argparse.Namespace) -> JobSpec:
    """The spec `render` prints, from its parsed flags."""
    common = preset_args(args)
    if args.kind == "pytorchjob":
        return pytorch_job_spec(
            workers=args.workers if args.workers is not None else 0,
            elastic=args.elastic,
            image=args.image or PYTORCH_IMAGE,
            backend=args.backend,
            **common,
        )
    if args.elastic is not None:
        raise SpecError("--elastic", args.elastic, "only with pytorchjob")
    if args.kind == "trainjob" and args.framework == "pytorch":
        return pytorch_trainjob_spec(
            workers=args.workers if args.workers is not None else 0,
            image=args.image or PYTORCH_IMAGE,
            backend=args.backend,
            **common,
        )
    if args.kind == "trainjob":
        return mpi_trainjob_spec(
            workers=args.workers if args.workers is not None else 2,
            slots_per_worker=args.slots_per_worker,
            image=args.image or CHAINERMN_IMAGE,
            **common,
        )
    if args.kind == "mpijob":
        return mpi_job_spec(
            workers=args.workers if args.workers is not None else 2,
            slots_per_worker=args.slots_per_worker,
            image=args.image or CHAINERMN_IMAGE,
            **common,
        )
    return ps_job_spec(
        ps=args.ps,
        workers=args.workers if args.workers is not None else 3,
        mode=args.mode,
        image=args.image or PS_IMAGE,
        **common,
    )


def run(args: argparse.Namespace) -> int:
    """Print the manifest; invalid flags end in the validation message and exit code 2."""
    manifest = build_manifest(build_spec(args))
    validate_manifest(manifest)
    if args.output == "json":
        json.dump(manifest, sys.stdout, indent=2, sort_keys=False)
        sys.stdout.write("\n")
    else:
        yaml.safe_dump(manifest, sys.stdout, sort_keys=False, default_flow_style=False)
    return int(ExitCode.SUCCESS)
