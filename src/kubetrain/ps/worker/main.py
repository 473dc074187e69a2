"""`python -m kubetrain.ps.worker`: get a task, train or evaluate it through the PS, report.

A worker can join at any time: it asks the master for the job (model, batch size, mode), builds
the model (a user's model module is imported and checked against its contract first,
ps.worker.user_model, so a module that misses it fails before anything is trained), offers the
shards its seeded initial parameters (the first offer wins), and loops on GetTask. Every
call to the master or a shard is retried with backoff through their restarts, up to
`--retry-deadline`, unless the master's state dir (`--state-dir`, or `$KUBETRAIN_PS_STATE_DIR`
as the JobSet sets it) says the job has already ended: the master is then gone for good, and the
worker exits as if it had told it (ps.outcome). A heartbeat thread reports the current lease and
progress; the master can answer that the lease was taken back (the worker drops it) or that the
job has ended. Exit 0 when the master says the job has ended, done or failed (the master's own
exit carries a failure: see ps.common.errors.JobEndedError).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, TypeVar

import grpc
import torch

from kubetrain.errors import ExitCode, KubetrainError
from kubetrain.ps.common.errors import (
    DivergedError,
    JobEndedError,
    PSConfigError,
    PSUnavailableError,
)
from kubetrain.ps.common.jobtoken import ensure_token
from kubetrain.ps.common.model_names import user_module_of
from kubetrain.ps.common.optimizers import OPTIMIZERS, OptimizerSpec
from kubetrain.ps.common.outcome import state_dir_from, stop_if_ended
from kubetrain.ps.common.procs import incarnation_default, process_main, stop_on_signals, worker_id_default
from kubetrain.ps.common.rpc import call_with_retry, make_channel, parse_addr, parse_addrs
from kubetrain.ps.common.tasks import EVAL, TRAIN, TaskRange
from kubetrain.ps.proto import kubetrain_ps_pb2 as pb
from kubetrain.ps.proto import kubetrain_ps_pb2_grpc as pb_grpc
from kubetrain.ps.worker.client import PSClient
from kubetrain.ps.worker.models import PSModel, build_model
from kubetrain.ps.worker.trainer import ShardCache, TaskAbandoned, TaskProgress, Trainer
from kubetrain.ps.worker.user_model import build_user_model, load_contract

__all__ = ["build_parser", "main"]

log = logging.getLogger("kubetrain.ps.worker")
T = TypeVar("T")


def build_parser() -> argparse.ArgumentParser:
    """The worker's flags."""
    p = argparse.ArgumentParser(prog="python -m kubetrain.ps.worker", description=__doc__)
    p.add_argument("--master", required=True, help="host:port of the master")
    p.add_argument("--ps-addrs", required=True, help="host:port,... of the PS shards, in order")
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--worker-id", default=None, help="default: pod host name / completion index")
    p.add_argument(
        "--job-token-file",
        type=Path,
        required=True,
        help="the job's token on its volume (created if absent), sent on every call to the master and servers",
    )
    p.add_argument(
        "--slowdown",
        type=float,
        default=1.0,
        help="be a straggler: every batch takes this many times a normal one (benchmarks)",
    )
    p.add_argument("--trained-log", type=Path, default=None, help="append a JSON line per trained batch")
    p.add_argument("--retry-deadline", type=float, default=300.0, help="seconds to keep retrying a peer")
    p.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="the master's state dir on the shared volume (default $KUBETRAIN_PS_STATE_DIR): "
        "a peer that cannot be reached after the master recorded the job's end is not retried",
    )
    p.add_argument(
        "--optimizer",
        choices=OPTIMIZERS,
        default=None,
        help="the optimizer the parameter servers apply: a user's model module's optimizer(lr) must name it "
        "(checked before training)",
    )
    p.add_argument("--lr", type=float, default=None, help="the servers' learning rate (with --optimizer)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--log-level", default="INFO")
    return p


class _Heartbeat(threading.Thread):
    """Tells the master we are alive and how far the lease is; hears abandon / job end."""

    def __init__(
        self,
        stub: pb_grpc.MasterStub,
        ref: pb.WorkerRef,
        progress: TaskProgress,
        interval_s: float,
        stop: threading.Event,
    ) -> None:
        super().__init__(name="heartbeat", daemon=True)
        self._stub, self._ref, self._progress = stub, ref, progress
        self._interval, self._stop = interval_s, stop

    def run(self) -> None:
        """Beat every interval until stopped."""
        while not self._stop.wait(self._interval):
            with self._progress.lock:
                lease, done = self._progress.lease, self._progress.records_done
            try:
                resp = self._stub.Heartbeat(
                    pb.HeartbeatRequest(worker=self._ref, lease=lease, records_done=done),
                    timeout=max(self._interval, 2.0),
                )
            except grpc.RpcError:
                continue  # the master may be restarting; the main loop retries its own calls
            ended = resp.directive in (pb.JOB_DONE, pb.JOB_FAILED)
            with self._progress.lock:
                # Drop a lease the master took back; on a job that ended (failed), drop any lease:
                # the next GetTask hears the end and the worker exits.
                if (resp.abandon_lease or ended) and lease != 0 and self._progress.lease == lease:
                    self._progress.abandon = True


def _model(job: pb.JobInfo, data: ShardCache, args: argparse.Namespace) -> PSModel:
    """The model the master names: a built-in one, or a user's module checked against the contract."""
    module = user_module_of(job.model)
    if module is None:
        return build_model(
            job.model,
            feature_shape=data.info.feature_shape,
            num_classes=data.info.num_classes,
            seed=int(job.seed),
            model_args=json.loads(job.model_args_json or "{}"),
        )
    if (args.optimizer is None) != (args.lr is None):
        raise PSConfigError("--optimizer and --lr: give both (the servers' optimizer) or neither")
    servers = None if args.optimizer is None else OptimizerSpec(name=args.optimizer, lr=args.lr)
    contract = load_contract(module, lr=args.lr if args.lr is not None else 0.1, servers=servers)
    first = data.info.shards("train")[0]
    sample = data.records("train", 0, 0, min(2, first.records))
    log.info("training the user's model module %s", module)
    return build_user_model(
        contract,
        feature_shape=data.info.feature_shape,
        num_classes=data.info.num_classes,
        seed=int(job.seed),
        sample=sample,
    )


def _task(msg: pb.Task) -> TaskRange:
    kind = EVAL if msg.kind == pb.EVALUATE else TRAIN
    return TaskRange(kind, msg.split, msg.shard, msg.start, msg.end, msg.epoch, msg.eval_round)


class Worker:
    """One worker process: the master stub, the trainer and the task loop."""

    def __init__(self, args: argparse.Namespace, stop: threading.Event) -> None:
        self._master_addr = parse_addr(args.master, what="--master")
        ps_addrs = parse_addrs(args.ps_addrs)
        if args.slowdown < 1:
            raise PSConfigError(f"--slowdown: got {args.slowdown}; expected >= 1")
        self.worker_id = args.worker_id or worker_id_default()
        self.ref = pb.WorkerRef(worker_id=self.worker_id, incarnation=incarnation_default())
        self._stop = stop
        self._deadline = float(args.retry_deadline)
        state_dir = state_dir_from(args.state_dir)
        self._on_retry = None if state_dir is None else stop_if_ended(state_dir)
        token = ensure_token(args.job_token_file)
        self._channel = make_channel(self._master_addr, token=token)
        self._master = pb_grpc.MasterStub(self._channel)
        self.job: pb.JobInfo = self._ask("GetJobInfo", lambda: self._master.GetJobInfo(self.ref, timeout=10))
        if self.job.num_ps != len(ps_addrs):
            raise PSConfigError(f"the master says {self.job.num_ps} PS shards; --ps-addrs lists {len(ps_addrs)}")
        data = ShardCache(args.data)
        model = _model(self.job, data, args)
        self._client = PSClient(
            ps_addrs,
            dense_names=[n for n, _ in model.named_parameters()],
            deadline_s=self._deadline,
            token=token,
            stop=stop,
            on_retry=self._on_retry,
        )
        self._log_file: IO[str] | None = None
        if args.trained_log is not None:
            args.trained_log.parent.mkdir(parents=True, exist_ok=True)
            self._log_file = open(args.trained_log, "a", encoding="utf-8")  # noqa: SIM115
        self.trainer = Trainer(
            model=model,
            client=self._client,
            data=data,
            worker_id=self.worker_id,
            batch_size=int(self.job.batch_size),
            mode=self.job.mode,
            seed=int(self.job.seed),
            sync_retries=int(self.job.sync_retries),
            slowdown=float(args.slowdown),
            trained_log=self._log_file,
            stop=stop,
        )
        self.progress = TaskProgress()

    def _ask(self, what: str, fn: Callable[[], T]) -> T:
        return call_with_retry(
            fn,
            what=f"{what} on master {self._master_addr}",
            deadline_s=self._deadline,
            stop=self._stop,
            on_retry=self._on_retry,
        )

    def run(self) -> int:
        """Loop on GetTask until the master says the job has ended."""
        self.trainer.offer_init()
        interval = float(self.job.heartbeat_interval_s or 1.0)
        _Heartbeat(self._master, self.ref, self.progress, interval, self._stop).start()
        log.info(
            "worker %s joined: %s, %s mode, batch %d",
            self.worker_id,
            self.job.model,
            self.job.mode,
            self.job.batch_size,
        )
        while not self._stop.is_set():
            resp: pb.GetTaskResponse = self._ask("GetTask", lambda: self._master.GetTask(self.ref, timeout=10))
            if resp.directive == pb.JOB_DONE:
                log.info("the master says the job is done")
                return 0
            if resp.directive == pb.JOB_FAILED:
                log.error("the master says the job failed: %s", resp.message)
                return 0  # the master's exit fails the job (JobEndedError says why not this one's)
            if resp.directive == pb.WAIT:
                self._stop.wait(resp.retry_after_s or 0.2)
                continue
            self._run_task(resp.task)
        return int(ExitCode.CANCELLED)

    def _run_task(self, msg: pb.Task) -> None:
        task = _task(msg)
        self.progress.start(int(msg.lease))
        req = pb.ReportTaskRequest(worker=self.ref, task_id=msg.task_id, lease=msg.lease, success=True)
        try:
            if task.kind == EVAL:
                r = self.trainer.evaluate(task)
                req.records = r.count
                req.eval.CopyFrom(
                    pb.EvalResult(
                        loss_sum=r.loss_sum,
                        correct=r.correct,
                        count=r.count,
                        scores=list(r.scores),
                        labels=list(r.labels),
                    )
                )
            else:
                out = self.trainer.train(task, int(msg.lease), self.progress)
                req.records = out.records
                req.loss_sum = out.loss_sum
                req.shard_versions.extend(
                    pb.ShardVersion(shard=s, generation=g, version=v) for s, (g, v) in out.versions.items()
                )
        except TaskAbandoned as e:
            log.info("%s: %s", msg.task_id, e)
            self.progress.clear()
            return
        except (PSUnavailableError, JobEndedError):
            raise  # a shard is gone for good, or the whole job ended: this worker cannot do anything
        except (KubetrainError, RuntimeError, ValueError, IndexError) as e:
            # Unreadable or malformed records (torch and numpy raise the last three), a shard
            # refusing the request, sync retries used up: the task failed, the worker carries
            # on, and the master re-queues the task or drops it after its failure limit.
            log.warning("%s failed: %s: %s", msg.task_id, type(e).__name__, e)
            req.success = False
            req.error = f"{type(e).__name__}: {e}"
            if isinstance(e, DivergedError):
                req.loss_sum = math.nan  # the master fails the job: a diverged model cannot recover
        answer = self._ask("ReportTask", lambda: self._master.ReportTask(req, timeout=30))
        if not answer.accepted:
            log.info("%s: report not accepted: %s", msg.task_id, answer.note)
        self.progress.clear()

    def close(self) -> None:
        """Release channels and the trained-log file."""
        self._client.close()
        self._channel.close()
        if self._log_file is not None:
            self._log_file.close()


def run(args: argparse.Namespace) -> int:
    """Run one worker; returns the exit code."""
    torch.set_num_threads(max(1, args.threads))
    stop = threading.Event()
    stop_on_signals(stop)
    try:
        worker = Worker(args, stop)
        try:
            return worker.run()
        finally:
            stop.set()
            worker.close()
    except JobEndedError as e:
        log.log(logging.ERROR if e.failed else logging.INFO, "%s", e)
        return int(e.exit_code)


def main(argv: list[str] | None = None) -> int:
    """Entry point: 0 when the master has no more work for it, the error's exit code otherwise."""
    return process_main("worker", build_parser(), run, argv, log=log)


if __name__ == "__main__":
    sys.exit(main())
