"""The master's configuration: its flags, checked once, as one frozen object the loop carries."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from kubetrain.data.dataset_format import read_dataset_info
from kubetrain.ps.common.errors import PSConfigError
from kubetrain.ps.common.model_names import is_module_path, user_model_ref
from kubetrain.ps.common.rpc import parse_addrs
from kubetrain.ps.common.tasks import BookConfig
from kubetrain.ps.master.service import JobSettings


@dataclass(frozen=True, kw_only=True)
class MasterConfig:
    """Everything `python -m kubetrain.ps.master` was told (see its --help for each field)."""

    port: int
    bind: str | None
    data: Path
    output: Path
    state_dir: Path
    ps_addrs: tuple[str, ...]
    epochs: int
    records_per_task: int
    eval_records_per_task: int
    eval_every: int
    mode: str
    model: str  # a built-in model, or `module:<path>` for a user's model module (model_names.user_model_ref)
    model_args: dict[str, object]
    batch_size: int
    seed: int
    sharding: str
    num_workers: int
    max_task_failures: int
    max_dropped_fraction: float
    heartbeat_interval: float
    heartbeat_timeout: float
    min_task_timeout: float
    straggler_factor: float
    min_workers: int
    sync_retries: int
    shutdown_grace: float
    ps_deadline: float
    job_token_file: Path

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> MasterConfig:
        """The configuration from parsed flags; PSConfigError names a flag that does not fit."""
        try:
            model_args = json.loads(args.model_args)
        except ValueError as e:
            raise PSConfigError(f"--model-args: not JSON ({e}): {args.model_args!r}") from e
        if not isinstance(model_args, dict):
            raise PSConfigError(f"--model-args: got {args.model_args!r}; expected a JSON object")
        model = args.model
        if args.model_module:
            # Checked here; imported by the workers only, so the master stays torch-free.
            if not is_module_path(args.model_module):
                raise PSConfigError(f"--model-module: got {args.model_module!r}; expected a module path such as a.b")
            if args.model != "mlp":
                raise PSConfigError(f"--model-module with --model {args.model}: one model or the other")
            model = user_model_ref(args.model_module)
        addrs = tuple(parse_addrs(args.ps_addrs))
        if args.num_ps != len(addrs):
            raise PSConfigError(f"--num-ps {args.num_ps} but --ps-addrs lists {args.ps_addrs!r}")
        if args.batch_size < 1:
            raise PSConfigError(f"--batch-size: got {args.batch_size}; expected >= 1")
        if args.sharding == "static" and args.num_workers < 1:
            raise PSConfigError("--sharding static needs --num-workers N (the fixed worker slots)")
        return cls(
            port=args.port, bind=args.bind, data=args.data, output=args.output, state_dir=args.state_dir,
            ps_addrs=addrs, epochs=args.epochs, records_per_task=args.records_per_task,
            eval_records_per_task=args.eval_records_per_task, eval_every=args.eval_every, mode=args.mode,
            model=model, model_args=model_args, batch_size=args.batch_size, seed=args.seed,
            sharding=args.sharding, num_workers=args.num_workers, max_task_failures=args.max_task_failures,
            max_dropped_fraction=args.max_dropped_fraction, heartbeat_interval=args.heartbeat_interval,
            heartbeat_timeout=args.heartbeat_timeout, min_task_timeout=args.min_task_timeout,
            straggler_factor=args.straggler_factor, min_workers=args.min_workers,
            sync_retries=args.sync_retries, shutdown_grace=args.shutdown_grace, ps_deadline=args.ps_deadline,
            job_token_file=args.job_token_file,
        )  # fmt: skip

    @property
    def num_ps(self) -> int:
        """The number of parameter-server shards."""
        return len(self.ps_addrs)

    def book_config(self) -> BookConfig:
        """How the task book cuts the data set (read from its dataset.json) into tasks."""
        info = read_dataset_info(self.data)
        return BookConfig(
            epochs=self.epochs,
            records_per_task=self.records_per_task,
            train_shards=tuple(s.records for s in info.shards("train")),
            test_shards=tuple(s.records for s in info.shards("test")),
            eval_records_per_task=self.eval_records_per_task,
            seed=self.seed,
            max_task_failures=self.max_task_failures,
            max_dropped_fraction=self.max_dropped_fraction,
            static_slots=self.num_workers if self.sharding == "static" else 0,
            heartbeat_timeout_s=self.heartbeat_timeout,
            min_task_timeout_s=self.min_task_timeout,
            straggler_factor=self.straggler_factor,
            min_workers=self.min_workers,
        )

    def job_settings(self) -> JobSettings:
        """What the master tells every worker and uses for sync rounds."""
        return JobSettings(
            model=self.model,
            model_args_json=json.dumps(self.model_args),
            batch_size=self.batch_size,
            mode=self.mode,
            num_ps=self.num_ps,
            seed=self.seed,
            heartbeat_interval_s=self.heartbeat_interval,
            sync_retries=self.sync_retries,
        )
