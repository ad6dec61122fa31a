"""Scaled dot-product attention, once with the whole score matrix and once tiled.

softmax(Q K^T / sqrt(D) + M) V, where M is -inf on blocked keys (True in a
mask). Query head h reads key/value head h // (H // Hkv).
"""

from __future__ import annotations

import math

import numpy as np

from .primitives import _as_float, _as_size, _fail, _float_dtype, repeat_kv, softmax


def _check_qkv(q, k, v) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Validate q (B, H, Tq, D), k (B, Hkv, Tk, D), v (B, Hkv, Tk, Dv); return n_rep = H // Hkv."""
    q = _as_float(q, "q", ndim=4)
    k = _as_float(k, "k", ndim=4)
    v = _as_float(v, "v", ndim=4)
    B, H, _, D = q.shape
    if k.shape[0] != B or v.shape[0] != B:
        _fail("k", f"batch {k.shape[0]} / v batch {v.shape[0]} do not match q batch {B}")
    if k.shape[3] != D:
        _fail("k", f"head width {k.shape[3]} does not match q head width {D}")
    if k.shape[1] != v.shape[1] or k.shape[2] != v.shape[2]:
        _fail("v", f"shape {v.shape} does not match k heads and length {k.shape[:3]}")
    Hkv = k.shape[1]
    if Hkv == 0 or H % Hkv:
        _fail("k", f"query heads H={H} are not a multiple of key/value heads Hkv={Hkv}")
    return q, k, v, H // Hkv


def _scale(scale, D: int) -> float:
    return 1.0 / math.sqrt(D) if scale is None else float(scale)


def scaled_dot_product_attention(q, k, v, mask=None, scale=None):
    """Return (out (B, H, Tq, Dv), weights (B, H, Tq, Tk)); mask is bool, True = blocked."""
    q, k, v, n_rep = _check_qkv(q, k, v)
    k = repeat_kv(k, n_rep)  # (B, H, Tk, D)
    v = repeat_kv(v, n_rep)  # (B, H, Tk, Dv)
    scores = (q @ k.swapaxes(-1, -2)) * _scale(scale, q.shape[-1])  # (B, H, Tq, Tk)
    if mask is not None:
        mask = np.asarray(mask)
        if mask.dtype != np.bool_:
            raise TypeError(
                f"mask: expected a boolean array (True = blocked), got dtype {mask.dtype}"
            )
        try:
            mask = np.broadcast_to(mask, scores.shape)
        except ValueError:
            _fail("mask", f"shape {mask.shape} does not broadcast to {scores.shape}")
        scores = np.where(mask, -np.inf, scores)
    weights = softmax(scores, axis=-1)
    dtype = _float_dtype(q)
    return (weights @ v).astype(dtype, copy=False), weights.astype(dtype, copy=False)


def tiled_attention(q, k, v, block_size, causal=True, scale=None):
    """The output of scaled_dot_product_attention, over key blocks with an online softmax.

    A running max m, running sum l and running output acc per query row are
    rescaled by exp(m_old - m_new) whenever a block raises the max, so no
    (Tq, Tk) score array is ever held.
    """
    q, k, v, n_rep = _check_qkv(q, k, v)
    block_size = _as_size(block_size, "block_size", minimum=1)
    k = repeat_kv(k, n_rep)  # (B, H, Tk, D)
    v = repeat_kv(v, n_rep)  # (B, H, Tk, Dv)
    B, H, Tq, _ = q.shape
    Tk, Dv = k.shape[2], v.shape[3]
    s = _scale(scale, q.shape[-1])
    position = (Tk - Tq) + np.arange(Tq)[:, None]  # (Tq, 1): bottom-right causal alignment
    running_max = np.full((B, H, Tq, 1), -np.inf)
    running_sum = np.zeros((B, H, Tq, 1))
    acc = np.zeros((B, H, Tq, Dv))
    for start in range(0, Tk, block_size):
        stop = min(start + block_size, Tk)
        scores = (q @ k[:, :, start:stop].swapaxes(-1, -2)) * s  # (B, H, Tq, block)
        if causal:
            scores = np.where(np.arange(start, stop)[None, :] > position, -np.inf, scores)
        new_max = np.maximum(running_max, scores.max(axis=-1, keepdims=True))
        # A row with every key so far blocked keeps max -inf; shift by 0 so exp gives 0, not NaN.
        shift = np.where(new_max == -np.inf, 0.0, new_max)
        rescale = np.exp(running_max - shift)
        p = np.exp(scores - shift)  # (B, H, Tq, block)
        running_sum = running_sum * rescale + p.sum(axis=-1, keepdims=True)
        acc = acc * rescale + p @ v[:, :, start:stop]
        running_max = new_max
    out = np.divide(acc, running_sum, out=np.zeros_like(acc), where=running_sum > 0)
    return out.astype(_float_dtype(q), copy=False)


def attention_entropy(weights, axis=-1):
    """-sum(w ln w) over `axis` (removed), in nats, with 0 ln 0 = 0: an all-zero row gives 0."""
    w = _as_float(weights, "weights")
    if not -w.ndim <= axis < max(w.ndim, 1):
        _fail("axis", f"out of range for an array of {w.ndim} dimensions")
    if np.any(w < 0):
        _fail("weights", "attention weights must be >= 0")
    safe = np.where(w > 0, w, 1.0)
    terms = np.where(w > 0, -w * np.log(safe), 0.0)
    return np.sum(terms, axis=axis).astype(_float_dtype(w), copy=False)
