"""Peak memory of a reference call, measured while it runs.

tracemalloc does not see torch's CPU allocator, so the reference counts its
own tensors: a torch-function mode sees every tensor a torch call returns, and
keeps the bytes of each new storage until the last tensor on it is freed. The
peak of that running total is the most tensor memory the call held at once.
Scratch space inside one kernel is not seen, nor are storages that existed
before the call (views of the inputs are not new memory). A function mode,
not a dispatch mode: entering a dispatch mode imports torch's compiler (~2 s).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves


class _LiveTensors(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.refs: dict[int, int] = {}  # storage address -> live tensors on it
        self.sizes: dict[int, int] = {}
        self.current = 0
        self.peak = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {
            t.untyped_storage().data_ptr()
            for t in tree_leaves((args, kwargs))
            if isinstance(t, torch.Tensor)
        }
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self._track(t, inputs)
        return out

    def _track(self, t: torch.Tensor, inputs: set[int]) -> None:
        storage = t.untyped_storage()
        address = storage.data_ptr()
        if address not in self.refs:
            if address in inputs or storage.nbytes() == 0:
                return  # a view or an in-place result: no new memory
            self.refs[address] = 0
            self.sizes[address] = storage.nbytes()
            self.current += storage.nbytes()
            self.peak = max(self.peak, self.current)
        self.refs[address] += 1
        weakref.finalize(t, self._release, address)

    def _release(self, address: int) -> None:
        self.refs[address] -= 1
        if not self.refs[address]:
            del self.refs[address]
            self.current -= self.sizes.pop(address)


def peak_bytes(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, int]:
    """Call `fn`; return its value and the peak bytes of torch tensors it held at once."""
    meter = _LiveTensors()
    with meter:
        value = fn(*args, **kwargs)
    return value, meter.peak
