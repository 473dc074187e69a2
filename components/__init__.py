"""kubetrain's KFP components (importable as `kubetrain.components`), one folder each, in the Kubeflow hub's layout.

- `download_dataset`: fetch a data set onto the workspace volume → Dataset artifact.
- `pytorch_train`, `chainermn_train`, `ps_train`: launch a PyTorchJob / MPIJob / parameter-server
  JobSet, follow it to its end → Model, Metrics, HTML report, job name and final status.
- `compare_summary`: a table comparing the three frameworks' runs → Markdown and HTML.

A folder `<name>/` holds `component.py`, its compiled `component.yaml` (and the copy for KFP
before 2.15 in `kfp-pre-2.15/`), `metadata.yaml`, the generated `README.md`, `OWNERS`,
`example_pipelines.py` and the component's own `tests/`; `_shared.py` is what they declare alike.
Every component is a lightweight Python component on the launcher image whose body imports
kubetrain and calls one function of :mod:`kubetrain.kfp_runtime`. The YAML files load anywhere
with `kfp.components.load_component_from_file` / `load_component_from_url`; kfp ≤ 2.17 drops
the training components' TaskConfig passthroughs on the way, which
`kubetrain.components.load_component(path_or_url)` keeps.

Import a component by name (``from kubetrain.components import pytorch_train``), as every KFP
component library does; the folder form (``from kubetrain.components.pytorch_train import
pytorch_train``) works too. The package attribute of each name is the component, which hides the
folder's package of the same name from attribute access: reach it through ``sys.modules`` or a
``from kubetrain.components.<name> import ...`` statement, never as ``kubetrain.components.<name>``.
"""

from pathlib import Path
from typing import Any

from kubetrain.components.chainermn_train import chainermn_train
from kubetrain.components.compare_summary import compare_summary
from kubetrain.components.download_dataset import download_dataset
from kubetrain.components.ps_train import ps_train
from kubetrain.components.pytorch_train import pytorch_train

__all__ = [
    "chainermn_train",
    "compare_summary",
    "compiled_yaml",
    "download_dataset",
    "load_component",
    "ps_train",
    "pytorch_train",
]

PRE_2_15 = "kfp-pre-2.15"
COMPILED = "component.yaml"  # beside component.py, as every compiled YAML lies beside its source


def compiled_yaml(*, kfp_pre_2_15: bool = False) -> dict[str, Path]:
    """The compiled YAML of each component, by name, as installed with kubetrain (package data).

    `kfp_pre_2_15` gives the copies for Kubeflow Pipelines backends before 2.15 (no TaskConfig).
    Upload them, vendor them into your repository, or load them with :func:`load_component`.
    """
    compiled = Path(PRE_2_15, COMPILED) if kfp_pre_2_15 else Path(COMPILED)
    folders = sorted(Path(__file__).parent.iterdir())
    return {folder.name: folder / compiled for folder in folders if (folder / compiled).is_file()}


def load_component(source: str) -> Any:
    """A compiled kubetrain component from a file or URL, with its TaskConfig passthroughs (kfp's loader drops them).

    See :func:`kubetrain.kfp_runtime.reuse.load_component`; imported on use, so importing the
    components stays light (the hub's import guard).
    """
    from kubetrain.kfp_runtime.reuse import load_component as load

    return load(source)
