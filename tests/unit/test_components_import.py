"""Components import by name, as every KFP component library's do; the module paths documented before keep working.

`from kubetrain.components import pytorch_train` gave the module once, and the first call failed
with ``TypeError: 'module' object is not callable``. The package now exports each component under
its folder's name, which hides the folder's package from attribute access; every import statement
(by name, the folder, the folder's component.py) must give the same component, and the folder
stays reachable through `sys.modules`.
"""

# No `from __future__ import annotations`: kfp reads the pipeline's annotations as types.

import importlib
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from kfp import compiler, dsl

import kubetrain.components
from kubetrain.tooling.catalog import COMPONENTS, Entry

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", COMPONENTS)
def test_the_package_exports_the_component_not_the_module(name: str) -> None:
    component = getattr(kubetrain.components, name)
    assert hasattr(component, "component_spec"), f"kubetrain.components.{name} is {component!r}, not a component"
    assert callable(component)
    assert name in kubetrain.components.__all__


@pytest.mark.parametrize("name", COMPONENTS)
def test_the_folder_and_module_forms_give_the_same_component(name: str) -> None:
    folder = importlib.import_module(f"kubetrain.components.{name}")
    assert folder is sys.modules[f"kubetrain.components.{name}"]
    module = importlib.import_module(f"kubetrain.components.{name}.component")
    assert getattr(folder, name) is getattr(module, name) is getattr(kubetrain.components, name)
    assert Entry("component", name).source == Path(str(module.__file__)).resolve()
    assert Path(str(folder.__file__)).resolve().parent == Entry("component", name).source.parent


def test_both_import_statements_in_a_fresh_interpreter() -> None:
    """Either import first, in a new process: the order must not decide what a name means."""
    code = textwrap.dedent(
        """
        from kubetrain.components.pytorch_train import pytorch_train as by_module
        from kubetrain.components import download_dataset, pytorch_train, chainermn_train, ps_train, compare_summary
        assert by_module is pytorch_train, (by_module, pytorch_train)
        for c in (download_dataset, pytorch_train, chainermn_train, ps_train, compare_summary):
            assert hasattr(c, "component_spec"), c
        from kubetrain.components.download_dataset import download_dataset as again
        from kubetrain.components.ps_train.component import ps_train as by_file
        assert again is download_dataset and by_file is ps_train
        print("ok")
        """
    )
    env_path = f"{REPO / 'src'}:{REPO}"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={"PYTHONPATH": env_path}, check=False
    )
    assert (done.returncode, done.stdout.strip()) == (0, "ok"), done.stderr


def test_a_pipeline_of_components_imported_by_name_compiles(tmp_path: Path) -> None:
    from kubetrain.components import download_dataset, pytorch_train

    @dsl.pipeline(name="by-name")
    def by_name() -> None:
        data = download_dataset(source="builtin:digits")
        pytorch_train(dataset=data.outputs["dataset"], epochs=1)  # no run_id/task_id/task_name to wire

    out = tmp_path / "p.yaml"
    compiler.Compiler().compile(by_name, str(out))
    spec = next(iter(yaml.safe_load_all(out.read_text())))
    assert set(spec["root"]["dag"]["tasks"]) == {"download-dataset", "pytorch-train"}


def test_compiled_yaml_names_every_components_and_pipelines_yaml() -> None:
    import kubetrain.pipelines
    from kubetrain.tooling.catalog import PIPELINES
    from kubetrain.tooling.legacy import LEGACY_DIR, legacy_path

    assert kubetrain.components.PRE_2_15 == LEGACY_DIR
    for package, names, kind in ((kubetrain.components, COMPONENTS, "component"),
                                 (kubetrain.pipelines, PIPELINES, "pipeline")):  # fmt: skip
        current, old = package.compiled_yaml(), package.compiled_yaml(kfp_pre_2_15=True)
        assert sorted(current) == sorted(old) == sorted(names)
        for name in names:
            assert current[name].resolve() == Entry(kind, name).yaml_path  # type: ignore[arg-type]
            assert old[name].resolve() == legacy_path(Entry(kind, name).yaml_path)  # type: ignore[arg-type]
