"""The import layering the README describes: a lower layer never imports a higher one.

Read from the source (every `import` and `from ... import`, function-local ones included), so a
lazy import inside a function counts the same as one at the top. Within one layer, packages do
not import each other; a package may import itself freely. No module reaches another through
`importlib` or `__import__`, which would hide an import from this test.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

import kubetrain

ROOT = Path(kubetrain.__file__).resolve().parent

# Low to high. A module of layer i may import the packages of layers < i and its own package.
LAYERS: list[tuple[str, ...]] = [
    ("errors", "names", "fileio"),
    ("specs", "data"),
    ("manifests", "train"),
    ("status", "ps"),
    ("presets",),
    ("backends",),
    ("launcher",),
    ("kfp_runtime",),
    ("components",),
    ("pipelines",),
    ("tooling",),
    ("commands",),
    ("cli",),
    ("__main__",),
]
LAYER_OF = {package: i for i, packages in enumerate(LAYERS) for package in packages}


def _files() -> list[tuple[Path, str]]:
    """(module, top-level package) for every module, components/ and pipelines/ (symlinked in) included."""
    files: list[tuple[Path, str]] = []
    for directory, subdirs, names in os.walk(ROOT):  # does not follow the two symlinks
        subdirs[:] = [d for d in subdirs if d not in ("proto", "__pycache__")]
        for name in names:
            if name.endswith(".py"):
                path = Path(directory, name)
                top = path.relative_to(ROOT).parts[0].removesuffix(".py")
                if top != "__init__":
                    files.append((path, top))
    for linked in ("components", "pipelines"):
        files += [(p, linked) for p in sorted((ROOT / linked).resolve().glob("*.py"))]
    return sorted(files)


def _imported_packages(tree: ast.AST) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
            if node.module == "kubetrain":
                names = [f"kubetrain.{alias.name}" for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "kubetrain" and len(parts) > 1 and not parts[1].startswith("__version"):
                found.add(parts[1])
    return found


@pytest.mark.parametrize(("path", "package"), _files(), ids=lambda v: str(v).rsplit("/src/", 1)[-1])
def test_no_module_imports_a_higher_layer(path: Path, package: str) -> None:
    assert package in LAYER_OF, f"{path}: package {package!r} has no layer; add it to LAYERS (and the README)"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    mine = LAYER_OF[package]
    for imported in sorted(_imported_packages(tree) - {package}):
        assert imported in LAYER_OF, f"{path}: imports kubetrain.{imported}, which has no layer"
        assert LAYER_OF[imported] < mine, (
            f"{path} (layer {package}) imports kubetrain.{imported}, which is not below it: "
            f"{' < '.join('/'.join(layer) for layer in LAYERS)}"
        )


@pytest.mark.parametrize(("path", "package"), _files(), ids=lambda v: str(v).rsplit("/src/", 1)[-1])
def test_no_import_detours(path: Path, package: str) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            module = node.module if isinstance(node, ast.ImportFrom) else None
            names = [a.name for a in node.names]
            assert "importlib" not in (module or "") and not any(n.startswith("importlib") for n in names), (
                f"{path}:{node.lineno}: importlib hides imports from the layering check; import directly"
            )
        if isinstance(node, ast.Name) and node.id == "__import__":
            pytest.fail(f"{path}:{node.lineno}: __import__ hides imports from the layering check")


def test_the_layers_cover_every_package() -> None:
    packages = {p.name.removesuffix(".py") for p in ROOT.iterdir() if p.name != "__pycache__"}
    packages -= {"__init__", "py.typed", "version"}
    assert packages - set(LAYER_OF) == set(), "every top-level package or module needs a layer"
