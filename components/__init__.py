"""kubetrain's KFP components (importable as `kubetrain.components`), each compiled to YAML beside its source.

- `download_dataset`: fetch a data set onto the workspace volume → Dataset artifact.
- `pytorch_train`, `chainermn_train`, `ps_train`: launch a PyTorchJob / MPIJob / parameter-server
  JobSet, follow it to its end → Model, Metrics, HTML report, job name and final status.
- `compare_summary`: a table comparing the three frameworks' runs → Markdown and HTML.

Every component is a lightweight Python component on the launcher image whose body imports
kubetrain and calls one function of :mod:`kubetrain.kfp_runtime`. The YAML files load anywhere
with `kfp.components.load_component_from_file` / `load_component_from_url`; kfp ≤ 2.17 drops
the training components' TaskConfig passthroughs on the way, which
`kubetrain.components.load_component(path_or_url)` keeps.
"""

from kubetrain.kfp_runtime.reuse import load_component

__all__ = ["load_component"]
