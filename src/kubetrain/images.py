"""kubetrain's images and where they are pulled from: the registry, the names, the version tag.

Imports nothing but the standard library and kubetrain.errors, so the component modules, which
the Kubeflow hub's import guard keeps to the standard library and kfp, can name the launcher image.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from kubetrain import __version__
from kubetrain.errors import InvalidInputError, SpecError

DEFAULT_REGISTRY = "ghcr.io/kubetrain"
# Where kubetrain's images are pulled from, read once at import: when components are defined (so
# their compiled YAML names the launcher image there) and in the launcher pod (so the training
# images come from there; the compiled training components carry it as their container's env).
REGISTRY_ENV = "KUBETRAIN_REGISTRY"
# host[:port]/path, as images/build.sh's REGISTRY takes it: no scheme, no tag, no trailing slash.
_REGISTRY = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)+\Z")


def registry_from(environ: Mapping[str, str]) -> str:
    """The image registry `environ` names in KUBETRAIN_REGISTRY, else ghcr.io/kubetrain."""
    value = environ.get(REGISTRY_ENV, "")
    if not value:
        return DEFAULT_REGISTRY
    if not _REGISTRY.match(value):
        raise InvalidInputError(
            f"{REGISTRY_ENV}: got {value!r}; expected a registry and path without scheme or tag, such as "
            "registry.example.com:5000/team (where images/build.sh --push put kubetrain's images)"
        )
    return value


IMAGE_REGISTRY = registry_from(os.environ)
IMAGE_TAG = __version__
IMAGE_NAMES = ("launcher", "pytorch", "chainermn", "ps")


def image_ref(name: str, *, registry: str = IMAGE_REGISTRY, tag: str = IMAGE_TAG) -> str:
    """The reference of one of the project's images (`launcher`, `pytorch`, `chainermn`, `ps`)."""
    if name not in IMAGE_NAMES:
        raise SpecError("image", name, f"one of {', '.join(IMAGE_NAMES)}")
    return f"{registry}/{name}:{tag}"


LAUNCHER_IMAGE = image_ref("launcher")
PYTORCH_IMAGE = image_ref("pytorch")
CHAINERMN_IMAGE = image_ref("chainermn")
PS_IMAGE = image_ref("ps")
