"""`make e2e`: the real-control-plane tier, its two halves side by side on one cluster.

Both halves mostly wait: the KFP backend's scenarios on Argo, the drivers and pod starts (its
runs, the browser scenarios), the others on the operators, pod starts and timeouts (real pods,
operators, the local backend's contract). One after another they took 1,347 s and 1,015 s on the
idle 2-core machine; side by side their waits overlap. Steps, each printing one phase line:

1. the four images start building in the background (tools/cluster/images.py prebuild: into the
   layer cache, nothing pushed), and the cluster starts, or is found running (`make cluster-up`:
   then it is left running);
2. the KFP half (tests/cluster/test_kfp_*.py) in the foreground, and the other half in a
   second pytest session whose output goes to .e2e-logs/others.log, printed once it ends (each
   session saves notes of the components its KFP runs verified);
3. the RBAC audit (test_zz_audit_rbac.py) last, alone: it reads what every launcher did in both;
   then the components' lastVerified, from both sessions' notes;
4. the cluster stops, if step 1 started it.

The two sessions share the cluster's namespaces but no job, run or pod name; image builds take
turns (tools/cluster/images.py holds a lock). Each half runs the modules that need no image first:
on a cold machine the images take minutes to build (torch's 5 GB layer), with one core to spare,
and those modules use it; the first scenario that needs an image waits on the lock, then pushes.
`--one-after-another` runs the halves in turn (to tell a problem of running side by side from a
plain one). PYTEST_ARGS (shell words) go to every pytest session. The exit status is non-zero
when any step failed.
"""

from __future__ import annotations

import argparse
import ast
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from kubetrain.images import IMAGE_NAMES
from tests.cluster import verified
from tools.cluster import controlplane, images, processes

REPO_ROOT = Path(__file__).resolve().parents[2]
CLUSTER = REPO_ROOT / "tests" / "cluster"
AUDIT = CLUSTER / "test_zz_audit_rbac.py"
LOGS = REPO_ROOT / ".e2e-logs"
VERIFIED_NOTES = LOGS / "verified"


# Tests of `make test` that need a piece only the e2e tier builds, and skip without it: on a cold
# machine `make test` runs before the background builds end, so CI runs them again here.
NEEDS_BUILT_PIECES = [
    "tests/unit/test_kfp_backend_compiler.py",  # the KFP backend's compiler
    "tests/integration/test_kfp_ui_smoke.py",  # the KFP UI
    "tests/integration/test_seaweedfs_store.py",  # SeaweedFS
    "tests/integration/test_identity_front.py",  # oauth2-proxy and the OIDC provider
]


# The helpers through which a scenario builds and pushes kubetrain's images (images.ensure).
IMAGE_HELPERS = frozenset({"real_pods", "kfp_runs"})


def halves() -> tuple[list[str], list[str]]:
    """(the KFP backend's test modules, every other e2e module and the tests that need built pieces).

    In each, the modules that need no image come first (their order is all that differs).
    """
    modules = sorted(p for p in CLUSTER.glob("test_*.py") if p != AUDIT)
    kfp = [p for p in modules if p.name.startswith("test_kfp_")]
    others = [p for p in modules if not p.name.startswith("test_kfp_")]
    image_free = {m for m in modules if not needs_images(m)}

    def ordered(group: list[Path], also_first: Sequence[str] = ()) -> list[str]:
        first = [str(p.relative_to(REPO_ROOT)) for p in group if p in image_free]
        rest = [str(p.relative_to(REPO_ROOT)) for p in group if p not in image_free]
        return [*first, *also_first, *rest]

    return ordered(kfp), ordered(others, NEEDS_BUILT_PIECES)


def needs_images(module: Path) -> bool:
    """Whether a tests/cluster module reaches an image helper (IMAGE_HELPERS), directly or through another helper."""
    seen: set[str] = set()
    todo = [module.stem]
    while todo:
        name = todo.pop()
        if name in IMAGE_HELPERS:
            return True
        if name in seen or not (CLUSTER / f"{name}.py").exists():
            continue
        seen.add(name)
        todo.extend(_cluster_imports(CLUSTER / f"{name}.py"))
    return False


def _cluster_imports(path: Path) -> list[str]:
    """The tests.cluster modules `path` imports, in any of the three forms an import can name them."""
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module == "tests.cluster":
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tests.cluster."):
            names.append((node.module or "").split(".")[2])
        elif isinstance(node, ast.Import):
            names += [a.name.split(".")[2] for a in node.names if a.name.startswith("tests.cluster.")]
    return names


Jiffies = tuple[int, int]


def cpu_jiffies(stat: Path = Path("/proc/stat")) -> Jiffies:
    """(busy, total) clock ticks of all the machine's CPUs since boot (the first line of /proc/stat).

    Idle and iowait are the idle part; steal counts as busy (the cores were not ours to use).
    """
    fields = [int(f) for f in stat.read_text().split("\n", 1)[0].split()[1:9]]
    total = sum(fields)  # user nice system idle iowait irq softirq steal (guest is inside user)
    return total - fields[3] - fields[4], total


def busy_cores(since: Jiffies, until: Jiffies, cores: int) -> float:
    """How many of the machine's `cores` were busy on average between two cpu_jiffies readings."""
    total = until[1] - since[1]
    return (until[0] - since[0]) / total * cores if total > 0 else 0.0


def phase_line(name: str, start: float, rc: int = 0, end: float | None = None,
               cpu: tuple[Jiffies, Jiffies] | None = None) -> str:  # fmt: skip
    """One line as .ci/phase.sh prints it: `phase NAME: start HH:MM:SS end HH:MM:SS N s[, cpu B of C] [FAILED exit N]`.

    `start` and `end` (default: now) are epoch seconds; the clock times are UTC. `cpu`, the
    cpu_jiffies readings at the start and the end, adds how many cores the whole machine kept busy
    meanwhile (whatever ran beside the phase included): near all of them, the phase waited on CPU.
    """
    end = time.time() if end is None else end
    clock = [time.strftime("%H:%M:%S", time.gmtime(t)) for t in (start, end)]
    cores = os.cpu_count() or 1
    busy = f", cpu {busy_cores(*cpu, cores):.2f} of {cores}" if cpu is not None else ""
    failed = f" FAILED exit {rc}" if rc else ""
    return f"phase {name}: start {clock[0]} end {clock[1]} {end - start:.0f} s{busy}{failed}"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the tier (see the module's docstring); the exit status."""
    parser = argparse.ArgumentParser(prog="python -m tools.ci.e2e", description=__doc__.split("\n")[0])
    parser.add_argument("--one-after-another", action="store_true", help="run the two halves in turn")
    args = parser.parse_args(argv)
    env = {**os.environ, "KUBETRAIN_E2E": "1"}
    # The sessions find the cluster started here, unchanged, and leave their lastVerified notes to
    # be recorded once both halves have ended (tests/cluster/verified.py).
    sessions = {**env, "KUBETRAIN_E2E_ATTACH": "1", verified.NOTES_ENV: str(VERIFIED_NOTES)}
    shutil.rmtree(VERIFIED_NOTES, ignore_errors=True)
    # --durations: a CI log shows which scenarios took the tier's time without a second run.
    pytest = [sys.executable, "-m", "pytest", "--durations=15", *shlex.split(os.environ.get("PYTEST_ARGS", ""))]
    cluster = [sys.executable, "-m", "tools.cluster"]
    lines: list[str] = []

    def step(name: str, command: list[str]) -> int:
        start, cpu = time.time(), cpu_jiffies()
        rc = subprocess.run(command, env=env if command[:3] == cluster else sessions, cwd=REPO_ROOT,
                            check=False).returncode  # fmt: skip
        lines.append(phase_line(name, start, rc, cpu=(cpu, cpu_jiffies())))
        print(lines[-1], flush=True)
        return rc

    started_here = not processes.members(controlplane.STATE)  # else `make cluster-up` started it: left running
    prebuild = Prebuild(lines)
    try:
        if step("e2e-cluster-up", [*cluster, "up"]) != 0:
            return 3
        kfp, others = halves()
        try:
            rc = _both_halves(step, pytest, kfp, others, sessions, lines, one_after_another=args.one_after_another)
            rc = step("e2e-rbac-audit", [*pytest, str(AUDIT.relative_to(REPO_ROOT))]) or rc
            rc = step("e2e-last-verified", [sys.executable, "-m", "tests.cluster.verified", str(VERIFIED_NOTES)]) or rc
        finally:
            if started_here:
                step("e2e-cluster-down", [*cluster, "down"])
    finally:
        rc_images = prebuild.wait()
    print("\n".join(["", "e2e phases:", *lines]), flush=True)
    return rc or rc_images


class Prebuild:
    """The four images built into the layer cache in a thread, from the tier's first second; one phase line."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.rc = 0
        self.thread = threading.Thread(target=self._run, name="images-prebuild", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        start, cpu = time.time(), cpu_jiffies()
        try:
            images.prebuild(list(IMAGE_NAMES), LOGS / "images-prebuild.log")
        except (images.ImageBuildError, OSError) as e:
            self.rc = 1
            print(f"e2e: the images' prebuild failed: {str(e).splitlines()[0]} (see {LOGS / 'images-prebuild.log'})",
                  flush=True)  # fmt: skip
        self.lines.append(phase_line("e2e-images-prebuild", start, self.rc, cpu=(cpu, cpu_jiffies())))
        print(self.lines[-1], flush=True)

    def wait(self) -> int:
        """Wait for it to end; 1 if it failed, else 0."""
        self.thread.join()
        return self.rc


Step = Callable[[str, list[str]], int]


def _both_halves(step: Step, pytest: list[str], kfp: list[str], others: list[str], env: dict[str, str],
                 lines: list[str], *, one_after_another: bool) -> int:  # fmt: skip
    if one_after_another:
        return step("e2e-kfp", [*pytest, *kfp]) or step("e2e-others", [*pytest, *others])
    LOGS.mkdir(exist_ok=True)
    log = LOGS / "others.log"
    start, cpu = time.time(), cpu_jiffies()
    with log.open("w") as out:
        background = subprocess.Popen([*pytest, *others], env=env, cwd=REPO_ROOT, stdout=out,
                                      stderr=subprocess.STDOUT)  # fmt: skip
        try:
            rc_kfp = step("e2e-kfp", [*pytest, *kfp])
        finally:
            rc_others = background.wait()
    banner = "the other half (the other modules and the built pieces' tests), side by side"
    print(f"\n----- {banner}: {log} -----\n{log.read_text()}")
    lines.append(phase_line("e2e-others", start, rc_others, cpu=(cpu, cpu_jiffies())))
    print(lines[-1], flush=True)
    return rc_kfp or rc_others


if __name__ == "__main__":
    sys.exit(main())
