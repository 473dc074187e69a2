"""The models the PS runtime trains, by name (torch-free, so the master and shards need no torch)."""

from __future__ import annotations

__all__ = ["MODEL_NAMES"]

MODEL_NAMES = ("mlp", "wide_deep")
