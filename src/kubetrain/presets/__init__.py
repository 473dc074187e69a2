"""The project's own jobs: images, training programs and sensible defaults for each kind.

`kubetrain render` and the KFP components both build their specs here, so what `render` prints
is exactly what a component submits. Image tags are tied to the package version in this one place.

`defaults` holds the images, ports, programs and the pod options, `settings` the one value of
a job's common settings every builder takes (:class:`JobSettings`), `jobs` the training-operator
v1 / mpi-operator / PS JobSet builders and `trainjobs` the Trainer v2 ones.
"""

from kubetrain.images import (
    CHAINERMN_IMAGE,
    DEFAULT_REGISTRY,
    IMAGE_NAMES,
    IMAGE_REGISTRY,
    IMAGE_TAG,
    LAUNCHER_IMAGE,
    PS_IMAGE,
    PYTORCH_IMAGE,
    REGISTRY_ENV,
    image_ref,
    registry_from,
)
from kubetrain.presets.defaults import (
    CHAINERMN_PROGRAM,
    PS_MASTER_PORT,
    PS_SERVER_PORT,
    TORCH_PROGRAM,
    WORKSPACE_ENV,
    WORKSPACE_MOUNT,
    PodOptions,
    Program,
    TrainingParams,
    UserProgram,
    resolve_program,
    workspace_for,
)
from kubetrain.presets.jobs import (
    mpi_job_spec,
    ps_job_spec,
    pytorch_job_spec,
)
from kubetrain.presets.settings import JobSettings
from kubetrain.presets.trainjobs import (
    MPI_RUNTIME,
    TORCH_RUNTIME,
    mpi_trainjob_spec,
    pytorch_trainjob_spec,
)

__all__ = [
    "CHAINERMN_IMAGE",
    "CHAINERMN_PROGRAM",
    "DEFAULT_REGISTRY",
    "IMAGE_NAMES",
    "IMAGE_REGISTRY",
    "IMAGE_TAG",
    "LAUNCHER_IMAGE",
    "MPI_RUNTIME",
    "PS_IMAGE",
    "PS_MASTER_PORT",
    "PS_SERVER_PORT",
    "PYTORCH_IMAGE",
    "REGISTRY_ENV",
    "TORCH_PROGRAM",
    "TORCH_RUNTIME",
    "WORKSPACE_ENV",
    "WORKSPACE_MOUNT",
    "JobSettings",
    "PodOptions",
    "Program",
    "TrainingParams",
    "UserProgram",
    "image_ref",
    "mpi_job_spec",
    "mpi_trainjob_spec",
    "ps_job_spec",
    "pytorch_job_spec",
    "pytorch_trainjob_spec",
    "registry_from",
    "resolve_program",
    "workspace_for",
]
