"""Reference primitives on PyTorch: softmax, masks, heads, positions, norms, feed-forward.

Each public function takes and returns NumPy arrays with contract v1's
signature; the `*_t` helpers are the same operations on tensors, shared with
the attention and block modules. Where PyTorch has the operation, it is used:
`F.softmax`, `F.rms_norm`, `F.layer_norm`, `F.silu`, `F.relu`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from labctl.reference._boundary import (
    fail,
    ints,
    matrix,
    numpy,
    size,
    tensor,
    vector,
)


def softmax_t(t: torch.Tensor, dim: int = -1) -> torch.Tensor:
    out = F.softmax(t, dim=dim)
    # F.softmax gives NaN on a slice that is all -inf; the contract asks for zeros.
    blocked = torch.isneginf(t).all(dim=dim, keepdim=True)
    return torch.where(blocked, torch.zeros((), dtype=out.dtype), out)


def softmax(x, axis=-1):
    t = tensor(x, "x")
    if not -t.ndim <= axis < max(t.ndim, 1):
        fail("axis", f"out of range for an array of {t.ndim} dimensions")
    return numpy(softmax_t(t, axis))


def causal_mask_t(t_q: int, t_k: int) -> torch.Tensor:
    # Bottom-right alignment: blocked where j > (t_k - t_q) + i. (`is_causal=True` in
    # F.scaled_dot_product_attention aligns top-left instead, which is wrong for decode.)
    return torch.ones(t_q, t_k, dtype=torch.bool).triu(diagonal=t_k - t_q + 1)


def sliding_window_mask_t(t_q: int, window: int, t_k: int) -> torch.Tensor:
    too_old = torch.ones(t_q, t_k, dtype=torch.bool).tril(diagonal=t_k - t_q - window)
    return causal_mask_t(t_q, t_k) | too_old


def causal_mask(t_q, t_k=None):
    t_q = size(t_q, "t_q")
    t_k = t_q if t_k is None else size(t_k, "t_k")
    return causal_mask_t(t_q, t_k).numpy()


def sliding_window_mask(t_q, window, t_k=None):
    t_q = size(t_q, "t_q")
    window = size(window, "window", minimum=1)
    t_k = t_q if t_k is None else size(t_k, "t_k")
    return sliding_window_mask_t(t_q, window, t_k).numpy()


def padding_mask(lengths, t):
    lengths = ints(lengths, "lengths")
    if lengths.ndim != 1:
        fail("lengths", f"expected shape (B,), got {tuple(lengths.shape)}")
    t = size(t, "t")
    blocked = torch.arange(t)[None, :] >= lengths[:, None]  # (B, t)
    return blocked[:, None, None, :].numpy()  # (B, 1, 1, t)


def split_heads_t(t: torch.Tensor, n_heads: int) -> torch.Tensor:
    B, T, C = t.shape
    return t.view(B, T, n_heads, C // n_heads).transpose(1, 2)  # (B, H, T, D)


def merge_heads_t(t: torch.Tensor) -> torch.Tensor:
    B, H, T, D = t.shape
    return t.transpose(1, 2).reshape(B, T, H * D)  # (B, T, H*D)


def repeat_kv_t(t: torch.Tensor, n_rep: int) -> torch.Tensor:
    """HF `repeat_kv`: (B, Hkv, T, D) -> (B, Hkv*n_rep, T, D), head h from h // n_rep."""
    B, Hkv, T, D = t.shape
    if n_rep == 1:
        return t
    expanded = t[:, :, None, :, :].expand(B, Hkv, n_rep, T, D)  # (B, Hkv, n_rep, T, D)
    return expanded.reshape(B, Hkv * n_rep, T, D)


def split_heads(x, n_heads):
    t = tensor(x, "x", ndim=3)
    n_heads = size(n_heads, "n_heads", minimum=1)
    if t.shape[2] % n_heads:
        fail("n_heads", f"C={t.shape[2]} is not divisible by n_heads={n_heads}")
    return numpy(split_heads_t(t, n_heads))


def merge_heads(x):
    return numpy(merge_heads_t(tensor(x, "x", ndim=4)))


def repeat_kv(x, n_rep):
    t = tensor(x, "x", ndim=4)
    return numpy(repeat_kv_t(t, size(n_rep, "n_rep", minimum=1)))


def rope_t(
    t: torch.Tensor, positions: torch.Tensor, theta: float, divisor: float = 1.0
) -> torch.Tensor:
    """Interleaved-pair RoPE as complex multiplication (Meta's Llama `apply_rotary_emb`).

    `positions` (T,), or (B, T) for t (B, ..., T, D) (contract v2); v2's position
    interpolation divides them by `divisor` (v1: 1, exact)."""
    D = t.shape[-1]
    inv_freq = float(theta) ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)  # (D/2,)
    angle = (positions.to(torch.float64) / divisor)[..., None] * inv_freq  # (.., T, D/2)
    if positions.ndim == 2:
        # (B, T, D/2) -> (B, 1, .., 1, T, D/2): batch b's row t rotates by positions[b, t].
        angle = angle.reshape(angle.shape[0], *([1] * (t.ndim - 3)), *angle.shape[1:])
    rotation = torch.polar(torch.ones_like(angle), angle)  # (.., T, D/2) complex
    pairs = t.to(torch.float64).reshape(*t.shape[:-1], D // 2, 2)  # (..., T, D/2, 2)
    rotated = torch.view_as_real(torch.view_as_complex(pairs.contiguous()) * rotation)
    return rotated.flatten(-2).to(t.dtype)  # (..., T, D)


def rope(x, positions, theta=10000.0):
    t = tensor(x, "x")
    if t.ndim < 2:
        fail("x", f"expected (..., T, D), got shape {tuple(t.shape)}")
    T, D = t.shape[-2:]
    if D % 2:
        fail("x", f"RoPE needs an even head width D, got D={D}")
    positions = ints(positions, "positions")
    if tuple(positions.shape) != (T,):
        fail("positions", f"expected shape ({T},) to match T, got {tuple(positions.shape)}")
    return numpy(rope_t(t, positions, theta))


def sinusoidal_positions_t(seq_len: int, d_model: int) -> torch.Tensor:
    p = torch.arange(seq_len, dtype=torch.float64)[:, None]
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
    angle = p / 10000.0 ** (two_i / d_model)  # (seq_len, ceil(d_model / 2))
    pe = torch.empty(seq_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return pe


def sinusoidal_positions(seq_len, d_model):
    seq_len = size(seq_len, "seq_len")
    return numpy(sinusoidal_positions_t(seq_len, size(d_model, "d_model", minimum=1)))


def rms_norm_t(t: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    if hasattr(F, "rms_norm"):
        return F.rms_norm(t, (t.shape[-1],), weight, eps)
    # torch < 2.4 has no F.rms_norm; the same formula by hand.
    return t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + eps) * weight


def rms_norm(x, weight, eps=1e-6):
    t = tensor(x, "x")
    return numpy(rms_norm_t(t, vector(weight, "weight", t.shape[-1], t.dtype), eps))


def layer_norm(x, weight, bias, eps=1e-5):
    t = tensor(x, "x")
    C = t.shape[-1]
    w = vector(weight, "weight", C, t.dtype)
    return numpy(F.layer_norm(t, (C,), w, vector(bias, "bias", C, t.dtype), eps))


def relu_ffn(x, w1, b1, w2, b2):
    t = tensor(x, "x")
    w1 = matrix(w1, "w1", t.shape[-1], t.dtype)
    b1 = vector(b1, "b1", w1.shape[1], t.dtype)
    w2 = matrix(w2, "w2", w1.shape[1], t.dtype)
    b2 = vector(b2, "b2", w2.shape[1], t.dtype)
    return numpy(F.relu(t @ w1 + b1) @ w2 + b2)


def swiglu_ffn_t(t, w_gate, w_up, w_down) -> torch.Tensor:
    return (F.silu(t @ w_gate) * (t @ w_up)) @ w_down


def swiglu_ffn(x, w_gate, w_up, w_down):
    t = tensor(x, "x")
    w_gate = matrix(w_gate, "w_gate", t.shape[-1], t.dtype)
    w_up = matrix(w_up, "w_up", t.shape[-1], t.dtype, cols=w_gate.shape[1])
    w_down = matrix(w_down, "w_down", w_gate.shape[1], t.dtype)
    return numpy(swiglu_ffn_t(t, w_gate, w_up, w_down))
