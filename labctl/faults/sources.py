"""The clean room's functions as fault sources, each with one place left for a fault to fill:
the checks and projections stay the clean room's, so a fault differs from it only where its
bug is."""

from __future__ import annotations

import textwrap

_TILED_HEAD = """
        q, k, v, n_rep = _check_qkv(q, k, v)
        block_size = _as_size(block_size, "block_size", minimum=1)
        k = repeat_kv(k, n_rep)
        v = repeat_kv(v, n_rep)
        B, H, Tq, D = q.shape
        Tk, Dv = k.shape[2], v.shape[3]
        s = _scale(scale, D)
        position = (Tk - Tq) + np.arange(Tq)[:, None]
"""


def tiled_source(body: str) -> str:
    """A tiled_attention whose checks and head are the clean room's, with `body` after them."""
    return "def tiled_attention(q, k, v, block_size, causal=True, scale=None):" + _TILED_HEAD + body


_DECODE = """
def attention_decode(x_new, past_k, past_v, wq, wk, wv, wo, n_heads, n_kv_heads=None, window=None, rope_theta=None):
    x_new = _as_float(x_new, "x_new", ndim=3)
    B, Tn, C = x_new.shape
    H, Hkv, D = _heads(C, n_heads, n_kv_heads)
    _check_rope(D, rope_theta)
    wq, wk, wv, wo = _check_projections(C, H, Hkv, D, _float_dtype(x_new), wq, wk, wv, wo)
    if window is not None:
        _as_size(window, "window", minimum=1)
{cache}
    Tp = 0 if past_k is None else np.shape(past_k)[2]
    q = split_heads(x_new @ wq, H)
    k_new = split_heads(x_new @ wk, Hkv)
    v_new = split_heads(x_new @ wv, Hkv)
    if rope_theta is not None:
{rotate}
    k_all = {k_all}
    v_all = {v_all}
    out, _ = scaled_dot_product_attention(q, k_all, v_all, _mask(Tn, k_all.shape[2], True, window))
    return merge_heads(out) @ wo, k_all, v_all
"""


def decode_source(
    cache: str, k_all: str, v_all: str, rotated: tuple[str, ...] = ("q", "k_new")
) -> str:
    """An attention_decode whose checks and projections are the clean room's, with `cache`
    (lines run before the cache is read), how it forms the keys and values it attends to, and
    which of the new queries and keys RoPE turns."""
    lines = textwrap.dedent(cache).strip("\n")
    rotate = "\n".join(
        f"        {name} = rope({name}, np.arange(Tp, Tp + Tn), rope_theta)" for name in rotated
    )
    return _DECODE.format(
        cache=textwrap.indent(lines, "    "), rotate=rotate, k_all=k_all, v_all=v_all
    )


# Multi-head attention whose RoPE turns {rotated} alone.
MHA_ROTATING = """
def multi_head_attention(x, wq, wk, wv, wo, n_heads, n_kv_heads=None, causal=True, window=None, rope_theta=None):
    x = _as_float(x, "x", ndim=3)
    B, T, C = x.shape
    H, Hkv, D = _heads(C, n_heads, n_kv_heads)
    _check_rope(D, rope_theta)
    wq, wk, wv, wo = _check_projections(C, H, Hkv, D, _float_dtype(x), wq, wk, wv, wo)
    if window is not None:
        _as_size(window, "window", minimum=1)
    q = split_heads(x @ wq, H)
    k = split_heads(x @ wk, Hkv)
    v = split_heads(x @ wv, Hkv)
    if rope_theta is not None:
        {rotated} = rope({rotated}, np.arange(T), rope_theta)
    out, _ = scaled_dot_product_attention(q, k, v, _mask(T, T, causal, window))
    return merge_heads(out) @ wo
"""

# An online softmax that updates its running sum and output accumulator as given.
ONLINE = """
        running_max = np.full((B, H, Tq, 1), -np.inf)
        running_sum = np.zeros((B, H, Tq, 1))
        acc = np.zeros((B, H, Tq, Dv))
        for start in range(0, Tk, block_size):
            stop = min(start + block_size, Tk)
            scores = (q @ k[:, :, start:stop].swapaxes(-1, -2)) * s
            if causal:
                scores = np.where(np.arange(start, stop)[None, :] > position, -np.inf, scores)
            new_max = np.maximum(running_max, scores.max(axis=-1, keepdims=True))
            shift = np.where(new_max == -np.inf, 0.0, new_max)
            rescale = np.exp(running_max - shift)
            p = np.exp(scores - shift)
            running_sum = {running_sum}
            acc = {acc}
            running_max = new_max
        out = np.divide(acc, running_sum, out=np.zeros_like(acc), where=running_sum > 0)
        return out.astype(_float_dtype(q), copy=False)
"""


# scaled_dot_product_attention whose default (scale None) is `{default}`, d_k the head width.
SDPA_DEFAULT_SCALE = """
_correct_sdpa = scaled_dot_product_attention

def scaled_dot_product_attention(q, k, v, mask=None, scale=None):
    d_k = np.shape(q)[-1]
    return _correct_sdpa(q, k, v, mask, {default} if scale is None else scale)
"""
