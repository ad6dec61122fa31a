"""Contract v2's feed-forward family beside ReLU and SwiGLU: GELU, GLU and GeGLU.

A gated FFN multiplies a gate, act(x @ w_gate), by a value, x @ w_up, and
projects back with w_down: GLU's act is the sigmoid, GeGLU's GELU, SwiGLU's
SiLU (contract v1).
"""

from __future__ import annotations

import math

import numpy as np

from .primitives import _as_float, _check_matrix, _fail, _float_dtype

# math.erf applied element by element: NumPy has no erf, and the contract allows no SciPy.
_erf = np.frompyfunc(math.erf, 1, 1)


def _gelu(z: np.ndarray, approximate: str) -> np.ndarray:
    if approximate not in ("none", "tanh"):
        _fail("approximate", f"expected 'none' or 'tanh', got {approximate!r}")
    z64 = z.astype(np.float64)
    if approximate == "tanh":
        inner = math.sqrt(2.0 / math.pi) * (z64 + 0.044715 * z64**3)
        out = 0.5 * z64 * (1.0 + np.tanh(inner))
    else:
        out = 0.5 * z64 * (1.0 + _erf(z64 / math.sqrt(2.0)).astype(np.float64))
    return out.astype(_float_dtype(z), copy=False)


def gelu(x, approximate="none"):
    """Exact 0.5 x (1 + erf(x / sqrt 2)); "tanh": 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    return _gelu(np.asarray(_as_float(x, "x")), approximate)


def _sigmoid(z: np.ndarray) -> np.ndarray:
    # (1 + tanh(z / 2)) / 2 never overflows, unlike 1 / (1 + exp(-z)).
    return 0.5 * (1.0 + np.tanh(0.5 * z))


def _gated(x, w_gate, w_up, w_down) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    x = _as_float(x, "x")
    w_gate = _check_matrix(w_gate, "w_gate", x.shape[-1])
    w_up = _check_matrix(w_up, "w_up", x.shape[-1])
    if w_up.shape != w_gate.shape:
        _fail("w_up", f"expected shape {w_gate.shape} like w_gate, got {w_up.shape}")
    return x, w_gate, w_up, _check_matrix(w_down, "w_down", w_gate.shape[1])


def glu_ffn(x, w_gate, w_up, w_down):
    """(sigmoid(x @ w_gate) * (x @ w_up)) @ w_down; x (..., C), w_gate/w_up (C, F), w_down (F, C)."""
    x, w_gate, w_up, w_down = _gated(x, w_gate, w_up, w_down)
    hidden = _sigmoid(x @ w_gate) * (x @ w_up)  # (..., F)
    return (hidden @ w_down).astype(_float_dtype(x), copy=False)


def geglu_ffn(x, w_gate, w_up, w_down, approximate="none"):
    """(gelu(x @ w_gate, approximate) * (x @ w_up)) @ w_down."""
    if approximate not in ("none", "tanh"):
        _fail("approximate", f"expected 'none' or 'tanh', got {approximate!r}")
    x, w_gate, w_up, w_down = _gated(x, w_gate, w_up, w_down)
    gate = x @ w_gate  # (..., F)
    hidden = _gelu(gate, approximate) * (x @ w_up)  # (..., F)
    return (hidden @ w_down).astype(_float_dtype(x), copy=False)
