"""Local backend translation rules: `$(VAR)` expansion, host/path rewriting, the environment, commands."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kubetrain.backends.local.env import (
    IMAGE_ENV,
    Rewriter,
    ensure_python_shims,
    expand_references,
    image_environment,
    machine_environment,
    python_script,
    resolve_command,
    resolve_field_ref,
    resource_field_value,
    search_path,
)
from tests.unit.test_images import image_instructions


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


def test_a_replica_takes_only_what_this_machine_needs_from_the_callers_environment() -> None:
    caller = {
        "PATH": "/bin", "HOME": "/root", "TMPDIR": "/scratch", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
        "HTTPS_PROXY": "http://proxy:3128", "no_proxy": "localhost", "SSL_CERT_FILE": "/etc/ca.pem",
        "PYTHONPATH": "/team/models", "OMP_NUM_THREADS": "1",
        "RANK": "3", "OMPI_COMM_WORLD_RANK": "1", "PET_NNODES": "2", "MY_RANK": "x", "FOO_HOST_ONLY": "leaked",
        "AWS_SECRET_ACCESS_KEY": "s3cr3t", "KUBETRAIN_BACKEND": "local",
    }  # fmt: skip
    env = machine_environment(caller)
    dropped = {"RANK", "OMPI_COMM_WORLD_RANK", "PET_NNODES", "MY_RANK", "FOO_HOST_ONLY", "AWS_SECRET_ACCESS_KEY"}
    assert env == {k: v for k, v in caller.items() if k not in dropped | {"KUBETRAIN_BACKEND"}}


def _dockerfile_env(name: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for keyword, rest in image_instructions(name):
        if keyword == "ENV":
            env.update(dict(item.split("=", 1) for item in rest.split()))
    return env


@pytest.mark.parametrize("name", sorted(IMAGE_ENV))
def test_a_local_container_starts_with_its_images_env(name: str) -> None:
    image_env = {k: v for k, v in _dockerfile_env(name).items() if k != "HOME"}  # HOME stays this machine's
    assert IMAGE_ENV[name] == image_env
    assert image_environment(f"registry.example.com/mirror/{name}:1.2.3") == image_env


def test_an_unknown_image_gets_the_training_images_env_it_runs_on_locally() -> None:
    env = image_environment("registry.example.com/team/trainer:1.4")
    assert env["SETUPTOOLS_USE_DISTUTILS"] == "stdlib"  # a user's Chainer program imports here too
    assert env["PYTHONUNBUFFERED"] == "1"


def test_python_means_this_interpreter(tmp_path: Path) -> None:
    assert resolve_command(["python", "-c", "1"], "") == [sys.executable, "-c", "1"]
    assert resolve_command(["/usr/local/bin/python3"], "") == [sys.executable]
    versioned = resolve_command(["python3.11", "x.py"], "")
    assert versioned is not None and versioned[0] == sys.executable
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


def test_chainers_pkg_resources_warning_stays_out_of_a_ranks_log() -> None:
    """Issue 34 item 3: 24 of a failed MPI job's 193 lines were setuptools' pkg_resources warning, one per import."""
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    env.update(image_environment("ghcr.io/kubetrain/chainermn:1"))
    done = subprocess.run(
        [sys.executable, "-c", "import chainer, warnings; warnings.warn('kept', UserWarning)"],
        env=env, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert "pkg_resources" not in done.stderr
    assert "UserWarning: kept" in done.stderr  # other warnings still show
    sshd = (Path(__file__).parents[2] / "images" / "chainermn" / "sshd_config").read_text()
    setenv = next(line for line in sshd.splitlines() if line.startswith("SetEnv "))
    assert f"PYTHONWARNINGS={IMAGE_ENV['chainermn']['PYTHONWARNINGS']}" in setenv.split()  # the remote ranks' env


@pytest.mark.parametrize(
    ("argv", "script"),
    [
        (["python", "train.py", "--lr", "1"], 1),
        (["python", "-u", "-W", "ignore", "-X", "dev", "/w/train.py"], 6),
        (["python", "-uWignore", "/w/train.py"], 2),
        (["python", "--", "train.py"], 2),
        (["python", "--check-hash-based-pycs", "never", "-B", "t.py"], 4),
        (["python", "-m", "kubetrain.train.torch_ddp", "x.py"], None),
        (["python", "-uc", "print(1)"], None),
        (["python", "-"], None),
        (["python"], None),
        (["/usr/bin/python3.11", "t.py"], 1),
        (["mpirun", "-n", "2", "-x", "A", "python", "-u", "-m", "mpi4py", "/w/t.py", "--lr", "1"], 9),
        (["mpirun", "-n", "2", "python", "-m", "mpi4py", "-m", "pkg.train"], None),
        (["mpirun", "-n", "2", "./a.out"], None),
        (["sh", "-c", "python t.py"], None),
    ],
)
def test_the_script_a_python_command_runs(argv: list[str], script: int | None) -> None:
    """What the local backend checks exists before it starts a replica (issue 49 item 7)."""
    assert python_script(argv) == script
