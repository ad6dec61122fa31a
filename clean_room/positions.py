"""Contract v2's position schemes beside RoPE and the sinusoid: ALiBi and a learned table.

ALiBi (Press et al., 2022) adds no vector to the tokens: each head h adds
-m_h * (distance to the key) to its attention scores, with slopes m_h a
geometric sequence. A learned table is one trained row per absolute position.
"""

from __future__ import annotations

import numpy as np

from .primitives import _as_float, _as_size, _fail


def _power_of_two_slopes(n: int) -> np.ndarray:
    return 2.0 ** (-8.0 * np.arange(1, n + 1) / n)  # m_h = 2 ** (-8 (h + 1) / n)


def alibi_slopes(n_heads):
    """float64 (H,): for H a power of two 2 ** (-8 (h + 1) / H); else the slopes of the
    closest lower power of two n, then every other slope of 2n (the paper's rule)."""
    H = _as_size(n_heads, "n_heads", minimum=1)
    n = 1 << (H.bit_length() - 1)  # the largest power of two <= H
    if n == H:
        return _power_of_two_slopes(H)
    return np.concatenate([_power_of_two_slopes(n), _power_of_two_slopes(2 * n)[0::2][: H - n]])


def alibi_bias(n_heads, t_q, t_k=None):
    """float64 (H, Tq, Tk): bias[h, i, j] = -slopes[h] * (p_i - j), p_i = Tk - Tq + i.

    Bottom-right aligned like causal_mask; entries with j > p_i are positive and
    left for the causal mask to block.
    """
    slopes = alibi_slopes(n_heads)
    t_q = _as_size(t_q, "t_q")
    t_k = t_q if t_k is None else _as_size(t_k, "t_k")
    p = (t_k - t_q) + np.arange(t_q, dtype=np.float64)[:, None]  # (Tq, 1)
    distance = p - np.arange(t_k, dtype=np.float64)[None, :]  # (Tq, Tk)
    return -slopes[:, None, None] * distance[None, :, :]  # (H, Tq, Tk)


def learned_positions(positions, table):
    """table[positions]: positions int (T,) or (B, T), table (Tmax, C) -> (T, C) or (B, T, C)."""
    positions = np.asarray(positions)
    if not np.issubdtype(positions.dtype, np.integer):
        raise TypeError(f"positions: expected integers, got dtype {positions.dtype}")
    if positions.ndim not in (1, 2):
        _fail("positions", f"expected shape (T,) or (B, T), got {positions.shape}")
    table = _as_float(table, "table", ndim=2)
    if positions.size and (positions.min() < 0 or positions.max() >= table.shape[0]):
        _fail(
            "positions",
            f"must lie in [0, {table.shape[0]}) (the table's rows), "
            f"got [{positions.min()}, {positions.max()}]",
        )
    out = table[positions]
    return out if np.issubdtype(out.dtype, np.floating) else out.astype(np.float64)
