"""Local backend translation rules: `$(VAR)` expansion, host/path rewriting, inherited env, commands."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kubetrain.backends.local.env import (
    Rewriter,
    ensure_python_shims,
    expand_references,
    inherited_environment,
    resolve_command,
    resolve_field_ref,
    resource_field_value,
    search_path,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("$(A)-$(B)", "1-two"),
        ("$(MISSING)", "$(MISSING)"),  # undefined references stay as written
        ("$$(A)", "$(A)"),  # $$ escapes
        ("cost $5", "cost $5"),
        ("$(A", "$(A"),  # unterminated
        ("tail$", "tail$"),
        ("$(A)$(A)", "11"),
    ],
)
def test_expand_references_follows_the_kubelet(text: str, expected: str) -> None:
    assert expand_references(text, {"A": "1", "B": "two"}) == expected


@pytest.fixture
def rewriter() -> Rewriter:
    return Rewriter(
        hosts={
            "job-master-0": "127.0.1.1",
            "job-worker-1": "127.0.1.3",
            "js-ps-0-0": "127.0.2.2",
            "js-ps-0-0.js": "127.0.2.2",
        },
        namespace="team",
        mounts={"/workspace": "/local/claims/work", "/workspace/cache/": "/local/pod/cache", "/tmp/x": "/local/x"},
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("job-master-0", "127.0.1.1"),
        ("job-master-0:23456", "127.0.1.1:23456"),
        ("tcp://job-master-0:23456", "tcp://127.0.1.1:23456"),
        ("job-master-0.team.svc.cluster.local:1", "127.0.1.1:1"),
        ("job-master-0.team.svc:1", "127.0.1.1:1"),
        ("job-master-0.team", "127.0.1.1"),
        ("js-ps-0-0.js:50052", "127.0.2.2:50052"),
        ("js-ps-0-0.js.team.svc.cluster.local:50052,job-worker-1:9", "127.0.2.2:50052,127.0.1.3:9"),
        # Not these: other names that merely contain a known one, or other domains.
        ("job-master-01", "job-master-01"),
        ("xjob-master-0", "xjob-master-0"),
        ("job-master-0.other.svc", "job-master-0.other.svc"),
        ("job-master-0.log", "job-master-0.log"),
    ],
)
def test_host_names_become_loopback_addresses_and_ports_stay(rewriter: Rewriter, text: str, expected: str) -> None:
    assert rewriter.rewrite(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/workspace", "/local/claims/work"),
        ("/workspace/data/x.npz", "/local/claims/work/data/x.npz"),
        ("--data=/workspace/data", "--data=/local/claims/work/data"),
        ("python t.py --out /workspace/o --log /tmp/x/l", "python t.py --out /local/claims/work/o --log /local/x/l"),
        ("/workspace/cache/f", "/local/pod/cache/f"),  # the longest mount wins
        ("a:/workspace/b,/workspace/c", "a:/local/claims/work/b,/local/claims/work/c"),
        ("/workspacex/y", "/workspacex/y"),
        ("/other/workspace/y", "/other/workspace/y"),
    ],
)
def test_mount_paths_become_local_directories(rewriter: Rewriter, text: str, expected: str) -> None:
    assert rewriter.rewrite(text) == expected


def test_inherited_environment_drops_what_operators_own() -> None:
    env = inherited_environment(
        {"PATH": "/bin", "RANK": "3", "OMPI_COMM_WORLD_RANK": "1", "PET_NNODES": "2", "HOME": "/root", "MY_RANK": "x"}
    )
    assert env == {"PATH": "/bin", "HOME": "/root", "MY_RANK": "x"}


def test_python_means_this_interpreter(tmp_path: Path) -> None:
    assert resolve_command(["python", "-c", "1"], "") == [sys.executable, "-c", "1"]
    assert resolve_command(["/usr/local/bin/python3"], "") == [sys.executable]
    assert resolve_command(["python3.11", "x.py"], "")[0] == sys.executable  # type: ignore[index]
    assert resolve_command(["no-such-command-kubetrain"], "/bin") is None
    assert resolve_command(["/no/such/binary"], "/bin") is None
    assert resolve_command(["sh", "-c", "true"], "/usr/bin:/bin") is not None


def test_python_shims_run_this_interpreter_inside_shell_commands(tmp_path: Path) -> None:
    import subprocess

    shims = ensure_python_shims(tmp_path / "bin")
    path = search_path(shims, "/usr/bin:/bin")
    assert path.split(":")[0] == str(shims)
    out = subprocess.run(
        ["sh", "-c", "python -c 'import sys; print(sys.executable)'"],
        env={"PATH": path},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == sys.executable


def test_field_refs_resolve_like_the_downward_api() -> None:
    def ref(path: str) -> str | None:
        return resolve_field_ref(
            path,
            name="js-worker-0-1-abcde",
            namespace="team",
            uid="u-1",
            labels={"jobset.sigs.k8s.io/job-index": "2"},
            annotations={"a": "b"},
            address="127.0.3.5",
            service_account="default",
        )

    assert ref("metadata.labels['jobset.sigs.k8s.io/job-index']") == "2"
    assert ref("metadata.annotations['a']") == "b"
    assert ref("metadata.labels['missing']") == ""
    assert ref("metadata.name") == "js-worker-0-1-abcde"
    assert ref("metadata.namespace") == "team"
    assert ref("status.podIP") == "127.0.3.5"
    assert ref("spec.nodeName") == "localhost"
    assert ref("status.phase") is None  # not a field the downward API offers


def test_resource_field_refs_divide_and_round_up() -> None:
    assert resource_field_value({"resource": "limits.cpu"}, {"limits": {"cpu": "1500m"}}) == "2"
    assert resource_field_value({"resource": "requests.memory", "divisor": "1Mi"}, {"requests": {"memory": "3Gi"}}) == (
        "3072"
    )
    assert int(resource_field_value({"resource": "limits.cpu"}, {})) >= 1  # the machine's capacity
