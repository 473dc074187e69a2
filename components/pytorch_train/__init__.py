"""The `pytorch_train` component folder: the component of component.py, exported by name as the hub's folders do."""

from kubetrain.components.pytorch_train.component import pytorch_train

__all__ = ["pytorch_train"]
