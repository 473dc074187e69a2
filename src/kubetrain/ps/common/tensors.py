"""Conversions between numpy arrays and the protocol's Tensor / SparseRows messages."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from kubetrain.ps.common.errors import PSConfigError
from kubetrain.ps.proto import kubetrain_ps_pb2 as pb

__all__ = ["from_rows", "from_tensor", "to_rows", "to_tensor", "to_tensors"]

_F32 = np.dtype("<f4")


def to_tensor(name: str, array: npt.ArrayLike) -> pb.Tensor:
    """A Tensor message holding `array` as little-endian float32."""
    a = np.ascontiguousarray(np.asarray(array, dtype=_F32))
    return pb.Tensor(name=name, shape=list(a.shape), data=a.tobytes())


def to_tensors(arrays: Mapping[str, npt.ArrayLike]) -> list[pb.Tensor]:
    """Tensor messages for every (name, array) pair, in mapping order."""
    return [to_tensor(name, a) for name, a in arrays.items()]


def from_tensor(msg: pb.Tensor) -> npt.NDArray[np.float32]:
    """The float32 array of a Tensor message (a writable copy)."""
    shape = tuple(int(d) for d in msg.shape)
    if any(d < 0 for d in shape):
        raise PSConfigError(f"tensor {msg.name!r}: shape {shape}; expected sizes >= 0")
    expected = _F32.itemsize
    for d in shape:  # Python integers: a huge shape cannot wrap around to match the data
        expected *= d
    if len(msg.data) != expected:
        raise PSConfigError(f"tensor {msg.name!r}: {len(msg.data)} bytes for shape {shape}; expected {expected}")
    return np.frombuffer(msg.data, dtype=_F32).reshape(shape).astype(np.float32)


def to_rows(table: str, ids: npt.NDArray[np.int64], values: npt.ArrayLike) -> pb.SparseRows:
    """A SparseRows message: `values[i]` is the row of `ids[i]`."""
    return pb.SparseRows(table=table, ids=np.asarray(ids, dtype=np.int64).tolist(), values=to_tensor(table, values))


def from_rows(msg: pb.SparseRows) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
    """(ids, values) of a SparseRows message, checked to agree in length."""
    ids = np.asarray(msg.ids, dtype=np.int64)
    values = from_tensor(msg.values)
    if values.ndim != 2 or values.shape[0] != len(ids):
        raise PSConfigError(f"rows of table {msg.table!r}: {len(ids)} ids but values of shape {values.shape}")
    return ids, values
