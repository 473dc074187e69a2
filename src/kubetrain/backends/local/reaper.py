"""The first process of every local container: a child subreaper, so that the container's processes end with it.

On a node, a container's processes live in its PID namespace and cgroup, and all of them stop with
it, whatever they did to their session, process group or environment. Neither is available to an
unprivileged process (a cgroup needs write access to the cgroup tree, a PID namespace needs
CAP_SYS_ADMIN), so every local container starts under this small program, which:

- makes itself a child subreaper (`prctl(PR_SET_CHILD_SUBREAPER)`, Linux): a process of the
  container whose parent exits is re-parented to it rather than to init, so every process of the
  container stays its descendant, even one that left its session and cleared its environment
  (`setsid env -i daemon &`). The backend and its watchdog find a container's processes by that
  parentage (:func:`descendants`, used by `process.container_members`);
- runs the container's command and reaps every orphan that exits, as a container's init does;
- when the command exits, SIGKILLs whatever of the container is left, reaps it, and exits with the
  command's exit code (128+N when signal N killed it, as a container runtime reports it);
- asks for SIGTERM when the backend thread that started it dies (`PR_SET_PDEATHSIG`). When that
  comes, or any SIGTERM once the backend is gone (its watchdog's), it passes SIGTERM on to every
  process of the container, and SIGKILLs them after the grace period. While the backend lives,
  stopping the container is the backend's business, and a SIGTERM to the reaper changes nothing.

It imports the standard library only and runs as
`python -I -S reaper.py GRACE_SECONDS PARENT_PID` with the command, JSON-encoded, in
:data:`COMMAND_ENV` (removed before the command starts): it starts in milliseconds, the user's
environment (PYTHONPATH, ...) cannot break it, and its own command line does not repeat the
container's, so `ps` shows the command once, as its child.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
from types import FrameType

COMMAND_ENV = "KUBETRAIN_REAPER_COMMAND"
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def process_table() -> dict[int, tuple[int, int]]:
    """pid → (parent pid, session id) of every live (non-zombie) process on this machine."""
    table: dict[int, tuple[int, int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:  # exited while we looked
            continue
        # The command name is in parentheses and may contain anything: parse after the last ')'.
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 3 and fields[0] != b"Z":
            table[int(name)] = (int(fields[1]), int(fields[3]))
    return table


def descendants(root: int, table: dict[int, tuple[int, int]]) -> list[int]:
    """Every live process below `root` in the process tree of `table`."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found: list[int] = []
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), ()):
            found.append(child)
            stack.append(child)
    return found


def _prctl(option: int, value: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(option, value, 0, 0, 0) == 0)
    except (OSError, AttributeError):  # not Linux: no subreaper, the session and marker still count
        return False


def _signal_descendants(sig: int) -> int:
    sent = 0
    for pid in descendants(os.getpid(), process_table()):
        try:
            os.kill(pid, sig)
            sent += 1
        except ProcessLookupError:
            continue
    return sent


class _Reaper:
    """Signal handling: SIGTERM matters only once the backend that started us is gone."""

    def __init__(self, grace_seconds: float, parent: int) -> None:
        self.grace_seconds = grace_seconds
        self.parent = parent
        self.orphaned = False

    def on_term(self, signum: int, frame: FrameType | None) -> None:
        if self.orphaned or os.getppid() == self.parent:
            return  # the backend lives and stops the container itself (or we are stopping it already)
        self.orphaned = True
        _signal_descendants(signal.SIGTERM)
        signal.setitimer(signal.ITIMER_REAL, max(self.grace_seconds, 0.01))

    def on_alarm(self, signum: int, frame: FrameType | None) -> None:
        _signal_descendants(signal.SIGKILL)  # the grace period is over


def _end_the_rest() -> None:
    """SIGKILL every remaining process of the container and reap them all (orphans come to us)."""
    while True:
        left = _signal_descendants(signal.SIGKILL)
        try:
            os.wait()  # one child ends (they were just killed), or none is left
        except ChildProcessError:
            if not left:
                return


def main(argv: list[str]) -> int:
    """Run the command of $KUBETRAIN_REAPER_COMMAND as described above; its exit code."""
    grace_seconds, parent = float(argv[0]), int(argv[1])
    command = json.loads(os.environ.pop(COMMAND_ENV))
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    reaper = _Reaper(grace_seconds, parent)
    # Handlers, not SIG_IGN: a handler is reset for the command when it execs, an ignore is inherited.
    signal.signal(signal.SIGTERM, reaper.on_term)
    signal.signal(signal.SIGINT, lambda signum, frame: None)
    signal.signal(signal.SIGALRM, reaper.on_alarm)
    _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    try:
        child = subprocess.Popen(command)
    except OSError as e:
        print(f"kubetrain: cannot run {command[0]}: {e.strerror}", file=sys.stderr, flush=True)
        return 127 if isinstance(e, FileNotFoundError) else 126
    if os.getppid() != parent:  # the backend died before the death signal was asked for
        reaper.on_term(signal.SIGTERM, None)
    while True:
        pid, status = os.wait()  # the command, or an orphan of the container that ended
        if pid == child.pid:
            break
    code = os.waitstatus_to_exitcode(status)
    child.returncode = code  # reaped here: Popen must not wait for it again
    _end_the_rest()
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
