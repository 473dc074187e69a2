"""`kubetrain render`: print the manifest a training component would submit, without submitting it.

`render` builds the very request the component's step builds (:mod:`kubetrain.kfp_runtime.frameworks`:
same inputs, same defaults, same validation, same errors), plans the job with the step's own
:func:`~kubetrain.kfp_runtime.train_step.plan_job` and prints :meth:`TrainingRequest.manifest`, the
manifest the step submits. Its flags are the components' inputs, spelled as flags
(`--records-per-task` for `records_per_task`); a few short forms stay from earlier versions
(`--ps`, `--lr`, `--model`, `--elastic MIN:MAX`). The job name is given (`--name`) where the step
derives it from the KFP run, and the dataset directory (`--data`) where the step reads it from its
Dataset artifact.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import typing
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from kubetrain.errors import ExitCode, InvalidInputError, KubetrainError
from kubetrain.kfp_runtime.frameworks import ChainerMNRequest, PSRequest, PyTorchRequest
from kubetrain.kfp_runtime.request_base import IDENTITY_INPUTS, TrainingRequest
from kubetrain.kfp_runtime.train_step import plan_job
from kubetrain.manifests.patch import MAX_JSON_DEPTH, json_depth
from kubetrain.presets import WORKSPACE_MOUNT

REQUESTS: tuple[type[TrainingRequest], ...] = (PyTorchRequest, ChainerMNRequest, PSRequest)
# The component each kind comes from, for errors that name an input the kind does not take.
COMPONENTS = {PyTorchRequest: "pytorch_train", ChainerMNRequest: "chainermn_train", PSRequest: "ps_train"}
# Short forms kept from earlier versions of `render`: flag -> the input it sets.
ALIASES = {"ps_replicas": ("--ps",), "learning_rate": ("--lr",), "architecture": ("--model",)}
RENDER_ID = "render"


def render_run_id() -> str:
    """A run id no other render shares: two users' `render | launch -f -` must never adopt each
    other's job, and the launcher adopts a job on a 409 only when its run and task ids match."""
    return f"{RENDER_ID}-{uuid.uuid4().hex[:12]}"


# Inputs land under their own prefix: `command` is also the CLI's name for the subcommand.
INPUT_DEST = "input_"


class _PlainDumper(yaml.SafeDumper):
    """A safe dumper that writes a value shared by two pods twice, not as a YAML anchor and alias."""

    def ignore_aliases(self, data: object) -> bool:
        return True


def _shown(value: str) -> str:
    """`value` for an error message: repr'd, and cut when it is long."""
    return repr(value) if len(value) <= 200 else f"{value[:200]!r}... ({len(value)} characters)"


def _read_at_file(value: str) -> str:
    """The text of the file `@PATH` names, or a one-line argparse error saying what is wrong with it."""
    path = Path(value[1:])
    try:
        return path.read_text(encoding="utf-8")
    except IsADirectoryError:
        raise argparse.ArgumentTypeError(f"{value}: {path} is a directory; expected a file holding JSON") from None
    except FileNotFoundError:
        raise argparse.ArgumentTypeError(f"{value}: {path} does not exist; expected a file holding JSON") from None
    except UnicodeDecodeError as e:
        raise argparse.ArgumentTypeError(f"{value}: {path} is not UTF-8 text (byte {e.start})") from None
    except OSError as e:
        raise argparse.ArgumentTypeError(f"{value}: {path} cannot be read ({e.strerror})") from None


def _json(kind: str) -> Callable[[str], object]:
    """A flag taking JSON (or @FILE holding JSON) of `kind` (list or object)."""

    def parse(value: str) -> object:
        text = _read_at_file(value) if value.startswith("@") else value
        try:
            data = json.loads(text)
        except RecursionError:
            raise argparse.ArgumentTypeError(
                f"got JSON nested too deeply; expected at most {MAX_JSON_DEPTH} levels of lists and objects"
            ) from None
        except ValueError as e:
            raise argparse.ArgumentTypeError(f"got {_shown(value)}; expected JSON ({e})") from None
        if json_depth(data) > MAX_JSON_DEPTH:
            raise argparse.ArgumentTypeError(
                f"got JSON nested {json_depth(data)} levels deep; expected at most {MAX_JSON_DEPTH} levels "
                "of lists and objects"
            )
        if kind == "list" and not isinstance(data, list):
            raise argparse.ArgumentTypeError(f'got {_shown(value)}; expected a JSON list, e.g. \'["a", "b"]\'')
        if kind == "object" and not isinstance(data, dict):
            raise argparse.ArgumentTypeError(f'got {_shown(value)}; expected a JSON object, e.g. \'{{"k": "v"}}\'')
        return data

    return parse


def _command(value: str) -> object:
    """`command`: a JSON list is the user's own program; any other text is the shell-quoted replacement."""
    if value.lstrip().startswith("["):
        return _json("list")(value)
    return value


def _elastic(value: str) -> tuple[int, int]:
    low, sep, high = value.partition(":")
    if not sep or not low.isdigit() or not high.isdigit():
        raise argparse.ArgumentTypeError(f"got {value!r}; expected MIN:MAX, e.g. 1:4")
    return int(low), int(high)


def _boolean(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"got {value!r}; expected true or false")


def _flag_type(name: str, hint: object) -> tuple[Callable[[str], object], str] | None:
    """(argparse type, metavar) of one request field from its type hint; None for a type it has no flag for."""
    if name == "command":
        return _command, "JSON_LIST|COMMAND"
    if hint is bool:  # before int: a bool is an int to Python
        return _boolean, "true|false"
    if hint is int:
        return int, "N"
    if hint is float:
        return float, "X"
    if hint is str:
        return str, "TEXT"
    text = str(hint)
    if text.startswith("list"):
        return _json("list"), "JSON_LIST"
    if text.startswith("dict"):
        return _json("object"), "JSON|@FILE"
    return None  # a new input type: add it above; until then only `render` fails (see run)


def input_fields() -> dict[str, tuple[object, set[type[TrainingRequest]]]]:
    """Every input of the training components but the task's ids: its type hint and which requests take it."""
    fields: dict[str, tuple[object, set[type[TrainingRequest]]]] = {}
    for request_type in REQUESTS:
        hints = typing.get_type_hints(request_type)
        for f in dataclasses.fields(request_type):
            if f.name not in IDENTITY_INPUTS:
                fields.setdefault(f.name, (hints[f.name], set()))[1].add(request_type)
    return fields


def flag(name: str) -> str:
    """The flag of an input: `records_per_task` -> `--records-per-task`."""
    return "--" + name.replace("_", "-")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `render` subcommand."""
    p = subparsers.add_parser(
        "render",
        help="print the job manifest a training component would submit",
        description="Print the PyTorchJob, MPIJob, parameter-server JobSet or Trainer v2 TrainJob exactly as the "
        "components submit it: the flags are the components' inputs (--records-per-task for records_per_task; "
        "lists and objects as JSON, or @FILE), checked as the components check them.",
    )
    p.add_argument("kind", choices=("pytorchjob", "mpijob", "psjob", "trainjob"))
    p.add_argument(
        "--framework",
        choices=("pytorch", "chainermn"),
        default="pytorch",
        help="trainjob: PyTorch DDP on torch-distributed, or ChainerMN over MPI on kubetrain-mpi",
    )
    p.add_argument("--name", required=True, help="job name (DNS-1035; components derive it from the KFP run)")
    p.add_argument(
        "--data", default=f"{WORKSPACE_MOUNT}/datasets/digits", help="dataset directory in the pod (the step's Dataset)"
    )
    for name in IDENTITY_INPUTS:
        unique = name == "run_id"
        default = None if unique else RENDER_ID
        what = f"{RENDER_ID}-<random>, unique to each render" if unique else RENDER_ID
        p.add_argument(flag(name), default=default, help=f"the KFP {name.replace('_', ' ')} (default {what})")
    unsupported = []
    for name, (hint, takers) in sorted(input_fields().items()):
        flag_type = _flag_type(name, hint)
        if flag_type is None:
            unsupported.append(f"{name} ({hint})")
            continue
        kind, metavar = flag_type
        only = "" if len(takers) == len(REQUESTS) else f" ({', '.join(sorted(COMPONENTS[t] for t in takers))})"
        p.add_argument(
            flag(name), *ALIASES.get(name, ()), dest=INPUT_DEST + name, type=kind, metavar=metavar,
            default=argparse.SUPPRESS, help=f"the {name} input{only}",
        )  # fmt: skip
    p.add_argument("--elastic", type=_elastic, default=None, metavar="MIN:MAX", help="elastic_min/max_workers")
    p.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml")
    # Building every command's parser must not fail for an input render cannot spell: render alone fails.
    p.set_defaults(func=run, unsupported_inputs=tuple(unsupported))


def request_type_of(args: argparse.Namespace) -> tuple[type[TrainingRequest], dict[str, Any]]:
    """The request type of `kind` (and `--framework`), with the inputs the kind fixes."""
    if args.kind == "pytorchjob":
        return PyTorchRequest, {"job_api": "pytorchjob"}
    if args.kind == "mpijob":
        return ChainerMNRequest, {"job_api": "mpijob"}
    if args.kind == "psjob":
        return PSRequest, {}
    return (PyTorchRequest if args.framework == "pytorch" else ChainerMNRequest), {"job_api": "trainjob"}


def build_request(args: argparse.Namespace) -> TrainingRequest:
    """The request the component's step would build from these inputs, validated as it validates them."""
    request_type, fixed = request_type_of(args)
    given: dict[str, Any] = {
        name: getattr(args, INPUT_DEST + name) for name in input_fields() if hasattr(args, INPUT_DEST + name)
    }
    if args.elastic is not None:
        if {"elastic_min_workers", "elastic_max_workers"} & set(given):
            raise InvalidInputError("--elastic: given with --elastic-min-workers/--elastic-max-workers; use one form")
        given["elastic_min_workers"], given["elastic_max_workers"] = args.elastic
    for name, value in fixed.items():
        if name in given and given[name] != value:
            raise InvalidInputError(f"{flag(name)}: got {given[name]!r}; render {args.kind} means {name}={value}")
    own = {f.name for f in dataclasses.fields(request_type)}
    foreign = sorted(set(given) - own)
    if foreign:
        names = ", ".join("--elastic" if n.startswith("elastic_") else flag(n) for n in foreign)
        raise InvalidInputError(
            f"{names}: not an input of {COMPONENTS[request_type]} (render {args.kind}); it takes "
            f"{', '.join(flag(n) for n in sorted(own - set(IDENTITY_INPUTS)))}"
        )
    ids = {name: getattr(args, name) for name in IDENTITY_INPUTS}
    if ids["run_id"] is None:
        ids["run_id"] = render_run_id()
    return request_type.from_inputs({**ids, **given, **fixed})


def render_manifest(args: argparse.Namespace) -> dict[str, Any]:
    """The manifest the step submits for these inputs: the step's request, planned as the step plans it."""
    request = build_request(args)
    plan = plan_job(request, name=args.name, data_dir=args.data, task_config=None, mount_path=WORKSPACE_MOUNT)
    return request.manifest(plan)


def run(args: argparse.Namespace) -> int:
    """Print the manifest; invalid inputs end in the component's own message and exit code 2."""
    if args.unsupported_inputs:
        raise KubetrainError(
            f"no flag for the input(s) {', '.join(args.unsupported_inputs)}: this kubetrain cannot render the "
            "components' requests; report it (a bug: render's flags must cover every input)"
        )
    manifest: Mapping[str, Any] = render_manifest(args)
    if args.output == "json":
        json.dump(manifest, sys.stdout, indent=2, sort_keys=False)
        sys.stdout.write("\n")
    else:
        yaml.dump(dict(manifest), sys.stdout, Dumper=_PlainDumper, sort_keys=False, default_flow_style=False)
    return int(ExitCode.SUCCESS)
