"""The PS master as it runs in its pod on a cluster: `python -m kubetrain.elastic.master`.

The runtime's master (`kubetrain.ps.master`) plus a watch on the job's worker pods through the
Kubernetes backend, so a preempted, evicted or deleted worker's tasks go back on the queue the
moment the API server says so, not when the worker's lease runs out. The pod names its JobSet and
namespace through the downward API (`KUBETRAIN_JOBSET_NAME`, `KUBETRAIN_NAMESPACE`) and reads the
API with its own service account's token (deploy/rbac.yaml's `kubetrain-ps-master`). Anything
missing (no token, no such env, a 403) costs the watch, in one line, never the job.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping

from kubetrain.backends.base import JobRef
from kubetrain.elastic.watch import WorkerPodWatch
from kubetrain.elastic.worker_pods import Change, WorkerChange
from kubetrain.errors import KubetrainError
from kubetrain.manifests.kinds import JOBSET
from kubetrain.ps.master.main import main as master_main
from kubetrain.ps.master.service import MasterCore
from kubetrain.ps.master.taskbook import TaskBook

__all__ = ["JOBSET_NAME_ENV", "NAMESPACE_ENV", "apply_change", "main", "start_worker_watch"]

log = logging.getLogger("kubetrain.ps.master")

JOBSET_NAME_ENV = "KUBETRAIN_JOBSET_NAME"
NAMESPACE_ENV = "KUBETRAIN_NAMESPACE"
TOKEN_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/token"


def apply_change(book: TaskBook, change: WorkerChange, now: float) -> int:
    """What one worker pod's change does to the book: a worker that leaves gives its tasks back at
    once (a preemption counted as one); a failed pod's process is left to the heartbeats and the
    task-failure count (a crash may be the task's fault); a placed one registers when it asks."""
    if change.change is Change.PREEMPTED:
        return book.worker_left(
            change.worker_id, now, preempted_by=change.message or change.reason, pod_uid=change.pod_uid
        )
    if change.change in (Change.DISRUPTED, Change.DELETED):
        how = f"{change.change.value} ({change.reason})" if change.reason != "deleted" else "deleted"
        return book.worker_left(change.worker_id, now, how=how, pod_uid=change.pod_uid)
    return 0


def start_worker_watch(core: MasterCore, environ: Mapping[str, str] = os.environ) -> Callable[[], None]:
    """Start the watch on the job's worker pods in a thread; the callable that stops it."""
    name, namespace = environ.get(JOBSET_NAME_ENV, ""), environ.get(NAMESPACE_ENV, "")
    if "KUBERNETES_SERVICE_HOST" not in environ:
        # The local backend: no API server; its "pods" are processes whose heartbeats tell.
        log.info("not in a Kubernetes pod: lost workers are found by their heartbeats")
        return lambda: None
    if not name or not namespace or not os.path.exists(TOKEN_FILE):
        log.warning(
            "worker pod watch off (no %s, %s or service account token); a lost worker's tasks go back on "
            "the queue when its lease runs out",
            JOBSET_NAME_ENV,
            NAMESPACE_ENV,
        )
        return lambda: None
    # Imported here: the master's image has the Kubernetes client, a local run needs none of it.
    from kubetrain.backends.kubernetes import KubernetesBackend

    try:
        backend = KubernetesBackend(namespace=namespace)
    except KubetrainError as e:
        log.warning("worker pod watch off (%s)", e)
        return lambda: None

    def on_change(change: WorkerChange) -> None:
        if change.change is Change.PLACED:
            log.info("%s", change.line())
        core.mutate(lambda book: apply_change(book, change, time.monotonic()), always_save=True)

    watch = WorkerPodWatch(backend, JobRef(JOBSET, name, namespace), on_change, log=log.warning)
    thread = threading.Thread(target=watch.run, name="worker-pod-watch", daemon=True)
    thread.start()
    log.info("watching the worker pods of JobSet %s/%s", namespace, name)

    def stop() -> None:
        watch.stop()
        thread.join(10)
        backend.close()

    return stop


def main(argv: list[str] | None = None) -> int:
    """The master, with the watch on its job's worker pods."""
    return master_main(argv, companion=start_worker_watch)


if __name__ == "__main__":
    sys.exit(main())
