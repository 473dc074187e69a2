"""The `download_dataset` component folder: the component of component.py, exported by name as the hub's folders do."""

from kubetrain.components.download_dataset.component import download_dataset

__all__ = ["download_dataset"]
