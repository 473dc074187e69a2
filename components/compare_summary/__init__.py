"""The `compare_summary` component folder: the component of component.py, exported by name as the hub's folders do."""

from kubetrain.components.compare_summary.component import compare_summary

__all__ = ["compare_summary"]
