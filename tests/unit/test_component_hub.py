"""The Kubeflow hub's conventions, kept true by these checks on each component's folder (components/<name>/).

Every folder holds the hub's files; OWNERS names an approver; metadata.yaml follows the hub's
fields, with versions equal to the pins the e2e tier builds; the README is what a regeneration
gives (hand-written text below the marker kept); every example pipeline compiles; the component
modules import only the standard library and kfp at top level. The folders are found on disk, so
a new one is checked before the catalog knows it.
"""

from __future__ import annotations

import ast
import re
import runpy
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from kfp import compiler

from kubetrain.tooling import hub
from kubetrain.tooling.catalog import COMPONENTS, Entry

REPO = Path(__file__).resolve().parents[2]
HUB = REPO / "components"
# Each folder that holds a component.py: what the hub would check.
FOLDERS = sorted(p.name for p in HUB.iterdir() if (p / "component.py").is_file())
# What every folder holds (the hub's layout, with kubetrain's compiled YAML and its pre-2.15 copy).
FOLDER_FILES = {
    "__init__.py", "component.py", "component.yaml", "kfp-pre-2.15/component.yaml", "OWNERS", "metadata.yaml",
    "README.md", "example_pipelines.py",
}  # fmt: skip


def _meta(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((HUB / name / "metadata.yaml").read_text())
    return loaded


@pytest.mark.parametrize("name", FOLDERS)
def test_the_generated_files_are_current(name: str) -> None:
    stale = hub.stale_hub([name], REPO)
    assert not stale, f"{[str(p) for p in stale]}: run `kubetrain compile` (make golden) and commit"


def test_every_component_has_its_folder_and_nothing_else_does() -> None:
    assert sorted(COMPONENTS) == FOLDERS
    top = {p.name for p in HUB.iterdir() if p.name != "__pycache__"}
    assert top == {"__init__.py", "_shared.py", *COMPONENTS}, "components/: the package, _shared.py and the folders"
    for name in FOLDERS:
        held = {p.relative_to(HUB / name).as_posix() for p in (HUB / name).rglob("*") if p.is_file()}
        assert held >= FOLDER_FILES, f"components/{name}/ lacks {sorted(FOLDER_FILES - held)}"
        assert any(p.startswith("tests/test_") for p in held), f"components/{name}/ has no tests/ of its own"


@pytest.mark.parametrize("name", FOLDERS)
def test_owners_names_an_approver(name: str) -> None:
    owners = yaml.safe_load((HUB / name / "OWNERS").read_text())
    assert owners["approvers"] and all(isinstance(a, str) and a for a in owners["approvers"]), owners


@pytest.mark.parametrize("name", FOLDERS)
def test_metadata_has_the_hubs_fields(name: str) -> None:
    meta = _meta(name)
    assert meta["name"] == name and re.fullmatch(r"[a-z][a-z0-9_]*", name)
    assert meta["tier"] in ("core", "third_party")
    assert meta["stability"] in ("alpha", "beta", "stable")
    assert "lastVerified" in meta  # the e2e tier's to set
    kubeflow = meta["dependencies"]["kubeflow"]
    assert kubeflow[0]["name"] == "Pipelines"
    for dep in kubeflow + meta["dependencies"]["external_services"]:
        assert set(dep) == {"name", "version"} and dep["version"], dep
    assert meta["tags"] and all(isinstance(t, str) for t in meta["tags"])
    assert meta["links"]["documentation"].endswith(f"components/{name}/README.md")


def test_versions_are_the_pins_not_typed_again() -> None:
    kfp_pins = (REPO / "tools/kfp/pins.env").read_text()
    versions = {d["name"]: d["version"] for d in _meta("pytorch_train")["dependencies"]["kubeflow"]}
    assert f"KFP_VERSION={versions['Pipelines']}\n" in kfp_pins
    go_mod = (REPO / "tools/controlplane/training-operator/go.mod").read_text()
    assert f"github.com/kubeflow/training-operator {versions['Training Operator']}" in go_mod
    mpi = {d["name"]: d["version"] for d in _meta("chainermn_train")["dependencies"]["kubeflow"]}
    assert (
        f"github.com/kubeflow/mpi-operator {mpi['MPI Operator']}"
        in (REPO / "tools/controlplane/k8s/go.mod").read_text()
    )


def test_a_regeneration_keeps_last_verified_and_the_hand_written_readme_part(tmp_path: Path) -> None:
    for part in ("tools", "pyproject.toml"):
        (tmp_path / part).symlink_to(REPO / part)
    folder = tmp_path / "components" / "pytorch_train"
    folder.mkdir(parents=True)
    (folder / "example_pipelines.py").write_text((HUB / "pytorch_train" / "example_pipelines.py").read_text())
    (folder / "metadata.yaml").write_text("name: pytorch_train\nlastVerified: 2026-11-20T10:00:00Z\n")
    (folder / "README.md").write_text(f"old generated text\n{hub.CUSTOM_MARKER}\nNotes from the team.\n")
    hub.write_hub(["pytorch_train"], tmp_path)
    assert _last_verified(folder / "metadata.yaml") == "2026-11-20T10:00:00Z"
    readme = (folder / "README.md").read_text()
    assert readme.endswith(f"{hub.CUSTOM_MARKER}\nNotes from the team.\n") and "old generated text" not in readme
    assert hub.stale_hub(["pytorch_train"], tmp_path) == []
    (folder / "README.md").write_text(readme.replace("| `epochs` |", "| `epochz` |"))
    assert hub.stale_hub(["pytorch_train"], tmp_path) == [folder / "README.md"]


def _last_verified(path: Path) -> object:
    raw = yaml.safe_load(path.read_text())["lastVerified"]
    return raw.strftime("%Y-%m-%dT%H:%M:%SZ") if hasattr(raw, "strftime") else raw


@pytest.mark.parametrize("name", FOLDERS)
def test_the_readme_lists_every_input_and_output(name: str) -> None:
    readme = (HUB / name / "README.md").read_text()
    spec = Entry("component", name).load().component_spec
    for io in (*(spec.inputs or {}), *(spec.outputs or {})):
        assert f"| `{io}` |" in readme, io
    assert (HUB / name / "example_pipelines.py").read_text().rstrip() in readme


@pytest.mark.parametrize("name", FOLDERS)
def test_the_example_pipelines_compile(name: str, tmp_path: Path) -> None:
    from kfp.dsl.graph_component import GraphComponent

    defined = runpy.run_path(str(HUB / name / "example_pipelines.py"))
    pipelines = [v for v in defined.values() if isinstance(v, GraphComponent)]
    assert pipelines, f"{name}: example_pipelines.py defines no @dsl.pipeline"
    for pipeline in pipelines:
        out = tmp_path / f"{pipeline.name}.yaml"
        compiler.Compiler().compile(pipeline, str(out))
        tasks = next(iter(yaml.safe_load_all(out.read_text())))["components"]
        assert any(name.replace("_", "-") in key for key in tasks), (name, list(tasks))


# The hub's import guard: top-level imports of component modules are the standard library and kfp;
# the sibling _shared (what they declare alike) adds kubetrain.images, itself standard library only;
# a folder's __init__.py exports its component.
ALLOWED = {
    "components/_shared.py": {"kubetrain.images"},
    "src/kubetrain/images.py": {"kubetrain", "kubetrain.errors"},
    **{f"components/{n}/__init__.py": {f"kubetrain.components.{n}.component"} for n in FOLDERS},
}


def _top_level_imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


@pytest.mark.parametrize("module", [*(f"components/{n}/component.py" for n in FOLDERS), *ALLOWED])
def test_component_modules_import_only_the_standard_library_and_kfp(module: str) -> None:
    allowed = ALLOWED.get(module, {"kubetrain.components._shared"})
    for name in _top_level_imports(REPO / module):
        top = name.split(".")[0]
        assert top in sys.stdlib_module_names or top == "kfp" or name in allowed, f"{module}: imports {name}"


def test_the_components_a_compiled_pipeline_runs_are_named_as_the_catalog_names_them() -> None:
    assert hub.components_of_package(REPO / "pipelines" / "mnist_pytorch.yaml") == {"download_dataset", "pytorch_train"}
    assert hub.components_of_package(REPO / "pipelines" / "compare_frameworks.yaml") == set(COMPONENTS)


def test_the_e2e_tier_records_last_verified_only_for_components_no_failing_scenario_ran(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.cluster import verified

    monkeypatch.setattr(verified, "_RAN", {}, raising=True)
    monkeypatch.setattr(verified, "_OUTCOME", {}, raising=True)
    for scenario, package, passed in [
        ("a.py::pytorch", "mnist_pytorch.yaml", True),
        ("b.py::ps", "mnist_ps.yaml", False),
    ]:
        monkeypatch.setenv("PYTEST_CURRENT_TEST", f"{scenario} (call)")
        verified.note_run(REPO / "pipelines" / package)
        verified.note_outcome(scenario, passed)
    # download_dataset ran in a failing scenario too: not verified until every run of it passes.
    assert verified.verified() == {"pytorch_train"}

    folder = tmp_path / "components" / "pytorch_train"
    folder.mkdir(parents=True)
    (folder / "example_pipelines.py").write_text((HUB / "pytorch_train" / "example_pipelines.py").read_text())
    for part in ("tools", "pyproject.toml"):
        (tmp_path / part).symlink_to(REPO / part)
    (written,) = hub.record_verified({"pytorch_train"}, "2026-11-27T03:00:00Z", tmp_path)
    assert _last_verified(written) == "2026-11-27T03:00:00Z"
    hub.write_hub(["pytorch_train"], tmp_path)  # a regeneration keeps it
    assert _last_verified(written) == "2026-11-27T03:00:00Z"


def test_a_component_one_e2e_session_verified_and_the_other_saw_fail_is_not_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # make e2e's two pytest sessions each save their notes; the stamps come from both together.
    from tests.cluster import verified

    sessions = [
        [("kfp.py::demo", "compare_frameworks.yaml", True)],
        [("terminate.py::t", "mnist_pytorch.yaml", False), ("ps.py::t", "mnist_ps.yaml", True)],
    ]
    for pid, session in enumerate(sessions):
        monkeypatch.setattr(verified, "_RAN", {})
        monkeypatch.setattr(verified, "_OUTCOME", {})
        monkeypatch.setattr("os.getpid", lambda pid=pid: pid)
        for scenario, package, passed in session:
            monkeypatch.setenv("PYTEST_CURRENT_TEST", f"{scenario} (call)")
            verified.note_run(REPO / "pipelines" / package)
            verified.note_outcome(scenario, passed)
        verified.save(tmp_path)

    monkeypatch.setattr(verified, "_RAN", {})
    monkeypatch.setattr(verified, "_OUTCOME", {})
    assert verified.load(tmp_path) == 2
    # pytorch_train and download_dataset passed in the demo but failed in the other session.
    assert verified.verified() == {"chainermn_train", "ps_train", "compare_summary"}


def test_runs_a_module_fixture_started_count_against_every_test_of_its_module(monkeypatch: pytest.MonkeyPatch) -> None:
    # test_kfp_terminate starts its four runs in threads while pytest names its first test; its
    # last test failed in a cold run, and pytorch_train was stamped verified all the same.
    from tests.cluster import verified

    monkeypatch.setattr(verified, "_RAN", {})
    monkeypatch.setattr(verified, "_OUTCOME", {})
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "tests/cluster/test_kfp_terminate.py::test_t[before-0] (setup)")
    verified.note_run(REPO / "pipelines" / "mnist_pytorch.yaml")
    verified.note_outcome("tests/cluster/test_kfp_terminate.py::test_t[before-0]", True)
    verified.note_outcome("tests/cluster/test_kfp_terminate.py::test_t[training-0]", False)
    assert verified.verified() == set()
