"""The `ps_train` component folder: the component of component.py, exported by name as the hub's folders do."""

from kubetrain.components.ps_train.component import ps_train

__all__ = ["ps_train"]
