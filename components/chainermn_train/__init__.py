"""The `chainermn_train` component folder: the component of component.py, exported by name as the hub's folders do."""

from kubetrain.components.chainermn_train.component import chainermn_train

__all__ = ["chainermn_train"]
