"""The wheel stands alone: built with `python -m build`, installed into a fresh venv, used outside the checkout.

`python -m build --no-isolation` makes the sdist, then the wheel from the sdist (so both are
checked). The wheel goes into a new venv with `pip install --no-deps --no-index`; the venv sees
kubetrain's dependencies (kfp, torch, ...) through a path line pointing at this environment's
site-packages, which adds that directory to `sys.path` without running its `.pth` files: the
editable install of the checkout (a `.pth` naming its `src/`) stays out, so every `kubetrain`
module the venv imports comes from the wheel, which the test checks. No network, no dependency
downloads. Then, from a directory outside the checkout, with no PYTHONPATH: the components by
name, the compiled YAML as package data, the shipped pipelines, a user's pipeline compiled,
`kubetrain run` of it for one epoch, and `kubetrain submit` to the stand-in KFP API.

The extras are installed as docs/use-from-your-project.md#install says, with plain pip (PyPI) in
a fresh venv with pip: Chainer 7.8.1 really built from its sdist, step 2 resolved by pip's
`--dry-run --report` (torch with its CUDA libraries is 3 GB), and the result held to what the
training needs at run time (setuptools < 81 for Chainer's pkg_resources, numpy < 2, torch 2.13.0).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest
import yaml

from tests.fake_kfp_api import FakeKfpApi

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]
TOKEN = "wheel-token"
INSTALL_DOC = REPO / "docs" / "use-from-your-project.md"

USER_PIPELINE = """
import sys

from kfp import compiler, dsl

from kubetrain.components import download_dataset, pytorch_train


@dsl.pipeline(name="from-the-wheel")
def from_the_wheel(epochs: int = 1):
    data = download_dataset(source="builtin:digits")
    pytorch_train(dataset=data.outputs["dataset"], workers=0, epochs=epochs)


if __name__ == "__main__":
    compiler.Compiler().compile(from_the_wheel, sys.argv[1])
"""

CHECKS = """
import json, sys
from importlib import metadata
from pathlib import Path

import kubetrain
from kubetrain.components import (
    chainermn_train, compare_summary, compiled_yaml, download_dataset, load_component, ps_train, pytorch_train,
)
from kubetrain.components.pytorch_train import pytorch_train as by_module
from kubetrain.components.pytorch_train.component import pytorch_train as by_file
from kubetrain.pipelines import compiled_yaml as pipeline_yaml
from kubetrain.pipelines.compare_frameworks import compare_frameworks
from kubetrain.pipelines.mnist_pytorch import mnist_pytorch

assert by_module is by_file is pytorch_train
components = compiled_yaml()
loaded = load_component(str(components["pytorch_train"]))
print(json.dumps({
    "kubetrain": kubetrain.__file__,
    "components": {k: str(v) for k, v in components.items()},
    "components_pre_2_15": sorted(compiled_yaml(kfp_pre_2_15=True)),
    "pipelines": {k: str(v) for k, v in pipeline_yaml().items()},
    "pipelines_pre_2_15": sorted(pipeline_yaml(kfp_pre_2_15=True)),
    "names": [c.name for c in (download_dataset, pytorch_train, chainermn_train, ps_train, compare_summary)],
    "shipped": [mnist_pytorch.name, compare_frameworks.name],
    "loaded": loaded.name,
    "requires": metadata.requires("kubetrain"),
    "dist": str(metadata.distribution("kubetrain").locate_file("")),
}))
"""


def _run(args: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update({"OMP_NUM_THREADS": "1", "HOME": str(cwd)})
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The wheel and the sdist, built once for both tests (neither changes them; each installs a copy)."""
    out = tmp_path_factory.mktemp("built") / "dist"
    done = _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(REPO)], cwd=out.parent)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (wheel,) = out.glob("kubetrain-*.whl")
    (sdist,) = out.glob("kubetrain-*.tar.gz")
    return wheel, sdist


def _fresh_venv(where: Path, wheel: Path) -> Path:
    """A venv with the wheel installed and this environment's packages visible, kubetrain's checkout not."""
    done = _run([sys.executable, "-m", "venv", "--without-pip", str(where)], cwd=where.parent)
    assert done.returncode == 0, done.stderr
    python = where / "bin" / "python"
    site = Path(
        _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=where).stdout.strip()
    )
    shared = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    (site / "zz_shared_dependencies.pth").write_text("".join(f"{p}\n" for p in shared), encoding="utf-8")
    install = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index"]
    done = _run([*install, str(wheel)], cwd=where.parent)
    assert done.returncode == 0, done.stderr
    return where / "bin"


def test_the_wheel_installed_alone_provides_components_yaml_pipelines_run_and_submit(
    tmp_path: Path, built: tuple[Path, Path]
) -> None:
    wheel, sdist = built
    names = zipfile.ZipFile(wheel).namelist()
    for member in ("kubetrain/components/pytorch_train/component.yaml",
                   "kubetrain/components/ps_train/kfp-pre-2.15/component.yaml",
                   "kubetrain/components/ps_train/__init__.py", "kubetrain/components/ps_train/component.py",
                   "kubetrain/pipelines/mnist_pytorch.yaml", "kubetrain/pipelines/compare_frameworks.py"):  # fmt: skip
        assert member in names, member
    # A component's own tests (components/<name>/tests/) import the checkout's tests package: not shipped.
    assert not [n for n in names if "/tests/" in n], [n for n in names if "/tests/" in n]
    assert sdist.stat().st_size > 0
    bin_dir = _fresh_venv(tmp_path / "venv", wheel)
    user = tmp_path / "my-project"
    user.mkdir()
    assert not str(user).startswith(str(REPO))

    checked = _run([str(bin_dir / "python"), "-c", CHECKS], cwd=user)
    assert checked.returncode == 0, checked.stderr[-3000:]
    seen = json.loads(checked.stdout.strip().splitlines()[-1])
    venv = str(tmp_path / "venv")
    assert seen["kubetrain"].startswith(venv) and seen["dist"].startswith(venv), seen
    assert sorted(seen["components"]) == sorted(
        ["chainermn_train", "compare_summary", "download_dataset", "ps_train", "pytorch_train"]
    )
    assert all(path.startswith(venv) and Path(path).is_file() for path in seen["components"].values())
    assert seen["components_pre_2_15"] == sorted(seen["components"])
    assert sorted(seen["pipelines"]) == ["compare_frameworks", "mnist_chainermn", "mnist_ps", "mnist_pytorch"]
    assert seen["pipelines_pre_2_15"] == sorted(seen["pipelines"])
    assert seen["names"] == ["download-dataset", "pytorch-train", "chainermn-train", "ps-train", "compare-summary"]
    assert (seen["shipped"], seen["loaded"]) == (["mnist-pytorch", "compare-frameworks"], "pytorch-train")
    assert any(r.startswith("kfp") for r in seen["requires"]), seen["requires"]

    source = user / "my_pipeline.py"
    source.write_text(textwrap.dedent(USER_PIPELINE), encoding="utf-8")
    compiled = _run([str(bin_dir / "python"), "my_pipeline.py", "my_pipeline.yaml"], cwd=user)
    assert compiled.returncode == 0, compiled.stderr[-3000:]
    spec = next(iter(yaml.safe_load_all((user / "my_pipeline.yaml").read_text())))
    assert set(spec["root"]["dag"]["tasks"]) == {"download-dataset", "pytorch-train"}

    ran = _run([str(bin_dir / "kubetrain"), "run", "my_pipeline.py", "--param", "epochs=1", "--json"], cwd=user)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    outcome = json.loads(ran.stdout.strip().splitlines()[-1])
    assert outcome["state"] == "SUCCEEDED", outcome
    assert outcome["tasks"]["pytorch-train"]["metrics"]["epochs"] == 1, outcome["tasks"]["pytorch-train"]

    with FakeKfpApi(token=TOKEN) as api:
        submitted = _run([str(bin_dir / "kubetrain"), "submit", "my_pipeline.yaml", "--host", api.url, "--token", TOKEN],
                         cwd=user)  # fmt: skip
        assert submitted.returncode == 0, submitted.stderr[-3000:]
    (pipeline,) = api.state.pipelines.values()
    assert pipeline["display_name"] == "from-the-wheel"


def _install_steps() -> list[list[str]]:
    """The `pip install` commands of the document's install block, as argument lists after `pip`."""
    match = re.search(r"<!-- install -->\n```bash\n(.*?)```", INSTALL_DOC.read_text(encoding="utf-8"), re.S)
    assert match, f"{INSTALL_DOC} lost its install block"
    return [shlex.split(line, comments=True)[1:] for line in match.group(1).splitlines() if line.startswith("pip ")]


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def test_the_wheel_with_every_extra_installs_with_plain_pip_as_documented(
    tmp_path: Path, built: tuple[Path, Path]
) -> None:
    wheel, _ = built
    venv = tmp_path / "venv"
    done = _run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path)  # with pip: a user's fresh venv
    assert done.returncode == 0, done.stderr
    python = str(venv / "bin" / "python")
    # The user's pip cache, so that a second run does not download again (HOME is the test's).
    cache = os.environ.get("PIP_CACHE_DIR") or str(Path.home() / ".cache" / "pip")
    *first, last = _install_steps()
    assert last[0] == "install" and last[-1].startswith("kubetrain["), last
    extras = last[-1].split("[", 1)[1].split("]", 1)[0]
    assert set(extras.split(",")) == {"torch", "chainer", "ps", "s3", "gcs"}, "the document installs every extra"
    for step in first:
        done = _run([python, "-m", "pip", "--cache-dir", cache, *step], cwd=tmp_path, timeout=900)
        assert done.returncode == 0, f"pip {shlex.join(step)}\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    # Chainer was built from its sdist here, and imports (pkg_resources and numpy.distutils included).
    imported = _run([python, "-c", "import chainer, pkg_resources; print(chainer.__version__)"], cwd=tmp_path)
    assert imported.returncode == 0 and imported.stdout.split()[-1] == "7.8.1", imported.stderr[-3000:]

    report = tmp_path / "report.json"
    step2 = [*last[:-1], "--dry-run", "--report", str(report), f"{wheel}[{extras}]"]
    done = _run([python, "-m", "pip", "--cache-dir", cache, *step2], cwd=tmp_path, timeout=900)
    assert done.returncode == 0, f"pip {shlex.join(step2)}\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    planned = {
        i["metadata"]["name"].lower(): i["metadata"]["version"] for i in json.loads(report.read_text())["install"]
    }
    assert planned["kubetrain"] == "0.1.0" and planned["torch"] == "2.13.0", planned
    assert "chainer" not in planned, "step 2 would build Chainer again, with a setuptools it cannot build with"
    assert _version(planned.get("setuptools", "65")) < (81,), f"Chainer imports pkg_resources: {planned}"
    assert _version(planned.get("numpy", "1")) < (2,), planned
    assert {"grpcio", "protobuf", "mpi4py", "s3fs", "gcsfs"} <= set(planned), sorted(planned)
