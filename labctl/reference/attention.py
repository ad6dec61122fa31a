"""Reference attention: PyTorch's `F.scaled_dot_product_attention`, and a tiled online softmax.

Contract masks are True = blocked; SDPA's boolean `attn_mask` is True = attend,
so the mask is inverted at the call. GQA goes through SDPA's `enable_gqa`
(torch >= 2.5) and the weights through HF's `repeat_kv` layout.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from labctl.reference._boundary import fail, float_dtype, numpy, size, tensor
from labctl.reference.primitives import repeat_kv_t, softmax_t

_HAS_ENABLE_GQA = tuple(int(p) for p in torch.__version__.split(".")[:2]) >= (2, 5)


def check_qkv(q, k, v) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """Tensors of q (B, H, Tq, D), k (B, Hkv, Tk, D), v (B, Hkv, Tk, Dv) in q's dtype, and H // Hkv."""
    dtype = float_dtype(q)
    q, k, v = (tensor(a, name, dtype, ndim=4) for a, name in ((q, "q"), (k, "k"), (v, "v")))
    B, H, _, D = q.shape
    if k.shape[0] != B or v.shape[0] != B:
        fail("k", f"batch {k.shape[0]} / v batch {v.shape[0]} do not match q batch {B}")
    if k.shape[3] != D:
        fail("k", f"head width {k.shape[3]} does not match q head width {D}")
    if k.shape[1:3] != v.shape[1:3]:
        fail("v", f"shape {tuple(v.shape)} does not match k heads and length {tuple(k.shape[:3])}")
    if k.shape[1] == 0 or H % k.shape[1]:
        fail("k", f"query heads H={H} are not a multiple of key/value heads Hkv={k.shape[1]}")
    return q, k, v, H // k.shape[1]


def sdpa_t(q, k, v, blocked: torch.Tensor | None, scale: float | None):
    """(out (B, H, Tq, Dv), weights (B, H, Tq, Tk)) for tensors; `blocked` is True = blocked."""
    B, H, Tq, D = q.shape
    n_rep = H // k.shape[1]
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    attend = None if blocked is None else ~blocked
    if _HAS_ENABLE_GQA:
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attend, scale=scale, enable_gqa=n_rep > 1
        )
    else:
        out = F.scaled_dot_product_attention(
            q, repeat_kv_t(k, n_rep), repeat_kv_t(v, n_rep), attn_mask=attend, scale=scale
        )
    scores = (q @ repeat_kv_t(k, n_rep).transpose(-2, -1)) * scale  # (B, H, Tq, Tk)
    if blocked is not None:
        scores = scores.masked_fill(blocked, float("-inf"))
        # Older SDPA kernels return NaN on a fully blocked row; the contract says zeros.
        dead = blocked.expand_as(scores).all(dim=-1, keepdim=True)  # (B, H, Tq, 1)
        out = torch.where(dead, torch.zeros((), dtype=out.dtype), out)
    return out, softmax_t(scores, -1)


def _mask_tensor(mask, shape: tuple[int, ...]) -> torch.Tensor:
    array = np.asarray(mask)
    if array.dtype != np.bool_:
        raise TypeError(f"mask: expected a boolean array (True = blocked), got dtype {array.dtype}")
    try:
        return torch.from_numpy(np.broadcast_to(array, shape).copy())
    except ValueError:
        fail("mask", f"shape {array.shape} does not broadcast to {shape}")


def scaled_dot_product_attention(q, k, v, mask=None, scale=None):
    q, k, v, _ = check_qkv(q, k, v)
    shape = (q.shape[0], q.shape[1], q.shape[2], k.shape[2])  # (B, H, Tq, Tk)
    blocked = None if mask is None else _mask_tensor(mask, shape)
    out, weights = sdpa_t(q, k, v, blocked, scale)
    return numpy(out), numpy(weights)


def tiled_attention(q, k, v, block_size, causal=True, scale=None):
    """Online softmax over key blocks (FlashAttention's recurrence, course 手撕 §07.5)."""
    q, k, v, n_rep = check_qkv(q, k, v)
    block_size = size(block_size, "block_size", minimum=1)
    k, v = repeat_kv_t(k, n_rep), repeat_kv_t(v, n_rep)  # (B, H, Tk, D), (B, H, Tk, Dv)
    B, H, Tq, D = q.shape
    Tk = k.shape[2]
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    position = (Tk - Tq) + torch.arange(Tq)[:, None]  # (Tq, 1), bottom-right aligned
    running_max = torch.full((B, H, Tq, 1), float("-inf"), dtype=q.dtype)
    running_sum = torch.zeros((B, H, Tq, 1), dtype=q.dtype)
    acc = torch.zeros((B, H, Tq, v.shape[3]), dtype=q.dtype)
    for start in range(0, Tk, block_size):
        stop = min(start + block_size, Tk)
        scores = (q @ k[:, :, start:stop].transpose(-2, -1)) * scale  # (B, H, Tq, block)
        if causal:
            scores = scores.masked_fill(
                torch.arange(start, stop)[None, :] > position, float("-inf")
            )
        new_max = torch.maximum(running_max, scores.amax(dim=-1, keepdim=True))
        shift = torch.where(torch.isneginf(new_max), torch.zeros((), dtype=q.dtype), new_max)
        rescale = torch.exp(running_max - shift)
        p = torch.exp(scores - shift)
        running_sum = running_sum * rescale + p.sum(dim=-1, keepdim=True)
        acc = acc * rescale + p @ v[:, :, start:stop]
        running_max = new_max
    safe_sum = torch.where(running_sum > 0, running_sum, torch.ones((), dtype=q.dtype))
    return numpy(torch.where(running_sum > 0, acc / safe_sum, torch.zeros((), dtype=q.dtype)))
