"""Lint images/Dockerfile and tie every image reference to the one place that defines it (presets).

Checks what breaks builds or clusters quietly: floating base tags, images that run as root
(the training pods use the "restricted" Pod Security Standard), COPY sources that do not exist
in the build context, a build script whose tags differ from what the compiled YAML pulls. An image
is what images/build.sh builds for it: a stage of images/Dockerfile (with the stages it stands
on) and the build arguments build.sh passes, read from `build.sh --dry-run`.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from kubetrain import __version__
from kubetrain.presets import IMAGE_NAMES, IMAGE_REGISTRY, LAUNCHER_IMAGE, image_ref
from kubetrain.tooling.catalog import Entry, entries

REPO = Path(__file__).resolve().parents[2]
IMAGES = REPO / "images"
DOCKERFILE = IMAGES / "Dockerfile"
# A pinned tag starts with a version number (3.11.9-slim-bookworm, 22.04); "latest" never is.
_PINNED_TAG = re.compile(r"^\d+(\.\d+)+([-.][A-Za-z0-9._-]+)?$")


@dataclass
class Stage:
    """One FROM … block of a Dockerfile."""

    base: str
    alias: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)


def parse_dockerfile(text: str) -> list[Stage]:
    """The stages of a Dockerfile with their instructions (continuations joined, comments dropped)."""
    return _parse(text)[1]


def _parse(text: str) -> tuple[dict[str, str], list[Stage]]:
    """The Dockerfile's header arguments (`ARG NAME=default` before the first FROM) and its stages."""
    logical: list[str] = []
    current = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        logical.append(current + line)
        current = ""
    stages: list[Stage] = []
    global_args: dict[str, str] = {}  # `ARG NAME=default` before the first FROM, usable in FROM lines
    for line in logical:
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "ARG" and not stages:
            name, _, default = rest.strip().partition("=")
            global_args[name] = default
        elif keyword == "FROM":
            words = [w for w in rest.split() if not w.startswith("--")]
            alias = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
            base = re.sub(r"\$\{?(\w+)\}?", lambda m: global_args.get(m.group(1), m.group(0)), words[0])
            stages.append(Stage(base=base, alias=alias))
        elif stages:
            stages[-1].instructions.append((keyword, rest.strip()))
    return global_args, stages


def copy_sources(rest: str) -> list[str] | None:
    """The source paths of a COPY instruction; None when it copies from another stage."""
    words = rest.split()
    if any(w.startswith("--from=") for w in words):
        return None
    args = [w for w in words if not w.startswith("--")]
    return args[:-1]


@dataclass(frozen=True)
class ImageBuild:
    """What images/build.sh builds for one image: a stage of images/Dockerfile and its build arguments."""

    target: str
    build_args: dict[str, str]


def image_builds(env: dict[str, str] | None = None) -> dict[str, ImageBuild]:
    """Each image's build, as `images/build.sh --dry-run` prints it (with `env` over this environment)."""
    import os

    out = subprocess.run([str(IMAGES / "build.sh"), "--dry-run"], capture_output=True, text=True, check=True,
                         timeout=60, env={**os.environ, **(env or {})}).stdout  # fmt: skip
    builds: dict[str, ImageBuild] = {}
    for line in out.splitlines():
        words = line.split()
        if "-f" not in words:
            continue
        assert words[words.index("-f") + 1] == str(DOCKERFILE), line
        name = words[words.index("-t") + 1].rsplit("/", 1)[1].split(":")[0]
        args = dict(words[i + 1].split("=", 1) for i, w in enumerate(words) if w == "--build-arg")
        builds[name] = ImageBuild(target=words[words.index("--target") + 1], build_args=args)
    return builds


def image_stages(name: str) -> list[Stage]:
    """The stages image `name` is built from, its base image's first: its target and what it stands on."""
    stages = {stage.alias: stage for stage in parse_dockerfile(DOCKERFILE.read_text())}
    chain = [stages[image_builds()[name].target]]
    while chain[0].base in stages:
        chain.insert(0, stages[chain[0].base])
    return chain


def image_instructions(name: str) -> list[tuple[str, str]]:
    """Every instruction that makes image `name`, in order."""
    return [instruction for stage in image_stages(name) for instruction in stage.instructions]


def test_every_preset_image_is_a_stage_of_the_dockerfile() -> None:
    builds = image_builds()
    assert sorted(builds) == sorted(IMAGE_NAMES)
    aliases = {stage.alias for stage in parse_dockerfile(DOCKERFILE.read_text())}
    for name, build in builds.items():
        assert build.target in aliases, f"presets name image {name!r} but {DOCKERFILE} has no stage {build.target!r}"


@pytest.mark.parametrize("name", IMAGE_NAMES)
def test_every_image_stands_on_the_one_base_stage(name: str) -> None:
    # What the images share (the pinned constraints, the environment) is written once.
    assert "base" in [stage.alias for stage in image_stages(name)]


def test_base_images_are_pinned() -> None:
    stages = parse_dockerfile(DOCKERFILE.read_text())
    assert stages, "no FROM"
    aliases = {s.alias for s in stages if s.alias}
    for stage in stages:
        if stage.base in aliases:
            continue
        image, sep, tag = stage.base.rpartition(":")
        assert sep and "/" not in tag, f"base {stage.base!r} has no tag"
        assert _PINNED_TAG.match(tag), f"base {stage.base!r} is not pinned to a version tag"
        assert image, stage.base


@pytest.mark.parametrize("name", IMAGE_NAMES)
def test_every_image_runs_as_a_non_root_user(name: str) -> None:
    users = [rest for keyword, rest in image_instructions(name) if keyword == "USER"]
    assert users, f"{name}: no USER (it would run as root)"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0"), f"{name}: final USER is {users[-1]!r}"


def _copies() -> list[tuple[str, str]]:
    """(instruction, source) of every COPY and ADD from the build context."""
    return [
        (keyword, source)
        for stage in parse_dockerfile(DOCKERFILE.read_text())
        for keyword, rest in stage.instructions
        if keyword in ("COPY", "ADD")
        for source in copy_sources(rest) or []
    ]


def test_every_copy_source_exists_in_the_build_context() -> None:
    # images/build.sh builds with the repository root as context.
    for keyword, source in _copies():
        matches = list(REPO.glob(source.rstrip("/"))) if any(c in source for c in "*?[") else []
        assert matches or (REPO / source).exists(), f"{keyword} source {source!r} not in {REPO}"


def test_the_build_context_holds_what_the_dockerfile_copies_and_nothing_else() -> None:
    # BuildKit reads <Dockerfile>.dockerignore: everything is left out but what a COPY names.
    lines = [line.strip() for line in (IMAGES / "Dockerfile.dockerignore").read_text().splitlines()]
    assert "*" in lines
    kept = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    assert kept == {source.rstrip("/") for _, source in _copies()}


def test_a_base_given_as_a_build_argument_is_checked_by_its_default() -> None:
    # images/build.sh --base local overrides BASE_IMAGE; the default is what a user's docker pulls.
    stages = parse_dockerfile("ARG BASE_IMAGE=python:latest\nFROM ${BASE_IMAGE} AS wheel\nFROM $BASE_IMAGE\n")
    assert [s.base for s in stages] == ["python:latest", "python:latest"]
    assert "ARG BASE_IMAGE=python:3.11.9-slim-bookworm" in DOCKERFILE.read_text()


def test_lint_rejects_what_it_should() -> None:
    # The checks above must be able to fail: a floating tag, a root user, a missing source.
    bad = parse_dockerfile("FROM python:latest\nCOPY nowhere/ /x\nUSER root\n")
    assert not _PINNED_TAG.match(bad[0].base.rpartition(":")[2])
    assert bad[0].instructions[-1] == ("USER", "root")
    sources = copy_sources(bad[0].instructions[0][1])
    assert sources == ["nowhere/"]
    assert not (REPO / sources[0]).exists()


def test_build_script_tags_match_presets() -> None:
    out = subprocess.run(
        [str(IMAGES / "build.sh"), "--dry-run"], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    tags = re.findall(r" -t (\S+) ", out)
    assert tags == [image_ref(n) for n in ("launcher", "pytorch", "chainermn", "ps")]
    assert all(t.endswith(f":{__version__}") and t.startswith(f"{IMAGE_REGISTRY}/") for t in tags)


def _images_in(node: object) -> list[str]:
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "image" and isinstance(value, str):
                found.append(value)
            found += _images_in(value)
    elif isinstance(node, list):
        for item in node:
            found += _images_in(item)
    return found


@pytest.mark.parametrize("entry", entries(), ids=lambda e: e.name)
def test_compiled_yaml_pulls_the_launcher_image_of_this_version(entry: Entry) -> None:
    path = entry.yaml_path
    images = _images_in(list(yaml.safe_load_all(path.read_text())))
    assert images, f"{path}: no image reference"
    assert set(images) == {LAUNCHER_IMAGE}, f"{path}: {sorted(set(images))} != {LAUNCHER_IMAGE}"


# --- what goes into the images is pinned ---------------------------------------------------------

CONSTRAINTS = IMAGES / "constraints.txt"
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;#]+)")


def pins() -> dict[str, str]:
    """images/constraints.txt as {normalised name: version}."""
    found: dict[str, str] = {}
    for line in CONSTRAINTS.read_text().splitlines():
        match = _PIN.match(line.strip())
        if match:
            found[re.sub(r"[-_.]+", "-", match.group(1)).lower()] = match.group(2)
    return found


def _pip_installs(name: str) -> list[str]:
    """Every `pip install` command that makes an image."""
    commands: list[str] = []
    for keyword, rest in image_instructions(name):
        if keyword == "RUN":
            commands += [c.strip() for c in rest.split("&&") if c.strip().startswith("pip install")]
    return commands


@pytest.mark.parametrize("name", IMAGE_NAMES)
def test_every_install_in_an_image_is_held_to_the_constraints(name: str) -> None:
    instructions = image_instructions(name)
    copied = [rest for keyword, rest in instructions if keyword == "COPY" and "images/constraints.txt" in rest]
    assert copied, f"{name}: the image does not copy images/constraints.txt"
    target = copied[0].split()[-1]
    installs = _pip_installs(name)
    assert installs, f"{name}: no pip install"
    for command in installs:
        assert f"-c {target}" in command, f"{name}: `{command}` is not held to {target}"


def test_the_constraints_pin_every_package_the_project_needs() -> None:
    from importlib.metadata import requires

    pinned = pins()
    assert pinned, f"{CONSTRAINTS}: no pins"
    for requirement in requires("kubetrain") or []:
        spec, _, marker = requirement.partition(";")
        if "extra" in marker and not any(f'"{e}"' in marker for e in ("s3", "gcs", "torch", "chainer", "ps")):
            continue  # dev tools are not in any image
        name = re.split(r"[<>=!~\[ (]", spec.strip(), maxsplit=1)[0]
        assert re.sub(r"[-_.]+", "-", name).lower() in pinned, f"{name} ({requirement}) is not pinned in {CONSTRAINTS}"


def _run_requirements_py(extras: str) -> subprocess.CompletedProcess[str]:
    """images/requirements.py for these extras, run as the image build runs it."""
    return subprocess.run([sys.executable, str(IMAGES / "requirements.py"), str(REPO / "pyproject.toml"), extras],
                          capture_output=True, text=True, check=False)  # fmt: skip


def _requirements(extras: str) -> list[str]:
    """What images/requirements.py prints for these extras."""
    done = _run_requirements_py(extras)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def _names(requirements: list[str]) -> list[str]:
    return [canonicalize_name(Requirement(r).name) for r in requirements]


def _requirements_extras(name: str, env: dict[str, str] | None = None) -> tuple[str, str]:
    """The extras image `name` passes to images/requirements.py (its one call): as written, and as built.

    As built: with the build's arguments (`images/build.sh --dry-run`, `env` over this environment)
    or else the defaults of the ARGs in the image's stages and the Dockerfile's header.
    """
    instructions = image_instructions(name)
    pattern = r"requirements\.py /etc/kubetrain/pyproject\.toml \"([^\"]*)\""
    (written,) = [found for keyword, rest in instructions if keyword == "RUN" for found in re.findall(pattern, rest)]
    header, _ = _parse(DOCKERFILE.read_text())
    given = image_builds(env)[name].build_args
    values: dict[str, str] = {}
    for keyword, rest in instructions:
        if keyword == "ARG":
            arg, sep, default = rest.partition("=")
            values[arg] = given.get(arg, (default if sep else header.get(arg, "")).strip('"'))
    return written, re.sub(r"\$\{(\w+)\}", lambda m: values[m.group(1)], written)


IMAGE_EXTRAS = {"launcher": "", "pytorch": "torch", "chainermn": "chainer", "ps": "torch,ps"}


@pytest.mark.parametrize("name", IMAGE_NAMES)
def test_the_dependency_layer_installs_what_the_wheel_with_its_extras_requires(name: str) -> None:
    # The image installs the dependencies first (a layer a source change leaves cached), then the
    # wheel with --no-deps: the two together must be what `pip install kubetrain[extras]` installs.
    from importlib.metadata import requires

    _, extras = _requirements_extras(name)
    assert extras == IMAGE_EXTRAS[name], f"{name}: requirements.py is given {extras!r}"
    wanted = []
    for line in requires("kubetrain") or []:
        requirement = Requirement(line)
        marker = requirement.marker
        if marker is None or any(marker.evaluate({"extra": e}) for e in extras.split(",")):
            wanted.append(line)
    assert sorted(_names(_requirements(extras))) == sorted(_names(wanted))
    assert "pip install -c /etc/kubetrain/constraints.txt --no-deps /wheels/kubetrain-*.whl" in _pip_installs(name)


def test_requirements_py_refuses_an_unknown_extra() -> None:
    done = _run_requirements_py("torhc")
    assert done.returncode != 0 and "no extra 'torhc'" in done.stderr, done.stderr


def test_the_launcher_image_takes_the_object_store_extras_only_when_asked() -> None:
    # The drivers and their SDKs are about 150 MB: a variant (LAUNCHER_EXTRAS=s3,gcs), not the default.
    assert _requirements_extras("launcher") == ("${LAUNCHER_EXTRAS}", "")
    assert _requirements_extras("launcher", {"LAUNCHER_EXTRAS": "s3,gcs"}) == ("${LAUNCHER_EXTRAS}", "s3,gcs")
    assert _requirements_extras("pytorch", {"LAUNCHER_EXTRAS": "s3,gcs"})[1] == "torch"  # the launcher's only
    assert not {"s3fs", "gcsfs"} & set(_names(_requirements("")))
    assert {"s3fs", "gcsfs"} <= set(_names(_requirements("s3,gcs")))
    assert {"s3fs", "gcsfs"} <= set(pins())


def test_the_launcher_runs_the_kfp_that_compiled_the_yaml() -> None:
    """The launcher image's kfp (pinned) is the kfp named in every compiled component and pipeline."""
    import kfp

    kfp_pin = pins()["kfp"]
    assert kfp.__version__ == kfp_pin, (
        f"kfp {kfp.__version__} is installed but images/constraints.txt pins {kfp_pin}: run `make setup`"
    )
    for entry in entries():
        for path in (entry.yaml_path, *entry.yaml_path.parent.glob(f"kfp-pre-2.15/{entry.yaml_path.name}")):
            versions = set(re.findall(r"^sdkVersion: kfp-(\S+)$", path.read_text(), flags=re.MULTILINE))
            assert versions == {kfp_pin}, f"{path} was compiled by kfp {versions}, the launcher image has {kfp_pin}"
