"""The import layering docs/architecture.md describes: a lower layer never imports a higher one.

Read from the source (every `import` and `from ... import`, function-local ones included), so a
lazy import inside a function counts the same as one at the top. Relative imports are resolved
against the importing module's package and checked like absolute ones; one that climbs above
`kubetrain` fails. Within one layer, packages do not import each other; a package may import
itself freely. Inside `ps/` the sub-packages have an order of their own (PS_IMPORTS). No module
reaches another through `importlib` or `__import__`, which would hide an import from this test.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

import kubetrain

ROOT = Path(kubetrain.__file__).resolve().parent
ARCHITECTURE = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"

# Low to high. A module of layer i may import the packages of layers < i and its own package.
LAYERS: list[tuple[str, ...]] = [
    ("errors", "names", "fileio", "urls"),
    ("specs", "data", "images"),
    ("manifests", "train"),
    ("status", "ps"),
    ("presets",),
    ("backends",),
    ("launcher", "reaper", "elastic"),
    ("kfp_runtime",),
    ("components",),
    ("pipelines",),
    ("tooling",),
    ("commands",),
    ("cli",),
    ("__main__",),
]
LAYER_OF = {package: i for i, packages in enumerate(LAYERS) for package in packages}

# Inside ps/: the sub-packages each one may import besides itself. The processes (master, server,
# worker) share only common/ and proto/; harness/ runs servers and workers in one process.
PS_IMPORTS: dict[str, frozenset[str]] = {
    "proto": frozenset(),
    "common": frozenset({"proto"}),
    "master": frozenset({"common", "proto"}),
    "server": frozenset({"common", "proto"}),
    "worker": frozenset({"common", "proto"}),
    "harness": frozenset({"common", "proto", "server", "worker"}),
}

Module = tuple[str, ...]  # a module's dotted name below kubetrain: ("ps", "master", "taskbook")

# The modules that may use importlib: they load a user's code known only at run time (a model by
# its module path; a pipeline by its file), never a kubetrain module, so they hide nothing here.
IMPORTLIB_USERS: frozenset[Module] = frozenset({("ps", "worker", "user_model"), ("tooling", "sources")})


@dataclass(frozen=True)
class Source:
    """One module of the tree: its file and its name."""

    path: Path
    module: Module

    @property
    def package(self) -> Module:
        """The package relative imports start from (the module's own for an `__init__.py`)."""
        return self.module if self.path.name == "__init__.py" else self.module[:-1]

    def __str__(self) -> str:
        return ".".join(("kubetrain", *self.module))


def _sources() -> list[Source]:
    """Every module, components/ and pipelines/ (symlinked in) included; generated protobuf code not."""
    found: list[Source] = []
    for directory, subdirs, names in os.walk(ROOT):  # does not follow the two symlinks
        subdirs[:] = [d for d in subdirs if d != "__pycache__"]
        for name in names:
            if name.endswith(".py") and "_pb2" not in name:
                path = Path(directory, name)
                parts = path.relative_to(ROOT).with_suffix("").parts
                if parts != ("__init__",):  # kubetrain/__init__.py holds the version and nothing else
                    found.append(Source(path, parts[:-1] if parts[-1] == "__init__" else parts))
    for linked in ("components", "pipelines"):
        top = (ROOT / linked).resolve()
        for path in sorted(top.rglob("*.py")):
            parts = path.relative_to(top).with_suffix("").parts
            if "tests" in parts or "__pycache__" in parts:
                continue  # a component's own tests (components/<name>/tests/): the checkout's, not the package's
            found.append(Source(path, (linked, *parts[:-1]) if parts[-1] == "__init__" else (linked, *parts)))
    return sorted(found, key=str)


def _is_module(name: Module) -> bool:
    path = ROOT.joinpath(*name) if name else ROOT
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _imported_modules(source: Source, tree: ast.AST) -> list[tuple[int, Module]]:
    """(line, module) for every kubetrain module the source imports, relative imports resolved."""
    found: list[tuple[int, Module]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = tuple(alias.name.split("."))
                if parts[0] == "kubetrain":
                    found.append((node.lineno, parts[1:]))
            continue
        if not isinstance(node, ast.ImportFrom):
            continue
        named = tuple(node.module.split(".")) if node.module else ()
        if node.level:
            package = source.package
            climb = node.level - 1
            if climb > len(package):
                pytest.fail(f"{source.path}:{node.lineno}: relative import climbs above the kubetrain package")
            base = package[: len(package) - climb] + named
        elif named[:1] == ("kubetrain",):
            base = named[1:]
        else:
            continue
        for alias in node.names:
            # `from X import a` imports the module X.a when there is one, else a name of X.
            sub = (*base, alias.name)
            found.append((node.lineno, sub if _is_module(sub) else base))
    return [(line, name) for line, name in found if name and not name[0].startswith("__version")]


def _ps_sub(module: Module) -> str:
    return module[1] if len(module) > 1 else ""


@pytest.mark.parametrize("source", _sources(), ids=str)
def test_no_module_imports_a_higher_layer(source: Source) -> None:
    package = source.module[0]
    assert package in LAYER_OF, (
        f"{source.path}: package {package!r} has no layer; add it to LAYERS (and docs/architecture.md)"
    )
    mine = LAYER_OF[package]
    tree = ast.parse(source.path.read_text(encoding="utf-8"))
    for line, imported in _imported_modules(source, tree):
        where = f"{source.path}:{line} (layer {package}) imports kubetrain.{'.'.join(imported)}"
        top = imported[0]
        if top == package:
            continue
        assert top in LAYER_OF, f"{where}, which has no layer"
        assert LAYER_OF[top] < mine, (
            f"{where}, which is not below it: {' < '.join('/'.join(layer) for layer in LAYERS)}"
        )


@pytest.mark.parametrize("source", [s for s in _sources() if s.module[0] == "ps"], ids=str)
def test_ps_sub_packages_keep_their_order(source: Source) -> None:
    mine = _ps_sub(source.module)
    if not mine:
        return  # ps/__init__.py: a docstring
    assert mine in PS_IMPORTS, f"{source.path}: ps/{mine}/ has no entry in PS_IMPORTS (and docs/architecture.md)"
    tree = ast.parse(source.path.read_text(encoding="utf-8"))
    for line, imported in _imported_modules(source, tree):
        theirs = _ps_sub(imported) if imported[0] == "ps" else None
        if theirs is None or theirs == mine:
            continue
        assert theirs in PS_IMPORTS[mine], (
            f"{source.path}:{line} (ps/{mine}) imports kubetrain.{'.'.join(imported)}; ps/{mine} may import only "
            f"ps/{', ps/'.join(sorted(PS_IMPORTS[mine])) or '(nothing else)'}"
        )


@pytest.mark.parametrize("source", _sources(), ids=str)
def test_no_import_detours(source: Source) -> None:
    tree = ast.parse(source.path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and source.module not in IMPORTLIB_USERS:
            module = node.module if isinstance(node, ast.ImportFrom) else None
            names = [a.name for a in node.names]
            assert "importlib" not in (module or "") and not any(n.startswith("importlib") for n in names), (
                f"{source.path}:{node.lineno}: importlib hides imports from the layering check; import directly"
            )
        if isinstance(node, ast.Name) and node.id == "__import__":
            pytest.fail(f"{source.path}:{node.lineno}: __import__ hides imports from the layering check")


def _components_imported(source: Source, tree: ast.AST) -> list[tuple[int, str]]:
    """(line, dotted name) of every module of kubetrain.components the source names in an import."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level:
            base = source.package[: len(source.package) - node.level + 1]
            names = [".".join(("kubetrain", *base, *(node.module.split(".") if node.module else ())))]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        else:
            continue
        found += [
            (node.lineno, n) for n in names if n == "kubetrain.components" or n.startswith("kubetrain.components.")
        ]
    return found


def _component_imports_allowed(module: Module) -> tuple[str, ...]:
    """What kubetrain.components a module may name in an import: a prefix each, or an exact name."""
    package = "kubetrain.components"
    if module == ("components",):  # the package: each folder's package, which exports its component
        return tuple(f"{package}.{p.name}" for p in (ROOT / "components").iterdir() if (p / "component.py").is_file())
    if module == ("components", "_shared"):
        return ()
    if module[0] == "components":  # a folder: itself and what they declare alike; its examples, the package
        folder = f"{package}.{module[1]}"
        return (folder, f"{folder}.", f"{package}._shared") + ((package,) if module[-1] == "example_pipelines" else ())
    return (package,)  # everything else takes a component by name, as a user does


@pytest.mark.parametrize("source", _sources(), ids=str)
def test_components_are_taken_by_name_and_their_folders_stand_alone(source: Source) -> None:
    """One folder per component (the hub's layout): a folder imports no other folder, and everything outside
    the components (the shipped pipelines above all) imports a component by name, never its module."""
    allowed = _component_imports_allowed(source.module)
    tree = ast.parse(source.path.read_text(encoding="utf-8"))
    for line, name in _components_imported(source, tree):
        ok = any(name == a or (a.endswith(".") and name.startswith(a)) for a in allowed)
        assert ok, (
            f"{source.path}:{line} imports {name}; outside a component's folder, import a component by name "
            "(from kubetrain.components import pytorch_train), and a folder imports only itself and _shared"
        )


def test_the_layers_cover_every_package() -> None:
    packages = {p.name.removesuffix(".py") for p in ROOT.iterdir() if p.name != "__pycache__"}
    packages -= {"__init__", "py.typed", "version"}
    assert packages - set(LAYER_OF) == set(), "every top-level package or module needs a layer"
    ps = {p.name for p in (ROOT / "ps").iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert ps == set(PS_IMPORTS), "every ps/ sub-package needs an entry in PS_IMPORTS"


def _architecture_tree() -> list[tuple[int, tuple[str, ...]]]:
    """(indent, names) per line of docs/architecture.md's tree of src/kubetrain/ (names without / and .py)."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    start = text.index("```\n", text.index("The tree under `src/kubetrain/`")) + 4
    rows = []
    for line in text[start : text.index("```", start)].splitlines():
        names = line[:36].split()  # the names' column; the description starts at column 36
        rows.append((len(line) - len(line.lstrip()), tuple(n.removesuffix("/").removesuffix(".py") for n in names)))
    return rows


def test_the_architecture_tree_shows_these_layers() -> None:
    rows = _architecture_tree()
    assert [names for indent, names in rows if indent == 0] == LAYERS, (
        "docs/architecture.md's tree: one line per layer, as LAYERS"
    )
    first = next(i for i, (_, names) in enumerate(rows) if "ps" in names) + 1
    ps_rows = [names for _, names in rows[first:]]
    ps_rows = ps_rows[: next(i for i, (indent, _) in enumerate(rows[first:]) if indent == 0)]
    assert {p for names in ps_rows for p in names} == set(PS_IMPORTS), (
        "docs/architecture.md's tree lists every ps/ sub-package"
    )
    for i, names in enumerate(ps_rows):
        below = {p for lower in ps_rows[:i] for p in lower}
        for package in names:
            assert PS_IMPORTS[package] <= below, f"docs/architecture.md's tree puts ps/{package} below what it imports"


def test_relative_imports_are_resolved() -> None:
    """The resolution itself, on made-up sources (so the rules above really see relative imports)."""
    specs = Source(ROOT / "specs" / "jobs.py", ("specs", "jobs"))
    tree = ast.parse("from ..launcher import options\nfrom . import common\nfrom .. import errors\n")
    assert [m for _, m in _imported_modules(specs, tree)] == [
        ("launcher", "options"),
        ("specs", "common"),
        ("errors",),
    ]
    init = Source(ROOT / "ps" / "common" / "__init__.py", ("ps", "common"))
    assert [m for _, m in _imported_modules(init, ast.parse("from ..master import config\n"))] == [
        ("ps", "master", "config")
    ]
    top = Source(ROOT / "cli.py", ("cli",))
    with pytest.raises(pytest.fail.Exception, match="climbs above"):
        _imported_modules(top, ast.parse("from .. import anything\n"))


def _import_graph() -> dict[Module, set[Module]]:
    """Module -> the kubetrain modules it imports (TYPE_CHECKING and function-local imports included)."""
    graph: dict[Module, set[Module]] = {}
    for source in _sources():
        tree = ast.parse(source.path.read_text(encoding="utf-8"))
        graph[source.module] = {m for _, m in _imported_modules(source, tree) if m != source.module}
    return graph


def _cycle_through(graph: dict[Module, set[Module]], start: Module) -> list[Module] | None:
    """The shortest import path from `start` back to itself, if any (breadth first)."""
    paths: dict[Module, list[Module]] = {m: [start, m] for m in graph.get(start, ())}
    frontier = list(paths)
    while frontier:
        nxt: list[Module] = []
        for module in frontier:
            if module == start:
                return paths[module]
            for m in graph.get(module, ()):
                if m not in paths:
                    paths[m] = [*paths[module], m]
                    nxt.append(m)
        frontier = nxt
    return None


# Cycles known and not yet removed (each a module set); the test fails on any other.
KNOWN_CYCLES: frozenset[frozenset[Module]] = frozenset()


def test_no_import_cycles() -> None:
    """No module reaches itself through imports, not even one under TYPE_CHECKING: two modules that
    import each other are one module's job split in two, each reaching into the other's state."""
    graph = _import_graph()
    cycles = [c for s in graph if (c := _cycle_through(graph, s)) is not None and frozenset(c) not in KNOWN_CYCLES]
    assert not cycles, f"import cycles: {sorted(' -> '.join('.'.join(m) for m in c) for c in cycles)}"
