"""NumPy in, NumPy out: conversion and argument checks at the reference's boundary.

Inside, the reference works on torch tensors in the input's floating dtype
(float64 unless a caller passes float32); outputs come back as fresh NumPy
arrays that share no memory with the inputs.
"""

from __future__ import annotations

import numpy as np
import torch


def fail(arg: str, message: str) -> None:
    raise ValueError(f"{arg}: {message}")


def float_dtype(x) -> torch.dtype:
    """The torch dtype a result keeps: the input's floating dtype, float64 for integers."""
    kind = np.asarray(x).dtype
    return torch.float32 if kind == np.float32 else torch.float64


def tensor(x, arg: str, dtype: torch.dtype | None = None, ndim: int | None = None) -> torch.Tensor:
    array = np.asarray(x)
    if not (np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)):
        raise TypeError(f"{arg}: expected a numeric array, got dtype {array.dtype}")
    if ndim is not None and array.ndim != ndim:
        fail(arg, f"expected {ndim} dimensions, got shape {array.shape}")
    return torch.from_numpy(np.array(array, dtype=np.float64)).to(dtype or float_dtype(array))


def ints(x, arg: str) -> torch.Tensor:
    array = np.asarray(x)
    if not np.issubdtype(array.dtype, np.integer):
        raise TypeError(f"{arg}: expected integers, got dtype {array.dtype}")
    return torch.from_numpy(array.astype(np.int64))


def size(n, arg: str, minimum: int = 0) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"{arg}: expected an int, got {type(n).__name__}")
    if n < minimum:
        fail(arg, f"must be >= {minimum}, got {n}")
    return int(n)


def vector(w, arg: str, width: int, dtype: torch.dtype) -> torch.Tensor:
    t = tensor(w, arg, dtype)
    if tuple(t.shape) != (width,):
        fail(arg, f"expected shape ({width},), got {tuple(t.shape)}")
    return t


def matrix(w, arg: str, rows: int, dtype: torch.dtype, cols: int | None = None) -> torch.Tensor:
    t = tensor(w, arg, dtype, ndim=2)
    if t.shape[0] != rows or (cols is not None and t.shape[1] != cols):
        want = f"({rows}, {cols if cols is not None else 'any'})"
        fail(arg, f"expected shape {want}, got {tuple(t.shape)}")
    return t


def numpy(t: torch.Tensor) -> np.ndarray:
    return t.detach().clone().numpy()
