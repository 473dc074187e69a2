"""The streamed answers of the fake API server (tests/fake_apiserver.py; a stand-in, not a cluster).

Watches, of job objects and of pods alike: the initial ADDED events, every later event, bookmarks,
the server-side timeout, 410 Gone for a compacted resourceVersion, a malformed one refused with
400, drops and cuts on demand. Followed pod logs: chunked lines until the container ends.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from tests.fake_apiserver_pods import container_restarts
from tests.fake_apiserver_proto import TRUE, Obj, status_body

if TYPE_CHECKING:
    from tests.fake_apiserver_http import Handler


def serve_watch(
    handler: Handler,
    resource: str,
    query: Mapping[str, str],
    initial_items: Callable[[], list[Obj]],
    events_since: Callable[[int], list[tuple[int, str, Obj]]],
    mark_kind: tuple[str, str],
) -> None:
    """One watch: the initial ADDED events (no resourceVersion), then every event after it, bookmarks,
    the server-side timeout, 410 for a compacted resourceVersion, drops and cuts on demand."""
    api = handler.api
    since_param = query.get("resourceVersion") or "0"
    if not since_param.isdigit():
        handler.send_json(400, status_body(400, "BadRequest", f"invalid resource version: {since_param!r}"))
        return
    deadline = time.monotonic() + float(query.get("timeoutSeconds") or 1800)
    bookmarks = query.get("allowWatchBookmarks") in TRUE
    drop_after = api.take_watch_drop(resource)
    with api.cv:
        epoch = api.cut_epoch
        expired = since_param != "0" and int(since_param) < api.compacted_rv
        since = api.rv if since_param == "0" else int(since_param)
        initial = [] if since_param != "0" else initial_items()
    gone = status_body(410, "Expired", f"too old resource version: {since_param} ({api.compacted_rv})")
    if expired and api.gone_as_http:
        handler.send_json(410, gone)
        return
    handler.start_stream("application/json")
    if expired:
        handler.chunk(json.dumps({"type": "ERROR", "object": gone}).encode() + b"\n")
        handler.end_stream()
        return
    sent = 0
    last_bookmark = time.monotonic()
    pending = [(since, "ADDED", o) for o in initial]
    while True:
        for rv, etype, obj in pending:
            handler.chunk(json.dumps({"type": etype, "object": obj}).encode() + b"\n")
            since = max(since, rv)
            sent += 1
            if drop_after is not None and sent >= drop_after:
                handler.drop()
                return
        if drop_after == 0:
            handler.drop()
            return
        with api.cv:
            pending = events_since(since)
            while not pending and not api.stopping and api.cut_epoch == epoch:
                now = time.monotonic()
                if now >= deadline or (bookmarks and now - last_bookmark >= api.bookmark_seconds):
                    break
                wake = deadline if not bookmarks else min(deadline, last_bookmark + api.bookmark_seconds)
                api.cv.wait(max(0.001, wake - now))
                pending = events_since(since)
            current = api.rv
            cut = api.cut_epoch != epoch
        if cut:
            handler.drop()
            return
        if pending:
            continue
        if api.stopping or time.monotonic() >= deadline:
            handler.end_stream()
            return
        # Nothing of ours changed up to `current`: tell the client it may resume from there.
        since = current
        last_bookmark = time.monotonic()
        mark = {"kind": mark_kind[0], "apiVersion": mark_kind[1], "metadata": {"resourceVersion": str(current)}}
        handler.chunk(json.dumps({"type": "BOOKMARK", "object": mark}).encode() + b"\n")


def serve_log(handler: Handler, ns: str, name: str, query: Mapping[str, str]) -> None:
    """A pod's log: its current or previous container, a tail, or followed until the container ends."""
    api = handler.api
    with api.cv:
        pod = copy.deepcopy(api.pods.get((ns, name)))
    if pod is None:
        handler.send_json(404, status_body(404, "NotFound", f'pods "{name}" not found'))
        return
    names = [c["name"] for c in pod["spec"]["containers"]]
    container = query.get("container")
    if not container and len(names) != 1:
        handler.send_json(400, status_body(400, "BadRequest", f"a container name must be specified for pod {name}, "
                                         f"choose one of: [{' '.join(names)}]"))  # fmt: skip
        return
    container = container or names[0]
    if container not in names:
        handler.send_json(400, status_body(400, "BadRequest", f"container {container} is not valid for pod {name}"))
        return
    restarts = container_restarts(pod, container)
    previous = query.get("previous") in TRUE
    cstatus: Obj = next((c for c in pod["status"].get("containerStatuses") or () if c["name"] == container), {})
    waiting = (cstatus.get("state") or {}).get("waiting")
    if previous and restarts == 0:
        handler.send_json(400, status_body(400, "BadRequest",
                                         f'previous terminated container "{container}" in pod "{name}" not found'))  # fmt: skip
        return
    if not previous and restarts == 0 and (waiting or not cstatus):
        reason = (waiting or {}).get("reason", "ContainerCreating")
        handler.send_json(400, status_body(400, "BadRequest",
                                         f'container "{container}" in pod "{name}" is waiting to start: {reason}'))  # fmt: skip
        return
    instance = restarts - 1 if previous else restarts
    tail = int(query["tailLines"]) if query.get("tailLines") else None
    key = (ns, name, container, instance)
    with api.cv:
        lines = list(api.logs.get(key, []))
    sent = len(lines)  # follow continues after everything that exists now
    if tail is not None:
        lines = lines[-tail:] if tail else []
    if previous or query.get("follow") not in TRUE:
        data = "".join(f"{line}\n" for line in lines).encode()
        handler.send_response(200)
        handler.send_header("Content-Type", "text/plain")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)
        return
    handler.start_stream("text/plain")
    if lines:
        handler.chunk("".join(f"{line}\n" for line in lines).encode())
    while True:
        with api.cv:
            current = api.pods.get((ns, name))
            ended = api.stopping or current is None or (not api.log_streams_outlive_pods and (
                current["status"].get("phase") in ("Succeeded", "Failed") or container_restarts(current, container) != instance
            ))  # fmt: skip
            new = list(api.logs.get(key, []))[sent:]
            if not new and not ended:
                api.cv.wait(0.5)
                continue
        if new:
            handler.chunk("".join(f"{line}\n" for line in new).encode())
            sent += len(new)
        if ended:
            handler.end_stream()
            return
