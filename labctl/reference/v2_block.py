"""Reference for contract v2's widened attention and decoder, on PyTorch, NumPy in and out.

v1's (`labctl.reference.transformer_block`) plus what v2 changes: `multi_head_attention`
and `attention_decode` take token positions (for RoPE only: the masks stay by index);
`decoder_forward` takes an untied `lm_head` and two more position schemes, learned absolute
positions and ALiBi (a bias on the scaled scores, inside every block's attention, through
SDPA's float `attn_mask`).
"""

from __future__ import annotations

import numpy as np
import torch

from labctl.reference._boundary import fail, matrix, numpy, tensor
from labctl.reference.transformer_block import (
    _check_rope,
    _heads,
    _weights,
    decode,
    decoder_t,
    mha_t,
)
from labctl.reference.v2_primitives import alibi_bias_t, learned_positions_t, positions_t

POSITIONAL = ("sinusoidal", "rope", "none", "learned", "alibi")


def _positions(positions, B: int, T: int, start: int, given: tuple[str, tuple]) -> torch.Tensor:
    """Positions for RoPE, default start .. start+T-1; `given` names the caller's input
    (x or x_new, as passed) for the message."""
    if positions is None:
        return torch.arange(start, start + T)
    return positions_t(positions, (B, 1, T, 1), given=given)


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
    return numpy(mha_t(t, *w, H, Hkv, causal, window, rope_theta, p))


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
    def at(B: int, Tn: int, Tp: int) -> torch.Tensor:
        return _positions(positions, B, Tn, Tp, ("x_new", tuple(np.shape(x_new))))

    return decode(
        x_new, past_k, past_v, wq, wk, wv, wo, n_heads, n_kv_heads, window, rope_theta, at
    )


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

    def widened(x, ids, embed, H):
        """v2's part of the model: an untied head, learned positions, ALiBi's bias."""
        (V, C), T = embed.shape, ids.shape[1]
        head = None
        if "lm_head" in params:
            head = matrix(params["lm_head"], "lm_head", C, embed.dtype, cols=V)
        if positional == "learned":
            table = tensor(params["pos_embed"], "pos_embed", embed.dtype, ndim=2)
            if table.shape[1] != C:
                fail("pos_embed", f"expected shape (Tmax, {C}), got {tuple(table.shape)}")
            if table.shape[0] < T:
                fail("token_ids", f"T={T} is longer than pos_embed's {table.shape[0]} positions")
            x = x + learned_positions_t(torch.arange(T), table)
        bias = alibi_bias_t(H, T, T)[None] if positional == "alibi" else None  # (1, H, T, T)
        return x, bias, head

    logits = decoder_t(
        token_ids, params, n_heads, n_kv_heads, eps, positional, rope_theta, window, widened
    )
    return numpy(logits)
