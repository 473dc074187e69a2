"""The PIPELINE argument of `kubetrain run` and `submit`: a shipped pipeline, or a file of the user's.

`PIPELINE` is one of the shipped pipelines by name (:mod:`.catalog`), a Python source file
(`.py`) defining one or more `@dsl.pipeline` functions, or a compiled pipeline (`.yaml`/`.yml`).
A source file is imported as a module, the way `import` would (its directory first on the module
search path while it loads, as when Python runs it as a script), and nothing else is executed; its
`if __name__ == "__main__":` block does not run. Whatever its module-level code raises, a
`sys.exit()` (exit 2) and a KeyboardInterrupt (exit 5) included, ends in one line naming the file's
line. Of the pipelines it defines itself (not those it imports), one is taken, or the one
`--pipeline-func NAME` names.

Every form ends as a :class:`LoadedPipeline`: the KFP pipeline object that `kfp.local` runs, the
name its run directory gets, and the YAML that `submit` uploads.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from kubetrain.errors import InvalidInputError, JobCancelledError
from kubetrain.tooling.catalog import PIPELINES, pipeline
from kubetrain.tooling.compiling import compile_pipeline

SOURCE_SUFFIXES = (".py",)
COMPILED_SUFFIXES = (".yaml", ".yml")
# Module names given to imported user files: a prefix of ours, so they never shadow a real module.
_MODULE_PREFIX = "kubetrain_user_pipeline_"


@dataclass(frozen=True)
class LoadedPipeline:
    """A pipeline ready to run or submit."""

    name: str  # names the run directory and the uploaded file
    pipeline: Any  # the KFP GraphComponent (from Python) or YamlComponent (from YAML)
    origin: str  # the shipped pipeline's name or the file's path, for messages
    compiled_yaml: str | None = None  # the file's own text when the user gave compiled YAML
    source_dir: Path | None = None  # the .py file's directory (on sys.path while it loaded)

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", self.name):
            raise InvalidInputError(f"pipeline name: got {self.name!r}; expected letters, digits, '_', '.', '-'")

    def compile_text(self) -> str:
        """The YAML `submit` uploads: the user's compiled file as it is, or a fresh compile."""
        if self.compiled_yaml is not None:
            return self.compiled_yaml
        return compile_pipeline(self.pipeline, self.name)


def is_file_argument(argument: str) -> bool:
    """Whether PIPELINE names a file (by its suffix or a path separator) rather than a shipped pipeline."""
    return argument.endswith(SOURCE_SUFFIXES + COMPILED_SUFFIXES) or "/" in argument


def load_pipeline(argument: str, *, pipeline_func: str | None = None) -> LoadedPipeline:
    """The pipeline PIPELINE names; errors name the argument and what would work."""
    if not is_file_argument(argument):
        if pipeline_func:
            raise InvalidInputError(
                f"--pipeline-func {pipeline_func}: only for a .py file; {argument!r} is a shipped pipeline"
            )
        entry = pipeline(argument)  # names the shipped pipelines and mentions files when unknown
        return LoadedPipeline(name=entry.name, pipeline=entry.load(), origin=entry.name)
    path = Path(argument)
    if not path.is_file():
        raise InvalidInputError(
            f"pipeline: {argument}: no such file; expected a .py file with a @dsl.pipeline function, "
            f"a compiled pipeline .yaml, or one of {', '.join(PIPELINES)}"
        )
    if path.suffix in COMPILED_SUFFIXES:
        if pipeline_func:
            raise InvalidInputError(f"--pipeline-func {pipeline_func}: only for a .py file, not {argument}")
        return _from_yaml(path)
    if path.suffix not in SOURCE_SUFFIXES:
        raise InvalidInputError(f"pipeline: {argument}: expected a .py or .yaml file")
    return _from_source(path, pipeline_func)


def _yaml_error(error: yaml.YAMLError, path: Path) -> str:
    """One line for a YAML syntax error: the file, the line and column, and the problem."""
    mark = getattr(error, "problem_mark", None)
    where = f"{path}, line {mark.line + 1}, column {mark.column + 1}" if mark is not None else str(path)
    problem = getattr(error, "problem", None) or " ".join(str(error).split())
    return f"pipeline: {where}: not valid YAML ({problem})"


def _from_yaml(path: Path) -> LoadedPipeline:
    from kfp import components

    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise InvalidInputError(f"pipeline: {path}: not UTF-8 text (byte {e.start}); expected compiled YAML") from e
    except OSError as e:
        raise InvalidInputError(f"pipeline: {path}: cannot be read ({e.strerror})") from e
    try:
        loaded = components.load_component_from_text(text)
    except yaml.YAMLError as e:
        raise InvalidInputError(_yaml_error(e, path)) from e
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        # kfp's loader reports a malformed document with whichever of these it meets first.
        raise InvalidInputError(f"pipeline: {path}: not a compiled KFP pipeline ({e})") from e
    if loaded.component_spec.implementation.graph is None:
        raise InvalidInputError(
            f"pipeline: {path}: is a compiled component, not a pipeline; use it inside a @dsl.pipeline"
        )
    return LoadedPipeline(name=run_name(path.stem), pipeline=loaded, origin=str(path), compiled_yaml=text)


def run_name(stem: str) -> str:
    """A name for the run directory and the uploaded file from a file's name: `my pipeline (v2)` -> `my-pipeline-v2`."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", stem).strip("-.") or "pipeline"


def _where(error: BaseException, path: Path) -> str:
    """`path:lineno` of the file's last line the error passed through (the user's line that failed)."""
    target = path.resolve()
    lines = [f.lineno for f in traceback.extract_tb(error.__traceback__) if Path(f.filename).resolve() == target]
    return f"{path}:{lines[-1]}" if lines else str(path)


def _import(path: Path) -> ModuleType:
    """Import the file as a module of its own (as `import` would), its directory first on sys.path."""
    name = _MODULE_PREFIX + re.sub(r"\W", "_", path.stem)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise InvalidInputError(f"pipeline: {path}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    # Registered before it runs, as importlib does, so KFP and inspect can find the module by name
    # (the component sources kfp.local extracts are read through it).
    sys.modules[name] = module
    directory = str(path.resolve().parent)
    sys.path.insert(0, directory)
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:
        sys.modules.pop(name, None)
        where = f"{e.filename}:{e.lineno}" if e.filename and Path(e.filename) != path else f"{path}:{e.lineno}"
        raise InvalidInputError(f"pipeline: {where}: syntax error: {e.msg}") from e
    except ImportError as e:
        sys.modules.pop(name, None)
        raise InvalidInputError(f"pipeline: {_where(e, path)}: an import failed while loading it: {e}") from e
    except SystemExit as e:
        # Left alone, it ended kubetrain itself: exit 0 and nothing said (a script's own ending at module level).
        sys.modules.pop(name, None)
        raise InvalidInputError(
            f"pipeline: {_where(e, path)}: calls sys.exit({e.code!r}) when imported; kubetrain imports the file "
            'and runs nothing else: put the script part under `if __name__ == "__main__":`'
        ) from e
    except KeyboardInterrupt as e:
        # SIGINT (Ctrl-C), or the file raising it: a stop either way, in one line like every other stop.
        sys.modules.pop(name, None)
        raise JobCancelledError(
            f"pipeline: {_where(e, path)}: loading it was interrupted (KeyboardInterrupt); nothing ran"
        ) from e
    except Exception as e:  # the user's module-level code: whatever it raises, name it
        # (kfp itself raises TypeError/ValueError while it builds a @dsl.pipeline's graph.)
        sys.modules.pop(name, None)
        raise InvalidInputError(f"pipeline: {_where(e, path)}: loading it failed: {type(e).__name__}: {e}") from e
    finally:
        if directory in sys.path:
            sys.path.remove(directory)
    return module


def defined_pipelines(module: ModuleType) -> dict[str, Any]:
    """The `@dsl.pipeline` functions the module defines itself (not ones it imported), by name, and
    the pipelines it builds by calling a function (`user_programs = make_pipeline(dir)`)."""
    from kfp.dsl.graph_component import GraphComponent

    found = {}
    for attribute, value in vars(module).items():
        if not isinstance(value, GraphComponent):
            continue
        func = value.pipeline_func
        # A pipeline defined inside a function exists only once that function is called: a
        # module-level name holding one was built here (an imported pipeline is a module's own).
        built = "<locals>" in getattr(func, "__qualname__", "")
        if built or getattr(func, "__module__", None) == module.__name__:
            found[attribute] = value
    return found


def _from_source(path: Path, pipeline_func: str | None) -> LoadedPipeline:
    found = defined_pipelines(_import(path))
    if not found:
        raise InvalidInputError(f"pipeline: {path}: defines no @dsl.pipeline function")
    if pipeline_func is not None:
        if pipeline_func not in found:
            raise InvalidInputError(
                f"--pipeline-func {pipeline_func}: {path} defines no such pipeline; it defines {', '.join(found)}"
            )
        chosen = pipeline_func
    elif len(found) == 1:
        chosen = next(iter(found))
    else:
        raise InvalidInputError(
            f"pipeline: {path} defines {len(found)} pipelines ({', '.join(found)}); "
            "choose one with --pipeline-func NAME"
        )
    return LoadedPipeline(
        name=chosen, pipeline=found[chosen], origin=f"{path}:{chosen}", source_dir=path.resolve().parent
    )
