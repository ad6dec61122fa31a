"""Reference decoder block on PyTorch: multi-head attention, decode with a cache, block, model.

Follows HF's LlamaAttention (手撕 §09): project, `view(B, T, H, D).transpose(1, 2)`,
RoPE on Q and K, append to the cache, `repeat_kv`, attend, merge, `o_proj`.
Weights are (in_features, out_features): y = x @ w.

The tensor functions here serve contract v2 as well (`labctl.reference.v2_block`): they take
v2's token positions and ALiBi's bias where v2 passes them, and do v1's work without.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F

from labctl.reference._boundary import fail, float_dtype, ints, matrix, numpy, size, tensor, vector
from labctl.reference.attention import sdpa_t
from labctl.reference.primitives import (
    causal_mask_t,
    merge_heads_t,
    repeat_kv_t,
    rms_norm_t,
    rope_t,
    sinusoidal_positions_t,
    sliding_window_mask_t,
    split_heads_t,
    swiglu_ffn_t,
)

BLOCK_KEYS = ("norm1", "wq", "wk", "wv", "wo", "norm2", "w_gate", "w_up", "w_down")


def _heads(C: int, n_heads, n_kv_heads) -> tuple[int, int, int]:
    H = size(n_heads, "n_heads", minimum=1)
    Hkv = H if n_kv_heads is None else size(n_kv_heads, "n_kv_heads", minimum=1)
    if C % H:
        fail("n_heads", f"C={C} is not divisible by n_heads={H}")
    if H % Hkv:
        fail("n_kv_heads", f"n_heads={H} is not a multiple of n_kv_heads={Hkv}")
    return H, Hkv, C // H


def _weights(C, H, Hkv, D, dtype, wq, wk, wv, wo):
    return (
        matrix(wq, "wq", C, dtype, cols=H * D),
        matrix(wk, "wk", C, dtype, cols=Hkv * D),
        matrix(wv, "wv", C, dtype, cols=Hkv * D),
        matrix(wo, "wo", H * D, dtype, cols=C),
    )


def _mask_t(t_q: int, t_k: int, causal: bool, window) -> torch.Tensor | None:
    if window is not None:
        return sliding_window_mask_t(t_q, size(window, "window", minimum=1), t_k)
    return causal_mask_t(t_q, t_k) if causal else None


def _check_rope(D: int, rope_theta) -> None:
    if rope_theta is not None and D % 2:
        fail("n_heads", f"RoPE needs an even head width, got D={D}")


def attend_t(q, k, v, blocked: torch.Tensor | None, bias: torch.Tensor | None = None):
    """(B, H, Tq, Dv): SDPA with a boolean mask (True = blocked), or with an additive bias
    on the scaled scores (v2's ALiBi) and the mask as -inf in it."""
    if bias is None:
        return sdpa_t(q, k, v, blocked, None)[0]
    n_rep = q.shape[1] // k.shape[1]
    additive = bias.to(q.dtype)
    if blocked is not None:
        additive = additive.masked_fill(blocked, float("-inf"))
    return F.scaled_dot_product_attention(
        q, repeat_kv_t(k, n_rep), repeat_kv_t(v, n_rep), attn_mask=additive
    )


def mha_t(x, wq, wk, wv, wo, H, Hkv, causal, window, rope_theta, positions=None, bias=None):
    B, T, C = x.shape
    q = split_heads_t(x @ wq, H)  # (B, H, T, D)
    k = split_heads_t(x @ wk, Hkv)  # (B, Hkv, T, D)
    v = split_heads_t(x @ wv, Hkv)  # (B, Hkv, T, D)
    if rope_theta is not None:
        positions = torch.arange(T) if positions is None else positions
        q, k = rope_t(q, positions, rope_theta), rope_t(k, positions, rope_theta)
    out = attend_t(q, k, v, _mask_t(T, T, causal, window), bias)
    return merge_heads_t(out) @ wo  # (B, T, C)


def multi_head_attention(
    x, wq, wk, wv, wo, n_heads, n_kv_heads=None, causal=True, window=None, rope_theta=None
):
    t = tensor(x, "x", ndim=3)
    C = t.shape[2]
    H, Hkv, D = _heads(C, n_heads, n_kv_heads)
    _check_rope(D, rope_theta)
    w = _weights(C, H, Hkv, D, t.dtype, wq, wk, wv, wo)
    return numpy(mha_t(t, *w, H, Hkv, causal, window, rope_theta))


def attention_decode(
    x_new, past_k, past_v, wq, wk, wv, wo, n_heads, n_kv_heads=None, window=None, rope_theta=None
):
    return decode(x_new, past_k, past_v, wq, wk, wv, wo, n_heads, n_kv_heads, window, rope_theta)


def decode(x_new, past_k, past_v, wq, wk, wv, wo, n_heads, n_kv_heads, window, rope_theta, at=None):
    """`attention_decode`; `at(B, Tn, Tp)` gives the new tokens' positions (v2's), by
    default Tp .. Tp+Tn-1."""
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
    positions = torch.arange(Tp, Tp + Tn) if at is None else at(B, Tn, Tp)
    q = split_heads_t(t @ wq, H)  # (B, H, Tn, D)
    k = split_heads_t(t @ wk, Hkv)  # (B, Hkv, Tn, D)
    v = split_heads_t(t @ wv, Hkv)  # (B, Hkv, Tn, D)
    if rope_theta is not None:
        q, k = rope_t(q, positions, rope_theta), rope_t(k, positions, rope_theta)
    if past_k is not None:
        k, v = torch.cat([past_k, k], dim=2), torch.cat([past_v, v], dim=2)  # (B, Hkv, Tp+Tn, D)
    out = attend_t(q, k, v, _mask_t(Tn, Tp + Tn, True, window))
    return numpy(merge_heads_t(out) @ wo), numpy(k), numpy(v)


def _block_tensors(params, C: int, H: int, Hkv: int, D: int, dtype) -> dict[str, torch.Tensor]:
    if not isinstance(params, Mapping):
        raise TypeError(f"params: expected a mapping of weights, got {type(params).__name__}")
    missing = [key for key in BLOCK_KEYS if key not in params]
    if missing:
        fail("params", f"missing {', '.join(missing)}")
    wq, wk, wv, wo = _weights(
        C, H, Hkv, D, dtype, params["wq"], params["wk"], params["wv"], params["wo"]
    )
    w_gate = matrix(params["w_gate"], "w_gate", C, dtype)
    return {
        "norm1": vector(params["norm1"], "norm1", C, dtype),
        "norm2": vector(params["norm2"], "norm2", C, dtype),
        "wq": wq,
        "wk": wk,
        "wv": wv,
        "wo": wo,
        "w_gate": w_gate,
        "w_up": matrix(params["w_up"], "w_up", C, dtype, cols=w_gate.shape[1]),
        "w_down": matrix(params["w_down"], "w_down", w_gate.shape[1], dtype, cols=C),
    }


def block_t(
    x, p: dict[str, torch.Tensor], H, Hkv, eps, rope_theta, window, positions=None, bias=None
) -> torch.Tensor:
    attended = mha_t(
        rms_norm_t(x, p["norm1"], eps), p["wq"], p["wk"], p["wv"], p["wo"],
        H, Hkv, True, window, rope_theta, positions, bias,
    )  # fmt: skip
    h = x + attended
    return h + swiglu_ffn_t(rms_norm_t(h, p["norm2"], eps), p["w_gate"], p["w_up"], p["w_down"])


def transformer_block(x, params, n_heads, n_kv_heads=None, eps=1e-6, rope_theta=None, window=None):
    t = tensor(x, "x", ndim=3)
    C = t.shape[2]
    H, Hkv, D = _heads(C, n_heads, n_kv_heads)
    _check_rope(D, rope_theta)
    p = _block_tensors(params, C, H, Hkv, D, t.dtype)
    return numpy(block_t(t, p, H, Hkv, eps, rope_theta, window))


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
    if positional not in ("sinusoidal", "rope", "none"):
        fail("positional", f"expected 'sinusoidal', 'rope' or 'none', got {positional!r}")
    return numpy(
        decoder_t(token_ids, params, n_heads, n_kv_heads, eps, positional, rope_theta, window)
    )


def decoder_t(token_ids, params, n_heads, n_kv_heads, eps, positional, rope_theta, window, v2=None):
    """The model's logits (B, T, V). `v2(x, ids, embed, H)`, where contract v2 calls it, adds
    v2's positions to the embedded tokens and gives (x, ALiBi's bias or None, the output
    head or None for the tied embedᵀ)."""
    if not isinstance(params, Mapping) or any(
        key not in params for key in ("embed", "blocks", "final_norm")
    ):
        fail("params", "expected a mapping with embed, blocks and final_norm")
    if v2 is not None and positional == "learned" and "pos_embed" not in params:
        fail("params", "positional='learned' needs pos_embed (Tmax, C)")
    dtype = float_dtype(params["embed"])
    embed = tensor(params["embed"], "embed", dtype, ndim=2)
    V, C = embed.shape
    ids = ints(token_ids, "token_ids")
    if ids.ndim != 2:
        fail("token_ids", f"expected shape (B, T), got {tuple(ids.shape)}")
    if ids.numel() and (ids.min() < 0 or ids.max() >= V):
        fail("token_ids", f"ids must lie in [0, {V}), got [{int(ids.min())}, {int(ids.max())}]")
    H, Hkv, D = _heads(C, n_heads, n_kv_heads)
    theta = rope_theta if positional == "rope" else None
    _check_rope(D, theta)
    x = F.embedding(ids, embed)  # (B, T, C)
    if positional == "sinusoidal":
        x = x + sinusoidal_positions_t(ids.shape[1], C).to(dtype)
    bias = head = None
    if v2 is not None:
        x, bias, head = v2(x, ids, embed, H)
    for block in params["blocks"]:
        x = block_t(
            x, _block_tensors(block, C, H, Hkv, D, dtype), H, Hkv, eps, theta, window, None, bias
        )
    x = rms_norm_t(x, vector(params["final_norm"], "final_norm", C, dtype), eps)
    return x @ (embed.T if head is None else head)  # (B, T, V)
