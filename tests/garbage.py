"""Garbage rooms: the project's clean room with one function's answer made garbage.

Each room is labctl's own clean room in this process (test code, never a
learner's) with one contract function wrapped: it returns zeros, returns its
input, returns the right answer for other inputs (the same shapes, drawn from
seed 5, whatever it is given), swaps sin and cos, reverses the heads, or reads
a square weight transposed. Shapes and dtypes stay right, so only a comparison
of values (with the reference, on the same inputs) can tell.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np

import labctl.clean_room as project_room

Wrapper = Callable[[Callable[..., Any]], Callable[..., Any] | None]
HEADED = {"multi_head_attention", "attention_decode", "transformer_block", "decoder_forward"}


def _zeros(value: Any) -> Any:
    if isinstance(value, tuple):
        return tuple(_zeros(v) for v in value)
    return np.zeros_like(np.asarray(value))


def zeros(name: str, fn: Callable) -> Callable:
    return lambda *args, **kwargs: _zeros(fn(*args, **kwargs))


def identity(name: str, fn: Callable) -> Callable | None:
    """The first argument in place of the (first) output, where the shapes agree."""

    def wrapped(*args, **kwargs):
        value = fn(*args, **kwargs)
        first = value[0] if isinstance(value, tuple) else value
        if np.shape(first) != np.shape(args[0]):
            return value
        given = np.array(args[0], dtype=np.asarray(first).dtype)
        return (given, *value[1:]) if isinstance(value, tuple) else given

    return None if name in {"causal_mask", "sliding_window_mask", "padding_mask"} else wrapped


def _other(value: Any, rng: np.random.Generator) -> Any:
    if isinstance(value, np.ndarray) and np.issubdtype(value.dtype, np.floating):
        return rng.standard_normal(value.shape).astype(value.dtype)
    if isinstance(value, dict):
        return {k: _other(v, rng) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_other(v, rng) for v in value)
    return value


def other_inputs(name: str, fn: Callable) -> Callable | None:
    """The right answer for inputs drawn from seed 5 in the same shapes: never for these."""

    def wrapped(*args, **kwargs):
        rng = np.random.default_rng(5)
        return fn(*_other(args, rng), **_other(kwargs, rng))

    floats = {"softmax", "scaled_dot_product_attention", "tiled_attention", "rope", "rms_norm"}
    floats |= {"layer_norm", "relu_ffn", "swiglu_ffn", "split_heads", "merge_heads"}
    floats |= {"repeat_kv", *HEADED}
    return wrapped if name in floats else None


def sin_cos_swapped(name: str, fn: Callable) -> Callable | None:
    def wrapped(*args, **kwargs):
        pe = np.array(fn(*args, **kwargs))
        swapped = pe.copy()
        n = pe.shape[-1] // 2 * 2
        swapped[..., 0:n:2], swapped[..., 1:n:2] = pe[..., 1:n:2], pe[..., 0:n:2]
        return swapped

    return wrapped if name == "sinusoidal_positions" else None


def _reverse_columns(w: np.ndarray, heads: int) -> np.ndarray:
    """The head blocks of a (C, heads * D) projection in reverse order."""
    c, width = w.shape
    return w.reshape(c, heads, width // heads)[:, ::-1].reshape(c, width)


def _block_heads(params: dict, n_heads: int, n_kv_heads: int | None) -> dict:
    kv = n_heads if n_kv_heads is None else n_kv_heads
    out = dict(params)
    out["wq"] = _reverse_columns(np.asarray(params["wq"]), n_heads)
    out["wk"] = _reverse_columns(np.asarray(params["wk"]), kv)
    out["wv"] = _reverse_columns(np.asarray(params["wv"]), kv)
    return out


def heads_reversed(name: str, fn: Callable) -> Callable | None:
    """Heads attend rightly but are concatenated in reverse order before `wo`."""
    names = ("x", "params", "n_heads", "n_kv_heads")

    def projections(*args, **kwargs):
        # (x, wq, wk, wv, wo, n_heads, n_kv_heads, ...); decode has past_k, past_v first
        shift = 2 if name == "attention_decode" else 0
        args = list(args)
        n_heads = args[5 + shift] if len(args) > 5 + shift else kwargs["n_heads"]
        n_kv = args[6 + shift] if len(args) > 6 + shift else kwargs.get("n_kv_heads")
        kv = n_heads if n_kv is None else n_kv
        for i, heads in ((1, n_heads), (2, kv), (3, kv)):
            args[i + shift] = _reverse_columns(np.asarray(args[i + shift]), heads)
        return fn(*args, **kwargs)

    def block(*args, **kwargs):
        bound = dict(zip(names, args, strict=False)) | kwargs
        bound["params"] = _block_heads(bound["params"], bound["n_heads"], bound.get("n_kv_heads"))
        return fn(**bound)

    def decoder(*args, **kwargs):
        bound = dict(zip(("token_ids", "params", "n_heads", "n_kv_heads"), args, strict=False))
        bound |= kwargs
        params = dict(bound["params"])
        params["blocks"] = [
            _block_heads(b, bound["n_heads"], bound.get("n_kv_heads")) for b in params["blocks"]
        ]
        bound["params"] = params
        return fn(**bound)

    def split(*args, **kwargs):
        return np.asarray(fn(*args, **kwargs))[:, ::-1]

    def sdpa(*args, **kwargs):
        out, weights = fn(*args, **kwargs)
        return np.asarray(out)[:, ::-1], weights

    return {
        "multi_head_attention": projections,
        "attention_decode": projections,
        "transformer_block": block,
        "decoder_forward": decoder,
        "split_heads": split,
        "scaled_dot_product_attention": sdpa,
    }.get(name)


def _transposed(w: Any) -> Any:
    w = np.asarray(w)
    return w.T if w.ndim == 2 and w.shape[0] == w.shape[1] else w


def weight_transposed(name: str, fn: Callable) -> Callable | None:
    """`wq` and `wo` read transposed, where they are square (as with H * D == C)."""

    def projections(*args, **kwargs):
        shift = 2 if name == "attention_decode" else 0
        args = list(args)
        for i in (1 + shift, 4 + shift):
            args[i] = _transposed(args[i])
        return fn(*args, **kwargs)

    def block(*args, **kwargs):
        args = list(args)
        params = dict(args[1])
        params["wq"], params["wo"] = _transposed(params["wq"]), _transposed(params["wo"])
        args[1] = params
        return fn(*args, **kwargs)

    def decoder(*args, **kwargs):
        args = list(args)
        params = dict(args[1])
        params["blocks"] = [
            {**b, "wq": _transposed(b["wq"]), "wo": _transposed(b["wo"])} for b in params["blocks"]
        ]
        args[1] = params
        return fn(*args, **kwargs)

    def ffn(*args, **kwargs):
        return fn(args[0], *(_transposed(a) for a in args[1:]), **kwargs)

    return {
        "multi_head_attention": projections,
        "attention_decode": projections,
        "transformer_block": block,
        "decoder_forward": decoder,
        "relu_ffn": ffn,
        "swiglu_ffn": ffn,
    }.get(name)


MASKS = {"causal_mask", "sliding_window_mask", "padding_mask"}


def finite_mask_fill(name: str, fn: Callable) -> Callable | None:
    """Attention that fills blocked scores with -1e9: a row with every key blocked gets
    uniform weights, not zeros (issue 38: the entropy lab found no blocked row, and crashed)."""

    def wrapped(q, k, v, mask=None, scale=None):
        if mask is None:
            return fn(q, k, v, mask, scale)
        n_rep = np.shape(q)[1] // np.shape(k)[1]
        k, v = project_room.repeat_kv(k, n_rep), project_room.repeat_kv(v, n_rep)
        s = 1.0 / np.sqrt(np.shape(q)[-1]) if scale is None else scale
        scores = np.where(mask, -1e9, (q @ np.swapaxes(k, -1, -2)) * s)
        weights = project_room.softmax(scores, axis=-1)
        return (weights @ v).astype(q.dtype), weights.astype(q.dtype)

    return wrapped if name == "scaled_dot_product_attention" else None


def _nan(value: Any) -> Any:
    if isinstance(value, tuple):
        return tuple(_nan(v) for v in value)
    return np.full_like(np.asarray(value, dtype=float), np.nan)


def nan(name: str, fn: Callable) -> Callable | None:
    """NaN in every element of every float output."""
    return None if name in MASKS else (lambda *args, **kwargs: _nan(fn(*args, **kwargs)))


def float_mask(name: str, fn: Callable) -> Callable | None:
    """A mask of floats (1.0 = blocked), not bool: the contract keeps masks bool."""
    if name not in MASKS:
        return None
    return lambda *args, **kwargs: np.asarray(fn(*args, **kwargs), dtype=np.float64)


def as_list(name: str, fn: Callable) -> Callable:
    """Nested Python lists in place of arrays."""

    def wrapped(*args, **kwargs):
        value = fn(*args, **kwargs)
        if isinstance(value, tuple):
            return [np.asarray(v).tolist() for v in value]
        return np.asarray(value).tolist()

    return wrapped


def extra_axis(name: str, fn: Callable) -> Callable:
    """The (first) output with an axis of 1 more at the end: right values, another shape."""

    def wrapped(*args, **kwargs):
        value = fn(*args, **kwargs)
        if isinstance(value, tuple):
            return (np.asarray(value[0])[..., None], *value[1:])
        return np.asarray(value)[..., None]

    return wrapped


KINDS: dict[str, Callable[[str, Callable], Callable | None]] = {
    "zeros": zeros,
    "identity": identity,
    "other-inputs": other_inputs,
    "sin-cos-swapped": sin_cos_swapped,
    "heads-reversed": heads_reversed,
    "weight-transposed": weight_transposed,
}
# Odd outputs (issue 38): values no formula of the lab expects, or not the contract's form.
ODD_KINDS: dict[str, Callable[[str, Callable], Callable | None]] = {
    "finite-mask-fill": finite_mask_fill,
    "nan": nan,
    "float-mask": float_mask,
    "list": as_list,
    "extra-axis": extra_axis,
}


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, list) or isinstance(b, list):
        return False  # a list in place of an array is another answer, whatever it holds
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    same_dtype = np.asarray(a).dtype == np.asarray(b).dtype
    return same_dtype and np.shape(a) == np.shape(b) and np.array_equal(a, b, equal_nan=True)


class GarbageRoom:
    """The project's clean room with `functions` wrapped by the garbage `kind`.

    `changed` says whether any answer it gave differed from the clean room's: a
    room that never did (heads reversed with one head) is no garbage for that lab.
    """

    def __init__(self, kind: str, functions: tuple[str, ...]):
        self.kind, self.functions = kind, functions
        self.changed = False
        self._wrapped = {}
        for name in functions:
            correct = getattr(project_room, name)
            wrapped = {**KINDS, **ODD_KINDS}[kind](name, correct)
            if wrapped is None:
                raise ValueError(f"{kind} does not apply to {name}")
            self._wrapped[name] = self._noting(wrapped, correct)

    def _noting(self, wrapped: Callable, correct: Callable) -> Callable:
        def call(*args, **kwargs):
            value = wrapped(*args, **kwargs)
            if not self.changed and not _same(value, correct(*args, **kwargs)):
                self.changed = True
            return value

        return call

    def __getattr__(self, fn: str) -> Any:
        if fn.startswith("_"):
            raise AttributeError(fn)
        return self._wrapped.get(fn) or getattr(project_room, fn)


def applies(kind: str, name: str) -> bool:
    return {**KINDS, **ODD_KINDS}[kind](name, getattr(project_room, name)) is not None


class Recording:
    """The project's clean room, noting which contract functions a lab calls."""

    def __init__(self):
        self.called: list[str] = []

    def __getattr__(self, fn: str) -> Any:
        if fn.startswith("_"):
            raise AttributeError(fn)
        target = getattr(project_room, fn)
        if fn not in self.called:
            self.called.append(fn)
        return target


def nan_room(name: str) -> SimpleNamespace:
    """labctl's own clean room with `name` answering NaN in every element (shape and dtype
    right): what a learner's overflowing softmax can give."""
    original = getattr(project_room, name)
    functions = {n: getattr(project_room, n) for n in dir(project_room) if not n.startswith("_")}
    functions[name] = lambda *args, **kwargs: np.full_like(original(*args, **kwargs), np.nan)
    return SimpleNamespace(**functions)
