"""The cluster's host processes: started with a record, found again whatever state is left, stopped.

A cluster on one machine is a dozen long-lived host processes (etcd, the API server, the
controller-manager, the scheduler, kwok, the operators and their keepers, and later a node and a
Kubeflow Pipelines backend). A start that fails half-way, a `.cluster/` directory removed by hand
or a test run killed by CI must not leave any of them holding ports for the next start. So:

- every process the harness starts gets its own session (pid = process-group id), a record
  (`<state>/processes/<name>.json`: pid, pgid, argv) and, in its environment, the marker
  `KUBETRAIN_CLUSTER=<state dir>`, which its children inherit (kwokctl passes its environment on
  to the control plane it starts);
- `members(state)` finds the cluster's processes from /proc alone, without any record: the
  marker in a process's environment, or an executable of the cluster's (a copy kwokctl keeps in
  the state directory, or one of the pinned binaries) whose command line or working directory
  lies in the state directory (also once that directory has been deleted). A developer's shell
  or `tail -f` in `.cluster/` is none of these and is left alone;
- `stop_all(state)` ends them (SIGTERM to each process group, SIGKILL after a grace period);
- `require_free(ports)` checks every port a component is about to bind and names the process
  holding a taken one, from /proc/net/tcp and the owners' open sockets.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

MARKER = "KUBETRAIN_CLUSTER"
# Where the pinned binaries of every piece are built and cached (tools/controlplane/build.sh).
BINARY_ROOTS = (Path.home() / ".cache" / "kubetrain",)
_PROC = Path("/proc")
_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's `st` column


class ProcessError(RuntimeError):
    """A cluster process could not be started or stopped; the message names it."""


class PortTakenError(ProcessError):
    """A port a component needs is held by another process (named in the message)."""


@dataclass(frozen=True)
class ProcessRecord:
    """A process the harness started: its name, pid, process group and command.

    `stop_grace_seconds`, when set, replaces stop_all's grace for this process: for a server known
    never to end on SIGTERM, so that the rest of the cluster need not wait for it.
    """

    name: str
    pid: int
    pgid: int
    argv: tuple[str, ...]
    stop_grace_seconds: float | None = None

    @staticmethod
    def path(state: Path, name: str) -> Path:
        """Where the record of `name` is kept."""
        return state / "processes" / f"{name}.json"

    def save(self, state: Path) -> None:
        """Write the record under `state`."""
        path = self.path(state, self.name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(self)))


def marked_env(state: Path, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """`env` (default: this process's) with the cluster's marker, for a process started for `state`."""
    return {**(os.environ if env is None else env), MARKER: str(state.resolve())}


def start(state: Path, name: str, argv: list[str], *, env: Mapping[str, str], log: Path, cwd: Path,
          stop_grace_seconds: float | None = None) -> ProcessRecord:  # fmt: skip
    """Start `argv` in a session of its own, marked and recorded; stdout and stderr to `log`.

    `stop_grace_seconds`: its own SIGTERM-to-SIGKILL grace in stop_all (ProcessRecord says when).
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        try:
            proc = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=marked_env(state, env),
                start_new_session=True, cwd=cwd,
            )  # fmt: skip
        except OSError as e:
            raise ProcessError(f"{name}: could not start {argv[0]}: {e}") from e
    _await_marker(proc)
    record = ProcessRecord(name=name, pid=proc.pid, pgid=proc.pid, argv=tuple(argv),
                           stop_grace_seconds=stop_grace_seconds)  # fmt: skip
    record.save(state)
    _CHILDREN[proc.pid] = proc
    return record


def _await_marker(proc: subprocess.Popen[bytes], timeout: float = 5.0) -> None:
    """Return once /proc shows `proc`'s environment (and so its marker), or it has ended, or `timeout` passed.

    Popen returns when the child's exec closes its close-on-exec pipe, which the kernel does a moment
    before it lays out the new program's environment; meanwhile /proc/PID/environ reads empty, and
    members() would not know the process for the cluster's (seen on a loaded machine).
    """
    deadline = time.monotonic() + timeout
    while _environ_marker(proc.pid) is None and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.001)


# Popen objects of the processes started here, so that stopping them also reaps them: a child of
# this process that exited stays a zombie (and looks alive to kill(pid, 0)) until it is waited for.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


# How deep under the cluster's state a piece may keep its `processes/` folder (`kfp/identity/`).
RECORD_DEPTH = 2


def _record_files(state: Path) -> list[Path]:
    """The record files of `state`'s `processes/` folders, at most RECORD_DEPTH folders down.

    The walk stays that shallow and skips what vanishes while it looks: below it are the node's
    kubelet tree and the workspaces, whose folders come and go with the pods (a whole-tree walk
    once failed on a pod's folder removed between its listing and its scan)."""
    found: list[Path] = []
    folders = [state]
    for _ in range(RECORD_DEPTH + 1):
        deeper: list[Path] = []
        for folder in folders:
            try:
                entries = [e for e in os.scandir(folder) if e.is_dir(follow_symlinks=False)]
            except OSError:  # gone, or not a folder
                continue
            for entry in entries:
                if entry.name == "processes":
                    found.extend(Path(entry.path).glob("*.json"))
                else:
                    deeper.append(Path(entry.path))
        folders = deeper
    return sorted(found)


def records(state: Path) -> list[ProcessRecord]:
    """The records under `state`, its pieces' folders included (none if it is gone; a record
    removed while they are read is left out)."""
    found = []
    for path in _record_files(state):
        try:
            found.append(_load(path))
        except FileNotFoundError:
            continue
    return found


def _load(path: Path) -> ProcessRecord:
    data = json.loads(path.read_text())
    return ProcessRecord(name=data["name"], pid=data["pid"], pgid=data["pgid"], argv=tuple(data["argv"]),
                         stop_grace_seconds=data.get("stop_grace_seconds"))  # fmt: skip


def running(record: ProcessRecord) -> bool:
    """Whether the recorded process is still running (and is still the one recorded)."""
    proc = _CHILDREN.get(record.pid)
    if proc is not None:
        return proc.poll() is None
    return _alive(record.pid) and record.argv[:1] == tuple(_cmdline(record.pid)[:1])


def _alive(pid: int) -> bool:
    try:
        state = (_PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"  # a zombie has ended; only its parent's wait is missing


def _cmdline(pid: int) -> list[str]:
    try:
        raw = (_PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _environ_marker(pid: int) -> str | None:
    try:
        raw = (_PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return None
    prefix = f"{MARKER}=".encode()
    for item in raw.split(b"\0"):
        if item.startswith(prefix):
            return item[len(prefix) :].decode(errors="replace")
    return None


def _link(pid: int, name: str) -> str:
    """/proc/PID/cwd or /proc/PID/exe, also when it has been deleted since ('' when unreadable)."""
    try:
        return os.readlink(_PROC / str(pid) / name).removesuffix(" (deleted)")
    except OSError:
        return ""


def _ancestors() -> set[int]:
    """This process and its ancestors: never members, whatever their command line says."""
    out = set()
    pid = os.getpid()
    while pid > 1 and pid not in out:
        out.add(pid)
        try:
            pid = int((_PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            break
    return out


def members(state: Path, *, binary_roots: Iterable[Path] = BINARY_ROOTS) -> list[int]:
    """Every running process of the cluster whose state directory is `state`, found from /proc alone.

    A member carries the cluster's marker, or runs an executable inside `state` (kwokctl's copies),
    or runs one under `binary_roots` with its command line or working directory inside `state`.
    """
    root = str(state.resolve())
    inside = root + os.sep
    binaries = tuple(str(r.resolve()) + os.sep for r in binary_roots)
    skip = _ancestors()
    found = []
    for entry in _PROC.iterdir():
        if not entry.name.isdigit() or int(entry.name) in skip:
            continue
        pid = int(entry.name)
        if not _alive(pid):
            continue
        marker = _environ_marker(pid) or ""
        exe = _link(pid, "exe")
        if marker == root or marker.startswith(inside) or exe.startswith(inside):
            found.append(pid)
        elif exe.startswith(binaries):
            cwd = _link(pid, "cwd")
            if cwd == root or cwd.startswith(inside) or any(arg == root or inside in arg for arg in _cmdline(pid)):
                found.append(pid)
    return sorted(found)


def describe(pid: int) -> str:
    """`pid N (command line)`, for messages."""
    command = " ".join(" ".join(_cmdline(pid)).split())[:200] or "?"  # one line, however the argv looks
    return f"pid {pid} ({command})"


def stop_all(state: Path, *, keep: set[int] | None = None, grace_seconds: float = 10.0) -> list[int]:
    """End every process of the cluster under `state`: recorded groups first, then whatever /proc shows.

    SIGTERM to each process group (or the process, when it shares another's group), SIGKILL to
    what is left after `grace_seconds`; the records are removed. With `keep` (the recorded pids
    before a start), only the recorded processes not in it: those one start began. Returns the
    pids ended.
    """
    if keep is not None:
        files = {path: _load(path) for path in _record_files(state)}
        mine = {path: record for path, record in files.items() if record.pid not in keep}
        targets = {r.pid for r in mine.values() if running(r)}
        left = _terminate(targets, _own_graces(mine.values()), grace_seconds)
        _signal_all(left, signal.SIGKILL)
        # A SIGKILLed process is gone only once the kernel has torn it down (seconds on a loaded
        # machine): return when it has, as the full stop below does.
        deadline = time.monotonic() + grace_seconds
        while _still_running(left) and time.monotonic() < deadline:
            time.sleep(0.1)
        for path in mine:
            path.unlink(missing_ok=True)
        return sorted(targets)
    recorded = records(state)
    targets = {r.pid for r in recorded if running(r)} | set(members(state))
    left = _terminate(targets, _own_graces(recorded), grace_seconds)
    left |= set(members(state))  # anything started meanwhile by a dying parent
    if left:
        _signal_all(left, signal.SIGKILL)
        deadline = time.monotonic() + grace_seconds
        while _still_running(left) and time.monotonic() < deadline:
            time.sleep(0.1)
    survivors = _still_running(left)
    for path in _record_files(state):
        path.unlink()
    if survivors:
        raise ProcessError("still running after SIGKILL: " + ", ".join(describe(p) for p in sorted(survivors)))
    return sorted(targets | left)


def _own_graces(recorded: Iterable[ProcessRecord]) -> dict[int, float]:
    return {r.pid: r.stop_grace_seconds for r in recorded if r.stop_grace_seconds is not None}


def _terminate(targets: set[int], graces: dict[int, float], grace_seconds: float) -> set[int]:
    """SIGTERM `targets`, then wait until each has ended or its grace has passed; those still running.

    A process's grace is its own (`graces`) if it has one, else `grace_seconds`.
    """
    _signal_all(targets, signal.SIGTERM)
    start = time.monotonic()
    while True:
        left = _still_running(targets)
        waited = time.monotonic() - start
        if all(waited >= graces.get(pid, grace_seconds) for pid in left):  # also when none is left
            return left
        time.sleep(0.1)


def _still_running(pids: Iterable[int]) -> set[int]:
    out = set()
    for pid in pids:
        proc = _CHILDREN.get(pid)
        if proc is not None:
            if proc.poll() is None:
                out.add(pid)
            else:
                _CHILDREN.pop(pid, None)
        elif _alive(pid):
            out.add(pid)
    return out


def _signal_all(pids: Iterable[int], signum: signal.Signals) -> None:
    own_group = os.getpgid(0)
    for pid in sorted(pids):
        try:
            group = os.getpgid(pid)
            if group == pid and group != own_group:
                os.killpg(group, signum)  # the leader of its own session: take its children along
            else:
                os.kill(pid, signum)
        except ProcessLookupError:
            continue


# --- ports ----------------------------------------------------------------------------------------


def listener(port: int) -> int | None:
    """The pid of the process listening on TCP `port` (any local address), or None when it is free.

    Read from /proc/net/tcp{,6} (the socket's inode) and the processes' open descriptors; -1 when
    the port is held but its owner cannot be seen (another user's process, without privilege).
    """
    inodes = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (_PROC / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == _LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{fields[9]}]")
    if not inodes:
        return None
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            for fd in (entry / "fd").iterdir():
                if os.readlink(fd) in inodes:
                    return int(entry.name)
        except OSError:
            continue
    return -1


def require_free(ports: Mapping[int, str]) -> None:
    """Raise PortTakenError for the first of `ports` ({port: what will bind it}) already listened on."""
    for port, what in sorted(ports.items()):
        holder = listener(port)
        if holder is not None:
            who = describe(holder) if holder > 0 else "a process this user cannot see"
            raise PortTakenError(f"port {port}, needed by {what}, is taken by {who}; stop it or free the port")
