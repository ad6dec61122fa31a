"""Primitives of the clean room: softmax, masks, heads, positions, norms, feed-forward.

NumPy and the standard library only, written from the formulas of contract v1
(`labctl/data/contract-v1.md`) and the parameters contract v2 adds to softmax and
RoPE (`labctl/data/contract-v2.md`). Shapes use the course's letters: B batch,
T sequence, C model width, H heads, Hkv key/value heads, D head width.
"""

from __future__ import annotations

import numpy as np


def _fail(arg: str, message: str) -> None:
    raise ValueError(f"{arg}: {message}")


def _float_dtype(x: np.ndarray) -> np.dtype:
    return x.dtype if np.issubdtype(x.dtype, np.floating) else np.dtype(np.float64)


def _as_float(x, arg: str, ndim: int | None = None) -> np.ndarray:
    x = np.asarray(x)
    if not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer)):
        raise TypeError(f"{arg}: expected a numeric array, got dtype {x.dtype}")
    if ndim is not None and x.ndim != ndim:
        _fail(arg, f"expected {ndim} dimensions, got shape {x.shape}")
    return x


def _as_size(n, arg: str, minimum: int = 0) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"{arg}: expected an int, got {type(n).__name__}")
    if n < minimum:
        _fail(arg, f"must be >= {minimum}, got {n}")
    return int(n)


def _number(value, arg: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{arg}: expected a number, got {type(value).__name__}")
    return float(value)


def softmax(x, axis=-1, temperature=1.0):
    """Softmax of x / temperature along `axis`, stable: the max is subtracted first.

    A slice that is entirely -inf (every key blocked) gives zeros, not NaN.
    A temperature above 1 flattens the weights, below 1 sharpens them.
    """
    x = _as_float(x, "x")
    temperature = _number(temperature, "temperature")
    if not temperature > 0 or temperature == np.inf:
        _fail("temperature", f"must be > 0, got {temperature!r}")
    dtype = _float_dtype(x)
    x = x / temperature
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(m == -np.inf, 0.0, m)
    e = np.exp(x - m)
    total = np.sum(e, axis=axis, keepdims=True)
    out = np.divide(e, total, out=np.zeros(e.shape, dtype=e.dtype), where=total > 0)
    return out.astype(dtype, copy=False)


def causal_mask(t_q, t_k=None):
    """Bool (t_q, t_k), True = blocked: query i sits at p = t_k - t_q + i and sees keys j <= p."""
    t_q = _as_size(t_q, "t_q")
    t_k = t_q if t_k is None else _as_size(t_k, "t_k")
    i = np.arange(t_q)[:, None]
    j = np.arange(t_k)[None, :]
    return j > (t_k - t_q) + i


def sliding_window_mask(t_q, window, t_k=None):
    """Bool (t_q, t_k): query at p sees keys p - window + 1 .. p (the window counts itself)."""
    t_q = _as_size(t_q, "t_q")
    window = _as_size(window, "window", minimum=1)
    t_k = t_q if t_k is None else _as_size(t_k, "t_k")
    p = (t_k - t_q) + np.arange(t_q)[:, None]
    j = np.arange(t_k)[None, :]
    return (j > p) | (j < p - window + 1)


def padding_mask(lengths, t):
    """Bool (B, 1, 1, t): True where key position >= lengths[b]."""
    lengths = np.asarray(lengths)
    if not np.issubdtype(lengths.dtype, np.integer):
        raise TypeError(f"lengths: expected integers, got dtype {lengths.dtype}")
    if lengths.ndim != 1:
        _fail("lengths", f"expected shape (B,), got {lengths.shape}")
    t = _as_size(t, "t")
    blocked = np.arange(t)[None, :] >= lengths[:, None]  # (B, t)
    return blocked[:, None, None, :]  # (B, 1, 1, t)


def split_heads(x, n_heads):
    """(B, T, C) -> (B, H, T, D) with D = C // H; head h holds features h*D .. (h+1)*D - 1."""
    x = _as_float(x, "x", ndim=3)
    n_heads = _as_size(n_heads, "n_heads", minimum=1)
    B, T, C = x.shape
    if C % n_heads:
        _fail("n_heads", f"C={C} is not divisible by n_heads={n_heads}")
    D = C // n_heads
    heads = x.reshape(B, T, n_heads, D)  # (B, T, H, D)
    return np.ascontiguousarray(heads.transpose(0, 2, 1, 3))  # (B, H, T, D)


def merge_heads(x):
    """(B, H, T, D) -> (B, T, H * D), the inverse of split_heads."""
    x = _as_float(x, "x", ndim=4)
    B, H, T, D = x.shape
    return np.ascontiguousarray(x.transpose(0, 2, 1, 3)).reshape(B, T, H * D)  # (B, T, H*D)


def repeat_kv(x, n_rep):
    """(B, Hkv, T, D) -> (B, Hkv * n_rep, T, D); output head h is input head h // n_rep."""
    x = _as_float(x, "x", ndim=4)
    n_rep = _as_size(n_rep, "n_rep", minimum=1)
    return np.repeat(x, n_rep, axis=1)


def _rope_base(theta, scaling, factor, D: int) -> tuple[float, float]:
    """(base, position divisor): interpolation divides the positions, NTK widens the base."""
    if scaling not in (None, "linear", "ntk"):
        _fail("scaling", f"expected None, 'linear' or 'ntk', got {scaling!r}")
    factor = _number(factor, "factor")
    if not 1.0 <= factor < np.inf:
        _fail("factor", f"must be >= 1, got {factor!r}")
    theta = _number(theta, "theta")
    if not 0 < theta < np.inf:
        _fail("theta", f"must be > 0, got {theta!r}")
    if scaling == "linear":
        return theta, factor
    if scaling == "ntk":
        if D < 4:
            _fail("x", f"NTK scaling needs a head width D >= 4 (exponent D / (D - 2)), got D={D}")
        return theta * factor ** (D / (D - 2)), 1.0
    return theta, 1.0


def _check_positions(positions, shape: tuple[int, ...]) -> np.ndarray:
    """positions int (T,), or (B, T) for x (B, ..., T, D)."""
    positions = np.asarray(positions)
    if not np.issubdtype(positions.dtype, np.integer):
        raise TypeError(f"positions: expected integers, got dtype {positions.dtype}")
    T = shape[-2]
    if positions.shape == (T,):
        return positions
    if len(shape) >= 3 and positions.shape == (shape[0], T):
        return positions
    want = f"({T},) or ({shape[0]}, {T})" if len(shape) >= 3 else f"({T},)"
    _fail("positions", f"expected shape {want} to match x {shape}, got {positions.shape}")


def rope(x, positions, theta=10000.0, scaling=None, factor=1.0):
    """Rotate interleaved pairs (x[..., 2i], x[..., 2i+1]) of row t by positions[t] * theta**(-2i/D).

    x (..., T, D) with D even; positions int (T,), or (B, T) for x (B, ..., T, D)
    (batch b's row t uses positions[b, t]). scaling "linear" rotates by
    positions / factor (position interpolation); "ntk" keeps the positions and
    raises the base to theta * factor ** (D / (D - 2)).
    """
    x = _as_float(x, "x")
    if x.ndim < 2:
        _fail("x", f"expected (..., T, D), got shape {x.shape}")
    D = x.shape[-1]
    if D % 2:
        _fail("x", f"RoPE needs an even head width D, got D={D}")
    base, divisor = _rope_base(theta, scaling, factor, D)
    positions = _check_positions(positions, x.shape)
    i = np.arange(D // 2)
    inv_freq = base ** (-2.0 * i / D)  # (D/2,)
    angle = (positions.astype(np.float64) / divisor)[..., None] * inv_freq  # (.., T, D/2)
    if positions.ndim == 2:
        angle = angle.reshape(angle.shape[0], *([1] * (x.ndim - 3)), *angle.shape[1:])
    cos, sin = np.cos(angle), np.sin(angle)
    even, odd = x[..., 0::2], x[..., 1::2]  # (..., T, D/2) each
    out = np.empty(x.shape, dtype=_float_dtype(x))
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = even * sin + odd * cos
    return out


def sinusoidal_positions(seq_len, d_model):
    """(seq_len, d_model): PE[p, 2i] = sin(p / 10000**(2i/d_model)), PE[p, 2i+1] = cos(...)."""
    seq_len = _as_size(seq_len, "seq_len")
    d_model = _as_size(d_model, "d_model", minimum=1)
    p = np.arange(seq_len, dtype=np.float64)[:, None]
    two_i = np.arange(0, d_model, 2, dtype=np.float64)
    angle = p / 10000.0 ** (two_i / d_model)  # (seq_len, ceil(d_model / 2))
    pe = np.empty((seq_len, d_model))
    pe[:, 0::2] = np.sin(angle)
    pe[:, 1::2] = np.cos(angle[:, : d_model // 2])
    return pe


def _check_vector(w, arg: str, width: int) -> np.ndarray:
    w = _as_float(w, arg)
    if w.shape != (width,):
        _fail(arg, f"expected shape ({width},), got {w.shape}")
    return w


def rms_norm(x, weight, eps=1e-6):
    """x / sqrt(mean(x**2, axis=-1) + eps) * weight, over the last axis C."""
    x = _as_float(x, "x")
    weight = _check_vector(weight, "weight", x.shape[-1])
    rms = np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return (x / rms * weight).astype(_float_dtype(x), copy=False)


def layer_norm(x, weight, bias, eps=1e-5):
    """(x - mean) / sqrt(var + eps) * weight + bias, biased variance over the last axis."""
    x = _as_float(x, "x")
    weight = _check_vector(weight, "weight", x.shape[-1])
    bias = _check_vector(bias, "bias", x.shape[-1])
    mean = np.mean(x, axis=-1, keepdims=True)
    centred = x - mean
    var = np.mean(centred * centred, axis=-1, keepdims=True)
    return (centred / np.sqrt(var + eps) * weight + bias).astype(_float_dtype(x), copy=False)


def _check_matrix(w, arg: str, rows: int) -> np.ndarray:
    w = _as_float(w, arg, ndim=2)
    if w.shape[0] != rows:
        _fail(arg, f"expected {rows} rows (in_features), got shape {w.shape}")
    return w


def relu_ffn(x, w1, b1, w2, b2):
    """max(0, x @ w1 + b1) @ w2 + b2; x (..., C), w1 (C, F), w2 (F, C)."""
    x = _as_float(x, "x")
    w1 = _check_matrix(w1, "w1", x.shape[-1])
    b1 = _check_vector(b1, "b1", w1.shape[1])
    w2 = _check_matrix(w2, "w2", w1.shape[1])
    b2 = _check_vector(b2, "b2", w2.shape[1])
    hidden = np.maximum(x @ w1 + b1, 0.0)  # (..., F)
    return (hidden @ w2 + b2).astype(_float_dtype(x), copy=False)


def _silu(z: np.ndarray) -> np.ndarray:
    # sigmoid(z) = (1 + tanh(z / 2)) / 2 never overflows, unlike 1 / (1 + exp(-z)).
    return z * (0.5 * (1.0 + np.tanh(0.5 * z)))


def swiglu_ffn(x, w_gate, w_up, w_down):
    """(silu(x @ w_gate) * (x @ w_up)) @ w_down; x (..., C), w_gate/w_up (C, F), w_down (F, C)."""
    x = _as_float(x, "x")
    w_gate = _check_matrix(w_gate, "w_gate", x.shape[-1])
    w_up = _check_matrix(w_up, "w_up", x.shape[-1])
    if w_up.shape != w_gate.shape:
        _fail("w_up", f"expected shape {w_gate.shape} like w_gate, got {w_up.shape}")
    w_down = _check_matrix(w_down, "w_down", w_gate.shape[1])
    hidden = _silu(x @ w_gate) * (x @ w_up)  # (..., F)
    return (hidden @ w_down).astype(_float_dtype(x), copy=False)
