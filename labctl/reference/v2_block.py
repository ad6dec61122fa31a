"""Reference for contract v2's widened attention and decoder, on PyTorch, NumPy in and out.

`multi_head_attention` and `attention_decode` take token positions (for RoPE
only: the masks stay by index); `decoder_forward` takes an untied `lm_head`
and two more position schemes, learned absolute positions and ALiBi (a bias
on the scaled scores, inside every block's attention, through SDPA's float
`attn_mask`).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F

from labctl.reference._boundary import fail, float_dtype, ints, matrix, numpy, tensor, vector
from labctl.reference.attention import sdpa_t
from labctl.reference.primitives import (
    merge_heads_t,
    repeat_kv_t,
    rms_norm_t,
    sinusoidal_positions_t,
    split_heads_t,
    swiglu_ffn_t,
)
from labctl.reference.transformer_block import (
    _block_tensors,
    _check_rope,
    _heads,
    _mask_t,
    _weights,
)
from labctl.reference.v2_primitives import alibi_bias_t, learned_positions_t, positions_t, rope_v2_t

POSITIONAL = ("sinusoidal", "rope", "none", "learned", "alibi")


def _positions(positions, B: int, T: int, start: int, given: tuple[str, tuple]) -> torch.Tensor:
    """Positions for RoPE, default start .. start+T-1; `given` names the caller's input
    (x or x_new, as passed) for the message."""
    if positions is None:
        return torch.arange(start, start + T)
    return positions_t(positions, (B, 1, T, 1), given=given)


def _attend(q, k, v, blocked: torch.Tensor | None, bias: torch.Tensor | None):
    """(B, H, Tq, Dv): SDPA with a boolean mask (True = blocked), or with ALiBi's additive bias."""
    if bias is None:
        return sdpa_t(q, k, v, blocked, None)[0]
    n_rep = q.shape[1] // k.shape[1]
    additive = bias.to(q.dtype)
    if blocked is not None:
        additive = additive.masked_fill(blocked, float("-inf"))
    return F.scaled_dot_product_attention(
        q, repeat_kv_t(k, n_rep), repeat_kv_t(v, n_rep), attn_mask=additive
    )


def mha_v2_t(x, wq, wk, wv, wo, H, Hkv, causal, window, rope_theta, positions, bias=None):
    B, T, C = x.shape
    q = split_heads_t(x @ wq, H)  # (B, H, T, D)
    k = split_heads_t(x @ wk, Hkv)  # (B, Hkv, T, D)
    v = split_heads_t(x @ wv, Hkv)  # (B, Hkv, T, D)
    if rope_theta is not None:
        q = rope_v2_t(q, positions, rope_theta, 1.0)
        k = rope_v2_t(k, positions, rope_theta, 1.0)
    out = _attend(q, k, v, _mask_t(T, T, causal, window), bias)
    return merge_heads_t(out) @ wo  # (B, T, C)


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
    t = tensor(x, "x", ndim=3)
    B, T, C = t.shape
    H, Hkv, D = _heads(C, n_heads, n_kv_heads)
    _check_rope(D, rope_theta)
    w = _weights(C, H, Hkv, D, t.dtype, wq, wk, wv, wo)
    p = _positions(positions, B, T, 0, ("x", tuple(t.shape)))
    return numpy(mha_v2_t(t, *w, H, Hkv, causal, window, rope_theta, p))


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
    t = tensor(x_new, "x_new", ndim=3)
    B, Tn, C = t.shape
    H, Hkv, D = _heads(C, n_heads, n_kv_heads)
    _check_rope(D, rope_theta)
    wq, wk, wv, wo = _weights(C, H, Hkv, D, t.dtype, wq, wk, wv, wo)
    if (past_k is None) != (past_v is None):
        fail("past_v", "past_k and past_v must both be arrays or both be None")
    Tp = 0
    if past_k is not None:
        past_k = tensor(past_k, "past_k", t.dtype, ndim=4)
        past_v = tensor(past_v, "past_v", t.dtype, ndim=4)
        if tuple(past_k.shape[:2]) != (B, Hkv) or past_k.shape[3] != D:
            fail("past_k", f"expected (B={B}, Hkv={Hkv}, Tp, D={D}), got {tuple(past_k.shape)}")
        if past_v.shape != past_k.shape:
            fail(
                "past_v",
                f"expected shape {tuple(past_k.shape)} like past_k, got {tuple(past_v.shape)}",
            )
        Tp = past_k.shape[2]
    p = _positions(positions, B, Tn, Tp, ("x_new", tuple(t.shape)))
    q = split_heads_t(t @ wq, H)  # (B, H, Tn, D)
    k = split_heads_t(t @ wk, Hkv)  # (B, Hkv, Tn, D)
    v = split_heads_t(t @ wv, Hkv)  # (B, Hkv, Tn, D)
    if rope_theta is not None:
        q, k = rope_v2_t(q, p, rope_theta, 1.0), rope_v2_t(k, p, rope_theta, 1.0)
    if past_k is not None:
        k, v = torch.cat([past_k, k], dim=2), torch.cat([past_v, v], dim=2)  # (B, Hkv, Tp+Tn, D)
    out = _attend(q, k, v, _mask_t(Tn, Tp + Tn, True, window), None)
    return numpy(merge_heads_t(out) @ wo), numpy(k), numpy(v)


def _block_v2_t(x, p, H, Hkv, eps, rope_theta, window, positions, bias):
    attended = mha_v2_t(
        rms_norm_t(x, p["norm1"], eps), p["wq"], p["wk"], p["wv"], p["wo"],
        H, Hkv, True, window, rope_theta, positions, bias,
    )  # fmt: skip
    h = x + attended
    return h + swiglu_ffn_t(rms_norm_t(h, p["norm2"], eps), p["w_gate"], p["w_up"], p["w_down"])


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
    if positional not in POSITIONAL:
        fail("positional", f"expected one of {', '.join(POSITIONAL)}, got {positional!r}")
    if not isinstance(params, Mapping) or any(
        key not in params for key in ("embed", "blocks", "final_norm")
    ):
        fail("params", "expected a mapping with embed, blocks and final_norm")
    if positional == "learned" and "pos_embed" not in params:
        fail("params", "positional='learned' needs pos_embed (Tmax, C)")
    dtype = float_dtype(params["embed"])
    embed = tensor(params["embed"], "embed", dtype, ndim=2)
    V, C = embed.shape
    ids = ints(token_ids, "token_ids")
    if ids.ndim != 2:
        fail("token_ids", f"expected shape (B, T), got {tuple(ids.shape)}")
    if ids.numel() and (ids.min() < 0 or ids.max() >= V):
        fail("token_ids", f"ids must lie in [0, {V}), got [{int(ids.min())}, {int(ids.max())}]")
    B, T = ids.shape
    H, Hkv, D = _heads(C, n_heads, n_kv_heads)
    theta = rope_theta if positional == "rope" else None
    _check_rope(D, theta)
    head = None
    if "lm_head" in params:
        head = matrix(params["lm_head"], "lm_head", C, dtype, cols=V)
    x = F.embedding(ids, embed)  # (B, T, C)
    if positional == "sinusoidal":
        x = x + sinusoidal_positions_t(T, C).to(dtype)
    elif positional == "learned":
        table = tensor(params["pos_embed"], "pos_embed", dtype, ndim=2)
        if table.shape[1] != C:
            fail("pos_embed", f"expected shape (Tmax, {C}), got {tuple(table.shape)}")
        if table.shape[0] < T:
            fail("token_ids", f"T={T} is longer than pos_embed's {table.shape[0]} positions")
        x = x + learned_positions_t(torch.arange(T), table)
    bias = alibi_bias_t(H, T, T)[None] if positional == "alibi" else None  # (1, H, T, T)
    positions = torch.arange(T)
    for block in params["blocks"]:
        p = _block_tensors(block, C, H, Hkv, D, dtype)
        x = _block_v2_t(x, p, H, Hkv, eps, theta, window, positions, bias)
    x = rms_norm_t(x, vector(params["final_norm"], "final_norm", C, dtype), eps)
    return numpy(x @ (embed.T if head is None else head))  # (B, T, V)
