"""The decoder block from the frozen interface: attention, decode with a cache, block, model.

The course's L3 clean-room file (第8章, "L3 clean-room 要求"): QKV projection,
causal attention, head merge, pre-norm residual and FFN, written without the
reference. Weights are (in_features, out_features): y = x @ w.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .attention import scaled_dot_product_attention
from .positions import alibi_bias, learned_positions
from .primitives import (
    _as_float,
    _as_size,
    _check_positions,
    _fail,
    _float_dtype,
    causal_mask,
    merge_heads,
    repeat_kv,
    rms_norm,
    rope,
    sinusoidal_positions,
    sliding_window_mask,
    softmax,
    split_heads,
    swiglu_ffn,
)

BLOCK_KEYS = ("norm1", "wq", "wk", "wv", "wo", "norm2", "w_gate", "w_up", "w_down")


def _heads(C: int, n_heads, n_kv_heads) -> tuple[int, int, int]:
    """Validate head counts against width C; return (H, Hkv, D)."""
    H = _as_size(n_heads, "n_heads", minimum=1)
    Hkv = H if n_kv_heads is None else _as_size(n_kv_heads, "n_kv_heads", minimum=1)
    if C % H:
        _fail("n_heads", f"C={C} is not divisible by n_heads={H}")
    if H % Hkv:
        _fail("n_kv_heads", f"n_heads={H} is not a multiple of n_kv_heads={Hkv}")
    return H, Hkv, C // H


def _check_rope(D: int, rope_theta) -> None:
    if rope_theta is not None and D % 2:
        _fail("n_heads", f"RoPE needs an even head width, got D={D}")


def _check_projections(C, H, Hkv, D, dtype, wq, wk, wv, wo):
    """Check the projection shapes; cast to the activations' dtype so outputs keep it."""
    expected = {"wq": (C, H * D), "wk": (C, Hkv * D), "wv": (C, Hkv * D), "wo": (H * D, C)}
    arrays = {}
    for name, w in zip(expected, (wq, wk, wv, wo), strict=True):
        arrays[name] = _as_float(w, name, ndim=2)
        if arrays[name].shape != expected[name]:
            _fail(name, f"expected shape {expected[name]}, got {arrays[name].shape}")
        arrays[name] = arrays[name].astype(dtype, copy=False)
    return arrays["wq"], arrays["wk"], arrays["wv"], arrays["wo"]


def _mask(t_q: int, t_k: int, causal: bool, window) -> np.ndarray | None:
    if window is not None:
        return sliding_window_mask(t_q, window, t_k)
    return causal_mask(t_q, t_k) if causal else None


def _positions(positions, B: int, T: int, start: int, given) -> np.ndarray:
    """Token positions for RoPE: (T,) or (B, T), default start .. start+T-1; `given` (name,
    shape) is the caller's input as passed, for the message."""
    if positions is None:
        return np.arange(start, start + T)
    return _check_positions(positions, (B, 1, T, 1), given)


def _attend(q, k, v, mask, bias) -> np.ndarray:
    """Attention output (B, H, Tq, Dv); `bias` (H, Tq, Tk) is ALiBi's, added to the scaled scores."""
    if bias is None:
        return scaled_dot_product_attention(q, k, v, mask)[0]
    n_rep = q.shape[1] // k.shape[1]
    k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)  # (B, H, Tk, D)
    scores = (q @ k.swapaxes(-1, -2)) / np.sqrt(q.shape[-1]) + bias  # (B, H, Tq, Tk)
    if mask is not None:
        scores = np.where(mask, -np.inf, scores)
    return (softmax(scores, axis=-1) @ v).astype(_float_dtype(q), copy=False)


def _mha(x, wq, wk, wv, wo, H, Hkv, causal, window, rope_theta, positions, bias=None):
    B, T, C = x.shape
    q = split_heads(x @ wq, H)  # (B, H, T, D)
    k = split_heads(x @ wk, Hkv)  # (B, Hkv, T, D)
    v = split_heads(x @ wv, Hkv)  # (B, Hkv, T, D)
    if rope_theta is not None:
        q = rope(q, positions, rope_theta)
        k = rope(k, positions, rope_theta)
    out = _attend(q, k, v, _mask(T, T, causal, window), bias)
    return merge_heads(out) @ wo  # (B, T, C)


def multi_head_attention(
    x,
    wq,
    wk,
    wv,
    wo,
    n_heads,
    n_kv_heads=None,
    causal=True,
    window=None,
    rope_theta=None,
    positions=None,
):
    """x (B, T, C) -> (B, T, C): project, split heads, RoPE, mask, attend, merge, @ wo.

    RoPE rotates at `positions`, int (T,) or (B, T), default 0..T-1; the mask
    stays by index.
    """
    x = _as_float(x, "x", ndim=3)
    B, T, C = x.shape
    H, Hkv, D = _heads(C, n_heads, n_kv_heads)
    _check_rope(D, rope_theta)
    wq, wk, wv, wo = _check_projections(C, H, Hkv, D, _float_dtype(x), wq, wk, wv, wo)
    if window is not None:
        _as_size(window, "window", minimum=1)
    p = _positions(positions, B, T, 0, ("x", x.shape))
    return _mha(x, wq, wk, wv, wo, H, Hkv, causal, window, rope_theta, p)


def attention_decode(
    x_new,
    past_k,
    past_v,
    wq,
    wk,
    wv,
    wo,
    n_heads,
    n_kv_heads=None,
    window=None,
    rope_theta=None,
    positions=None,
):
    """Attend the next Tn tokens to the cache; return (out (B, Tn, C), k_all, v_all).

    past_k / past_v are (B, Hkv, Tp, D) or None; the new tokens sit at
    `positions`, int (Tn,) or (B, Tn), default Tp .. Tp+Tn-1, and the returned
    caches (B, Hkv, Tp+Tn, D) hold their keys (RoPE applied) and values appended.
    """
    x_new = _as_float(x_new, "x_new", ndim=3)
    B, Tn, C = x_new.shape
    H, Hkv, D = _heads(C, n_heads, n_kv_heads)
    _check_rope(D, rope_theta)
    wq, wk, wv, wo = _check_projections(C, H, Hkv, D, _float_dtype(x_new), wq, wk, wv, wo)
    if window is not None:
        _as_size(window, "window", minimum=1)
    if (past_k is None) != (past_v is None):
        _fail("past_v", "past_k and past_v must both be arrays or both be None")
    Tp = 0
    if past_k is not None:
        past_k = _as_float(past_k, "past_k", ndim=4)
        past_v = _as_float(past_v, "past_v", ndim=4)
        if past_k.shape[:2] != (B, Hkv) or past_k.shape[3] != D:
            _fail("past_k", f"expected (B={B}, Hkv={Hkv}, Tp, D={D}), got {past_k.shape}")
        if past_v.shape != past_k.shape:
            _fail("past_v", f"expected shape {past_k.shape} like past_k, got {past_v.shape}")
        Tp = past_k.shape[2]
    positions = _positions(positions, B, Tn, Tp, ("x_new", x_new.shape))
    q = split_heads(x_new @ wq, H)  # (B, H, Tn, D)
    k_new = split_heads(x_new @ wk, Hkv)  # (B, Hkv, Tn, D)
    v_new = split_heads(x_new @ wv, Hkv)  # (B, Hkv, Tn, D)
    if rope_theta is not None:
        q = rope(q, positions, rope_theta)
        k_new = rope(k_new, positions, rope_theta)
    k_all = k_new if past_k is None else np.concatenate([past_k.astype(k_new.dtype), k_new], axis=2)
    v_all = v_new if past_v is None else np.concatenate([past_v.astype(v_new.dtype), v_new], axis=2)
    out, _ = scaled_dot_product_attention(q, k_all, v_all, _mask(Tn, Tp + Tn, True, window))
    return merge_heads(out) @ wo, k_all, v_all  # (B, Tn, C), (B, Hkv, Tp+Tn, D) x 2


def _check_block_params(params) -> None:
    if not isinstance(params, Mapping):
        raise TypeError(f"params: expected a mapping of weights, got {type(params).__name__}")
    missing = [key for key in BLOCK_KEYS if key not in params]
    if missing:
        _fail("params", f"missing {', '.join(missing)}")


def transformer_block(x, params, n_heads, n_kv_heads=None, eps=1e-6, rope_theta=None, window=None):
    """Pre-norm decoder block, x (B, T, C) -> (B, T, C).

    h = x + multi_head_attention(rms_norm(x, norm1), ...)   (causal)
    out = h + swiglu_ffn(rms_norm(h, norm2), ...)
    """
    x = _as_float(x, "x", ndim=3)
    _check_block_params(params)
    p = params
    attended = multi_head_attention(
        rms_norm(x, p["norm1"], eps), p["wq"], p["wk"], p["wv"], p["wo"],
        n_heads, n_kv_heads, causal=True, window=window, rope_theta=rope_theta,
    )  # fmt: skip
    h = x + attended
    return h + swiglu_ffn(rms_norm(h, p["norm2"], eps), p["w_gate"], p["w_up"], p["w_down"])


def _alibi_block(x, p, n_heads, n_kv_heads, eps, window, bias) -> np.ndarray:
    """transformer_block with ALiBi's bias (H, T, T) on the attention scores and no RoPE."""
    _check_block_params(p)
    B, T, C = x.shape
    H, Hkv, D = _heads(C, n_heads, n_kv_heads)
    wq, wk, wv, wo = _check_projections(
        C, H, Hkv, D, _float_dtype(x), p["wq"], p["wk"], p["wv"], p["wo"]
    )
    normed = rms_norm(x, p["norm1"], eps)
    h = x + _mha(normed, wq, wk, wv, wo, H, Hkv, True, window, None, None, bias)
    return h + swiglu_ffn(rms_norm(h, p["norm2"], eps), p["w_gate"], p["w_up"], p["w_down"])


def _positional(params, positional, x: np.ndarray, n_heads) -> tuple[np.ndarray, object]:
    """x with the absolute positions added, and ALiBi's bias (H, T, T) or None."""
    T, C = x.shape[1:]
    if positional == "sinusoidal":
        return x + sinusoidal_positions(T, C).astype(x.dtype), None
    if positional == "learned":
        table = _as_float(params["pos_embed"], "pos_embed", ndim=2)
        if table.shape[1] != C:
            _fail("pos_embed", f"expected shape (Tmax, {C}), got {table.shape}")
        if table.shape[0] < T:
            _fail("token_ids", f"T={T} is longer than pos_embed's {table.shape[0]} positions")
        return x + learned_positions(np.arange(T), table).astype(x.dtype), None
    if positional == "alibi":
        return x, alibi_bias(_as_size(n_heads, "n_heads", minimum=1), T)
    return x, None


def decoder_forward(
    token_ids,
    params,
    n_heads,
    n_kv_heads=None,
    eps=1e-6,
    positional="sinusoidal",
    rope_theta=10000.0,
    window=None,
):
    """token_ids int (B, T) -> logits (B, T, V).

    Positions: "sinusoidal" or "learned" (pos_embed (Tmax, C)) added to the
    embeddings, "rope" inside attention, "alibi" as a bias on the scores,
    "none". Logits are x @ lm_head (C, V) when params hold one (untied), else
    x @ embed.T (tied).
    """
    if positional not in ("sinusoidal", "rope", "none", "learned", "alibi"):
        _fail(
            "positional",
            f"expected 'sinusoidal', 'rope', 'none', 'learned' or 'alibi', got {positional!r}",
        )
    if not isinstance(params, Mapping) or any(
        k not in params for k in ("embed", "blocks", "final_norm")
    ):
        _fail("params", "expected a mapping with embed, blocks and final_norm")
    if positional == "learned" and "pos_embed" not in params:
        _fail("params", "positional='learned' needs pos_embed (Tmax, C)")
    embed = _as_float(params["embed"], "embed", ndim=2)
    V, C = embed.shape
    head = embed.T
    if "lm_head" in params:
        head = _as_float(params["lm_head"], "lm_head", ndim=2)
        if head.shape != (C, V):
            _fail("lm_head", f"expected shape ({C}, {V}), got {head.shape}")
        head = head.astype(_float_dtype(embed), copy=False)
    ids = np.asarray(token_ids)
    if not np.issubdtype(ids.dtype, np.integer):
        raise TypeError(f"token_ids: expected integers, got dtype {ids.dtype}")
    if ids.ndim != 2:
        _fail("token_ids", f"expected shape (B, T), got {ids.shape}")
    if ids.size and (ids.min() < 0 or ids.max() >= V):
        _fail("token_ids", f"ids must lie in [0, {V}), got [{ids.min()}, {ids.max()}]")
    x, bias = _positional(params, positional, embed[ids], n_heads)  # (B, T, C)
    theta = rope_theta if positional == "rope" else None
    if window is not None:
        _as_size(window, "window", minimum=1)
    for block in params["blocks"]:
        if bias is None:
            x = transformer_block(
                x, block, n_heads, n_kv_heads, eps, rope_theta=theta, window=window
            )
        else:
            x = _alibi_block(x, block, n_heads, n_kv_heads, eps, window, bias)
    x = rms_norm(x, params["final_norm"], eps)
    return x @ head  # (B, T, V)
