"""Your registry without a fork: `kubetrain compile --registry HOST/PATH --out DIR`, or KUBETRAIN_REGISTRY.

A fresh compile for another registry names the launcher image there in every executor, and the
training components carry the registry to their launcher pod (container env), where the step
picks the training images from it. The YAML beside the sources keeps naming ghcr.io/kubetrain.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubetrain import __version__
from kubetrain.errors import InvalidInputError
from kubetrain.presets import DEFAULT_REGISTRY, REGISTRY_ENV, registry_from

REPO = Path(__file__).resolve().parents[2]
REGISTRY = "registry.example.com:5000/team"


def _kubetrain(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != REGISTRY_ENV}
    environ["PYTHONPATH"] = f"{REPO / 'src'}:{REPO}"
    return subprocess.run(
        [sys.executable, "-m", "kubetrain", *args],
        cwd=cwd,
        env={**environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _executors(path: Path) -> dict[str, Any]:
    spec = next(iter(yaml.safe_load_all(path.read_text())))
    executors: dict[str, Any] = spec["deploymentSpec"]["executors"]
    return executors


def test_a_fresh_compile_for_another_registry_names_it_everywhere(tmp_path: Path) -> None:
    out = tmp_path / "yaml"
    done = _kubetrain("compile", "--registry", REGISTRY, "--out", str(out), "pytorch_train", "mnist_pytorch",
                      cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    written = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.yaml"))
    assert written == [
        "components/pytorch_train/component.yaml",
        "components/pytorch_train/kfp-pre-2.15/component.yaml",
        "pipelines/kfp-pre-2.15/mnist_pytorch.yaml",
        "pipelines/mnist_pytorch.yaml",
    ]
    for name in written:
        path = out / name
        assert DEFAULT_REGISTRY not in path.read_text(), name
        for label, executor in _executors(path).items():
            container = executor["container"]
            assert container["image"] == f"{REGISTRY}/launcher:{__version__}", (name, label)
            env = {e["name"]: e["value"] for e in container.get("env", [])}
            if "train" in label:  # the launcher pod picks the training images from it
                assert env == {REGISTRY_ENV: REGISTRY}, (name, label, env)
    # The committed YAML is left as it is.
    committed = _executors(REPO / "components" / "pytorch_train" / "component.yaml")
    assert all(e["container"]["image"].startswith(f"{DEFAULT_REGISTRY}/") for e in committed.values())
    assert all("env" not in e["container"] for e in committed.values())


def test_the_launcher_pod_takes_the_training_images_from_the_registry_it_is_given(tmp_path: Path) -> None:
    code = (
        "from kubetrain.kfp_runtime.frameworks import ChainerMNRequest, PSRequest, PyTorchRequest\n"
        "print(PyTorchRequest.default_image, ChainerMNRequest.default_image, PSRequest.default_image)"
    )
    env = {**os.environ, REGISTRY_ENV: REGISTRY, "PYTHONPATH": f"{REPO / 'src'}:{REPO}"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [f"{REGISTRY}/{n}:{__version__}" for n in ("pytorch", "chainermn", "ps")]


def test_yaml_for_another_registry_never_lands_beside_the_sources(tmp_path: Path) -> None:
    done = _kubetrain("compile", "pytorch_train", cwd=tmp_path, env={REGISTRY_ENV: REGISTRY})
    assert done.returncode == 2
    assert f"{REGISTRY_ENV}={REGISTRY}" in done.stderr and "--registry HOST/PATH --out DIR" in done.stderr
    done = _kubetrain("compile", "--registry", REGISTRY, "pytorch_train", cwd=tmp_path)
    assert done.returncode == 2 and "needs --out DIR" in done.stderr, done.stderr


@pytest.mark.parametrize("value", ["http://registry.example.com/team", "registry.example.com/team/", "reg istry/x",
                                   "registry.example.com/team:1.0", "registry.example.com"])  # fmt: skip
def test_a_malformed_registry_is_refused_naming_the_setting(value: str) -> None:
    with pytest.raises(InvalidInputError, match=rf"{REGISTRY_ENV}: got '{value}'; expected a registry and path"):
        registry_from({REGISTRY_ENV: value})


def test_the_registry_forms_images_build_sh_pushes_to_are_accepted() -> None:
    for value in (
        "ghcr.io/me",
        "registry.example.com:5000/team/ml",
        "localhost:5000/kubetrain",
        "quay.io/org/sub-team",
    ):
        assert registry_from({REGISTRY_ENV: value}) == value
    assert registry_from({}) == registry_from({REGISTRY_ENV: ""}) == DEFAULT_REGISTRY
