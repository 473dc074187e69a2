"""`python -m kubetrain.ps.master`: cuts the data into tasks, hands them out, keeps the books.

The master loads (or starts) its durable state, serves gRPC (health SERVING once the state is
loaded) and runs a monitor loop that re-queues work of silent workers and overdue tasks, follows
the PS shards' versions and restarts, opens an evaluation round every `--eval-every` versions
(by default one after each epoch), and at the end flushes the shards, evaluates the final model,
writes `model.npz`, `model.json` and `metrics.json` to `--output`, tells workers the job is done,
shuts the shards down and exits 0. It fails the job if dropped work passes `--max-dropped-fraction`,
or if a loss or a parameter is not finite (the model diverged): it first records the outcome in
`--state-dir` (ps.outcome), so that a worker that starts only after the master has gone exits at
once instead of retrying for its whole deadline. Such a failure, and input that can never work,
a restart would only repeat: the master then exits with `PS_FINAL_EXIT_CODE` (10), on which its
Job's podFailurePolicy fails the Job, and so the JobSet, at once (manifests.jobset).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import grpc

from kubetrain.errors import ExitCode, KubetrainError
from kubetrain.manifests.kinds import PS_FINAL_EXIT_CODE
from kubetrain.ps.common.errors import CheckpointError, DivergedError, JobAbortedError
from kubetrain.ps.common.jobtoken import ensure_token
from kubetrain.ps.common.model_names import MODEL_NAMES
from kubetrain.ps.common.outcome import JobOutcome, clear_outcome, write_outcome
from kubetrain.ps.common.procs import default_bind, setup_logging, stop_on_signals
from kubetrain.ps.common.rpc import HealthReporter, bind, make_server
from kubetrain.ps.common.tasks import DONE, FAILED, FINISHING, MODES, TRAINING
from kubetrain.ps.master.config import MasterConfig
from kubetrain.ps.master.outputs import write_outputs
from kubetrain.ps.master.service import JobSettings, MasterCore, MasterServicer
from kubetrain.ps.master.shard_clients import ShardStubs
from kubetrain.ps.master.state import StateStore, book_from_json
from kubetrain.ps.master.taskbook import TaskBook
from kubetrain.ps.proto import kubetrain_ps_pb2 as pb
from kubetrain.ps.proto import kubetrain_ps_pb2_grpc as pb_grpc

__all__ = ["build_parser", "exit_code", "main"]

log = logging.getLogger("kubetrain.ps.master")
SERVICE = "kubetrain.ps.Master"
TICK_S = 0.2
POLL_S = 1.0


def build_parser() -> argparse.ArgumentParser:
    """The master's flags."""
    p = argparse.ArgumentParser(prog="python -m kubetrain.ps.master", description=__doc__)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--bind", default=None, help="listen address (default $KUBETRAIN_BIND_ADDRESS or 0.0.0.0)")
    p.add_argument("--data", type=Path, required=True, help="dataset dir (dataset.json + shards)")
    p.add_argument("--output", type=Path, required=True, help="where model + metrics.json go")
    p.add_argument("--state-dir", type=Path, required=True, help="durable master state (shared volume)")
    p.add_argument("--num-ps", type=int, required=True)
    p.add_argument("--ps-addrs", required=True, help="host:port,host:port (shard order)")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--records-per-task", type=int, default=64)
    p.add_argument("--eval-records-per-task", type=int, default=256)
    p.add_argument(
        "--eval-every", type=int, default=0, help="versions between eval rounds (0: one after each epoch, as DDP's)"
    )
    p.add_argument("--mode", choices=MODES, default="async")
    p.add_argument("--model", choices=MODEL_NAMES, default="mlp")
    p.add_argument("--model-args", default="{}", help="JSON object of model keyword arguments")
    p.add_argument(
        "--model-module",
        default="",
        help="train the model this module of the image defines (ps.worker.user_model's contract) "
        "instead of --model, which must then stay mlp; the workers import it, not the master",
    )
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sharding", choices=("dynamic", "static"), default="dynamic")
    p.add_argument("--num-workers", type=int, default=0, help="static sharding: worker slots")
    p.add_argument("--max-task-failures", type=int, default=3)
    p.add_argument("--max-dropped-fraction", type=float, default=0.01)
    p.add_argument("--heartbeat-interval", type=float, default=1.0)
    p.add_argument("--heartbeat-timeout", type=float, default=15.0)
    p.add_argument("--min-task-timeout", type=float, default=60.0)
    p.add_argument(
        "--min-workers",
        type=int,
        default=1,
        help="hand out training tasks only while at least this many workers are there (an elastic "
        "job's minimum; a job that has fewer waits for its minimum, as a static job waits for its pods)",
    )
    p.add_argument(
        "--straggler-factor",
        type=float,
        default=3.0,
        help="hand a training task out again to an idle worker once held this many times the median "
        "task time (at least 10 s, after 5 tasks); the first result counts. 0: never",
    )
    p.add_argument("--sync-retries", type=int, default=64)
    p.add_argument("--shutdown-grace", type=float, default=30.0)
    p.add_argument("--ps-deadline", type=float, default=300.0, help="seconds to wait for PS calls")
    p.add_argument(
        "--job-token-file",
        type=Path,
        required=True,
        help="the job's token on its volume (created if absent), required on every call to the master and servers",
    )
    p.add_argument("--log-level", default="INFO")
    return p


class _Loop:
    """The monitor loop: timers, PS following, eval rounds and the end of the job."""

    def __init__(self, core: MasterCore, config: MasterConfig, settings: JobSettings, token: str) -> None:
        self.core = core
        self.config = config
        self.settings = settings
        self.shards = ShardStubs(config.ps_addrs, token=token)
        self._last_poll = 0.0

    def _poll_ps(self, *, required: bool) -> None:
        if required:
            states = self.shards.all_with_retry(
                "GetState",
                lambda s: s.GetState(pb.GetStateRequest(), timeout=5),
                deadline_s=self.config.ps_deadline,
            )
        else:
            states = [s for s in self.shards.poll_states() if s is not None]

        def note(book: TaskBook) -> None:
            # A restart seen here is one of the book's events, logged by the next tick.
            for st in states:
                book.note_ps_state(st.shard_index, list(st.restored_versions), int(st.checkpointed_version))
            if states:
                book.results.model_version = max(book.results.model_version, *(int(s.version) for s in states))

        self.core.mutate(note)

    def tick(self) -> bool:
        """One pass of the loop; True once the job has ended (done or failed)."""
        core, book, now = self.core, self.core.book, time.monotonic()
        for event in core.mutate(lambda b: b.expire(now)):
            log.warning("%s: its work goes back to the queue", event)
        for event in core.mutate(lambda b: b.drain_events()):
            log.warning("%s", event)  # preemptions, re-issued stragglers: one line each
        if now - self._last_poll >= POLL_S:
            self._last_poll = now
            self._poll_ps(required=False)
        every = self.config.eval_every
        if book.phase == TRAINING and not book.results.evals.rounds:
            if every > 0 and book.results.model_version >= book.results.evals.last_version + every:
                core.mutate(lambda b: b.start_round(version=b.results.model_version, final=False))
            # The test accuracy after each epoch but the last (the final round's), as the DDP and
            # ChainerMN trainers measure it: the report's accuracy curve has a point per epoch.
            elif (
                every == 0 and (epoch := book.results.epoch_to_evaluate(last_epoch=self.config.epochs - 1)) is not None
            ):
                core.mutate(lambda b: b.start_round(version=b.results.model_version, final=False, epoch=epoch))
        if book.phase == TRAINING and book.training_complete():
            self._finish_training()
        if book.phase == FINISHING:
            try:
                write_outputs(core, self.shards, self.settings, self.config)
            except DivergedError as e:
                reason = str(e)
                core.mutate(lambda b: b.fail(reason), always_save=True)
                log.error("%s", reason)
                return True
            core.mutate(lambda b: setattr(b, "phase", DONE), always_save=True)
            log.info("job done: %s", json.dumps(book.results.final_metrics))
        return book.phase in (DONE, FAILED)

    def _finish_training(self) -> None:
        # Sync mode may hold a partly filled aggregate: apply it before the final evaluation.
        self.shards.all_with_retry(
            "Flush",
            lambda s: s.Flush(pb.FlushRequest(), timeout=30),
            deadline_s=self.config.ps_deadline,
        )
        self._poll_ps(required=True)  # a shard restart may have put finished tasks back
        with self.core.lock:
            book = self.core.book
            if book.phase == TRAINING and book.training_complete():
                self.core.times.setdefault("training_done_at", time.time())
                book.start_round(version=book.results.model_version, final=True)
                self.core.save()
                log.info("training done at version %d; final evaluation", book.results.model_version)

    def shutdown(self, stop: threading.Event) -> None:
        """Wait until live workers have heard the end (or the grace passes), stop the shards."""
        deadline = time.monotonic() + self.config.shutdown_grace
        while time.monotonic() < deadline and not stop.is_set():
            with self.core.lock:
                alive = {k for k, w in self.core.book.workers.items() if w.alive}
                if alive <= self.core.told_end:
                    break
                self.core.book.expire(time.monotonic())
            stop.wait(TICK_S)
        self.shards.map(self._stop_shard)
        self.shards.close()

    def _stop_shard(self, index: int, stub: pb_grpc.ParameterServerStub) -> None:
        try:
            stub.Shutdown(pb.ShutdownRequest(reason="job ended"), timeout=10)
        except grpc.RpcError as e:
            code = e.code() if isinstance(e, grpc.Call) else e
            log.warning("PS %s: shutdown call failed (%s)", self.shards.addrs[index], code)


def _record_outcome(state_dir: Path, book: TaskBook) -> None:
    """Write the job's end next to the state, for workers that come after the master has gone."""
    try:
        write_outcome(state_dir, JobOutcome(phase=book.phase, reason=book.failure_reason))
    except CheckpointError as e:
        # Not fatal: workers that cannot read it fall back to their retry deadline.
        log.warning("%s", e)


def _failure_written(output: Path) -> bool:
    """Whether metrics.json in `output` records a failed job (written by a master that failed it)."""
    try:
        return bool(json.loads((output / "metrics.json").read_text(encoding="utf-8")).get("status") == "failed")
    except (OSError, ValueError, AttributeError):
        return False  # none yet, or torn: the outputs are written again


# Started once the master serves, with its core: what it starts runs beside the master until the
# returned callable stops it (kubetrain.elastic's watch on the job's worker pods, on a cluster).
Companion = Callable[[MasterCore], Callable[[], None]]


def run(config: MasterConfig, *, companion: Companion | None = None) -> int:
    """Run the master until the job ends; the exit code."""
    settings = config.job_settings()
    book_config = config.book_config()
    config.output.mkdir(parents=True, exist_ok=True)
    store = StateStore(config.state_dir)
    config.state_dir.mkdir(parents=True, exist_ok=True)
    raw = store.claim()
    now = time.monotonic()
    if raw is None:
        book = TaskBook(config=book_config)
        times = {"started_at": time.time()}
    else:
        book = book_from_json(book_config, raw["book"], now)
        times = {k: float(v) for k, v in raw.get("times", {}).items()}
        log.info(
            "resumed state generation %d: phase %s, %d done, %d doing, %d todo",
            store.generation,
            book.phase,
            len(book.ledger),
            len(book.doing),
            len(book.queues.todo),
        )
    if book.phase not in (DONE, FAILED):
        clear_outcome(config.state_dir)  # left by an earlier job in this dir: must not end this one
    if book.phase == FAILED and _failure_written(config.output):
        # Restarted by its Job's backoffLimit after it failed the job: the outcome is recorded (before
        # the outputs), the outputs written and the shards told to stop. Serving again would only wait
        # on those shards (15 s a restart, three restarts by default) to fail with the same reason.
        log.info("the job had failed before this restart, its outputs written: failing again at once")
        raise JobAbortedError(book.failure_reason)
    core = MasterCore(book, store, times)
    with core.lock:
        core.save()
    stop = threading.Event()
    stop_on_signals(stop)
    token = ensure_token(config.job_token_file)
    server = make_server(token=token)
    health = HealthReporter(server)
    pb_grpc.add_MasterServicer_to_server(MasterServicer(core, settings), server)
    host = config.bind or default_bind()
    bind(server, host, config.port)
    server.start()
    health.serving()
    log.info("master serving on %s:%d (%s, %d epochs)", host, config.port, config.mode, config.epochs)
    loop = _Loop(core, config, settings, token)
    stop_companion = companion(core) if companion is not None else None
    try:
        while not stop.is_set():
            if core.fatal is not None:
                raise core.fatal
            if loop.tick():
                break
            stop.wait(TICK_S)
        if stop.is_set():
            log.info("stopped by signal; the state is saved and a restart resumes")
            return int(ExitCode.CANCELLED)
        _record_outcome(config.state_dir, book)
        if book.phase == FAILED:
            write_outputs(core, loop.shards, settings, config, failed=True)
        loop.shutdown(stop)
    finally:
        if stop_companion is not None:
            stop_companion()
        health.not_serving()
        server.stop(grace=1).wait()
    if book.phase == FAILED:
        raise JobAbortedError(book.failure_reason)
    return 0


def main(argv: list[str] | None = None, *, companion: Companion | None = None) -> int:
    """Entry point: 0 when every epoch is done and the outputs are written."""
    args = build_parser().parse_args(argv)
    setup_logging("master", args.log_level)
    try:
        return run(MasterConfig.from_args(args), companion=companion)
    except KubetrainError as e:
        # Unprefixed, as Python ends a traceback: the launcher reads this last line of a failed
        # pod's log as the program's error and puts it first in the job's one-line failure.
        print(f"{type(e).__name__}: {e}", file=sys.stderr, flush=True)
        return exit_code(e)


def exit_code(error: KubetrainError) -> int:
    """PS_FINAL_EXIT_CODE for a failure a restart would only repeat, else the error's own code.

    Final: the job failed on purpose (a diverged model, dropped work; the state on the claim
    records it, so a restart fails the same way) or input that can never work (a flag, the data
    set). Not final: a peer unreachable, the state's disk, another master's newer generation.
    """
    if isinstance(error, (JobAbortedError, DivergedError)) or error.exit_code == ExitCode.INVALID_INPUT:
        return PS_FINAL_EXIT_CODE
    return int(error.exit_code)


if __name__ == "__main__":
    sys.exit(main())
