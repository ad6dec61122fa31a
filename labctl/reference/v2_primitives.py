"""Reference for contract v2's new and widened primitives, on PyTorch, NumPy in and out.

Softmax with a temperature; RoPE with batched positions and scaling (position
interpolation, NTK-aware); ALiBi; a learned-position lookup; GELU and the GLU
family; attention entropy. Where PyTorch has the operation it is used
(`F.gelu`, `F.embedding`, `torch.special.entr`); ALiBi's slopes follow the
paper's own recursive code, so that the clean room's closed form is checked
against an independent route.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from labctl.reference._boundary import fail, ints, matrix, numpy, size, tensor
from labctl.reference.primitives import rope_t, softmax_t

ROPE_SCALINGS = (None, "linear", "ntk")
GELU_APPROXIMATIONS = ("none", "tanh")


def _axis(axis, ndim: int) -> int:
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"axis: expected an int, got {type(axis).__name__}")
    if not -ndim <= axis < max(ndim, 1):
        fail("axis", f"out of range for an array of {ndim} dimensions")
    return int(axis)


def _positive(value, arg: str, minimum: float, strict: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{arg}: expected a number, got {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value) or value < minimum or (strict and value == minimum):
        fail(arg, f"must be {'>' if strict else '>='} {minimum:g}, got {value!r}")
    return value


def temperature_value(temperature) -> float:
    return _positive(temperature, "temperature", 0.0, strict=True)


def softmax(x, axis=-1, temperature=1.0):
    t = tensor(x, "x")
    axis = _axis(axis, t.ndim)
    return numpy(softmax_t(t / temperature_value(temperature), axis))


def rope_settings(theta, scaling, factor, D: int) -> tuple[float, float]:
    """(base, position divisor) for a scaling; NTK widens the base, interpolation the positions."""
    if scaling not in ROPE_SCALINGS:
        fail("scaling", f"expected None, 'linear' or 'ntk', got {scaling!r}")
    factor = _positive(factor, "factor", 1.0, strict=False)
    theta = _positive(theta, "theta", 0.0, strict=True)
    if scaling == "linear":
        return theta, factor
    if scaling == "ntk":
        if D < 4:
            fail("x", f"NTK scaling needs a head width D >= 4 (exponent D / (D - 2)), got D={D}")
        return theta * factor ** (D / (D - 2)), 1.0
    return theta, 1.0


def positions_t(
    positions,
    x_shape: tuple[int, ...],
    arg: str = "positions",
    given: tuple[str, tuple] | None = None,
) -> torch.Tensor:
    """Positions (T,) or (B, T) checked against x (B, ..., T, D); (T,) or (B, T) int64.

    `given`: the argument the caller was handed, by name and shape, for the message (an
    attention's x is (B, T, C), not the (B, 1, T, 1) its positions are checked against)."""
    p = ints(positions, arg)
    T = x_shape[-2]
    if tuple(p.shape) == (T,):
        return p
    if p.ndim == 2 and len(x_shape) >= 3 and tuple(p.shape) == (x_shape[0], T):
        return p
    want = f"({T},) or ({x_shape[0]}, {T})" if len(x_shape) >= 3 else f"({T},)"
    name, shape = given or ("x", tuple(x_shape))
    fail(arg, f"expected shape {want} to match {name} {tuple(shape)}, got {tuple(p.shape)}")


def rope(x, positions, theta=10000.0, scaling=None, factor=1.0):
    t = tensor(x, "x")
    if t.ndim < 2:
        fail("x", f"expected (..., T, D), got shape {tuple(t.shape)}")
    D = t.shape[-1]
    if D % 2:
        fail("x", f"RoPE needs an even head width D, got D={D}")
    base, divisor = rope_settings(theta, scaling, factor, D)
    return numpy(rope_t(t, positions_t(positions, tuple(t.shape)), base, divisor))


def _paper_slopes(n: int) -> list[float]:
    # Press et al. (2022), the reference code of "Train Short, Test Long".
    def power_of_2(n: int) -> list[float]:
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + _paper_slopes(2 * closest)[0::2][: n - closest]


def alibi_slopes_t(n_heads: int) -> torch.Tensor:
    return torch.tensor(_paper_slopes(n_heads), dtype=torch.float64)  # (H,)


def alibi_slopes(n_heads):
    return numpy(alibi_slopes_t(size(n_heads, "n_heads", minimum=1)))


def alibi_bias_t(n_heads: int, t_q: int, t_k: int) -> torch.Tensor:
    position = (t_k - t_q) + torch.arange(t_q, dtype=torch.float64)[:, None]  # (Tq, 1)
    distance = position - torch.arange(t_k, dtype=torch.float64)[None, :]  # (Tq, Tk)
    return -alibi_slopes_t(n_heads)[:, None, None] * distance  # (H, Tq, Tk)


def alibi_bias(n_heads, t_q, t_k=None):
    n_heads = size(n_heads, "n_heads", minimum=1)
    t_q = size(t_q, "t_q")
    t_k = t_q if t_k is None else size(t_k, "t_k")
    return numpy(alibi_bias_t(n_heads, t_q, t_k))


def learned_positions_t(positions: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    if positions.numel() and (positions.min() < 0 or positions.max() >= table.shape[0]):
        fail(
            "positions",
            f"must lie in [0, {table.shape[0]}) (the table's rows), "
            f"got [{int(positions.min())}, {int(positions.max())}]",
        )
    return F.embedding(positions, table)


def learned_positions(positions, table):
    p = ints(positions, "positions")
    if p.ndim not in (1, 2):
        fail("positions", f"expected shape (T,) or (B, T), got {tuple(p.shape)}")
    return numpy(learned_positions_t(p, tensor(table, "table", ndim=2)))


def gelu_t(t: torch.Tensor, approximate: str) -> torch.Tensor:
    return F.gelu(t, approximate=approximate)


def _approximation(approximate) -> str:
    if approximate not in GELU_APPROXIMATIONS:
        fail("approximate", f"expected 'none' or 'tanh', got {approximate!r}")
    return approximate


def gelu(x, approximate="none"):
    return numpy(gelu_t(tensor(x, "x"), _approximation(approximate)))


def _gated_weights(t, w_gate, w_up, w_down):
    w_gate = matrix(w_gate, "w_gate", t.shape[-1], t.dtype)
    w_up = matrix(w_up, "w_up", t.shape[-1], t.dtype, cols=w_gate.shape[1])
    return w_gate, w_up, matrix(w_down, "w_down", w_gate.shape[1], t.dtype)


def glu_ffn(x, w_gate, w_up, w_down):
    t = tensor(x, "x")
    w_gate, w_up, w_down = _gated_weights(t, w_gate, w_up, w_down)
    return numpy((torch.sigmoid(t @ w_gate) * (t @ w_up)) @ w_down)


def geglu_ffn(x, w_gate, w_up, w_down, approximate="none"):
    t = tensor(x, "x")
    approximate = _approximation(approximate)
    w_gate, w_up, w_down = _gated_weights(t, w_gate, w_up, w_down)
    return numpy((gelu_t(t @ w_gate, approximate) * (t @ w_up)) @ w_down)


def attention_entropy(weights, axis=-1):
    t = tensor(weights, "weights")
    axis = _axis(axis, t.ndim)
    if bool((t < 0).any()):
        fail("weights", "attention weights must be >= 0")
    # entr(w) = -w ln w with entr(0) = 0: a fully blocked (all-zero) row has entropy 0.
    return numpy(torch.special.entr(t).sum(dim=axis))
