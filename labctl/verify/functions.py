"""What verify reads of each contract function besides its signature.

What it returns, what it is built from, and whether its future-token
invariance is checked.
"""

from __future__ import annotations

# What each function returns, as the contract's table writes it: one entry per
# returned array (a tuple when there are several). Used to name a wrong shape.
RETURNS: dict[str, tuple[str, ...]] = {
    "softmax": ("same shape as x",),
    "causal_mask": ("bool (t_q, t_k)",),
    "sliding_window_mask": ("bool (t_q, t_k)",),
    "padding_mask": ("bool (B, 1, 1, t)",),
    "scaled_dot_product_attention": ("out (B, H, Tq, Dv)", "weights (B, H, Tq, Tk)"),
    "split_heads": ("(B, H, T, C // H)",),
    "merge_heads": ("(B, T, H * D)",),
    "repeat_kv": ("(B, Hkv * n_rep, T, D)",),
    "rope": ("same shape as x",),
    "sinusoidal_positions": ("(seq_len, d_model)",),
    "rms_norm": ("same shape as x",),
    "layer_norm": ("same shape as x",),
    "relu_ffn": ("same shape as x",),
    "swiglu_ffn": ("same shape as x",),
    "multi_head_attention": ("(B, T, C)",),
    "attention_decode": ("out (B, Tn, C)", "k_all (B, Hkv, Tp+Tn, D)", "v_all (B, Hkv, Tp+Tn, D)"),
    "tiled_attention": ("out (B, H, Tq, Dv)",),
    "transformer_block": ("(B, T, C)",),
    "decoder_forward": ("logits (B, T, V)",),
    "alibi_slopes": ("float64 (H,)",),
    "alibi_bias": ("float64 (H, Tq, Tk)",),
    "learned_positions": ("(T, C) or (B, T, C)",),
    "gelu": ("same shape as x",),
    "glu_ffn": ("same shape as x",),
    "geglu_ffn": ("same shape as x",),
    "attention_entropy": ("weights' shape without axis",),
}

# Which contract functions each one is built from, by the contract's own words
# (sdpa: "after masking and softmax", GQA by repeat_kv; mha: "by projection and
# split_heads; RoPE ...; mask ...; then merge_heads"; the block and the model
# as the table writes them). Used to localise a failing composition.
_ATTENTION = (
    "causal_mask",
    "sliding_window_mask",
    "split_heads",
    "merge_heads",
    "rope",
    "scaled_dot_product_attention",
)
DEPENDS: dict[str, tuple[str, ...]] = {
    "scaled_dot_product_attention": ("softmax", "repeat_kv"),
    "tiled_attention": ("repeat_kv",),
    "multi_head_attention": _ATTENTION,
    "attention_decode": _ATTENTION,
    "transformer_block": ("rms_norm", "multi_head_attention", "swiglu_ffn"),
    "decoder_forward": ("sinusoidal_positions", "rms_norm", "transformer_block"),
    "geglu_ffn": ("gelu",),
}

# The functions whose future-token invariance is checked: the contract makes each causal.
CAUSAL_FUNCTIONS = ("multi_head_attention", "transformer_block", "decoder_forward")
