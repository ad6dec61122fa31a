"""Faults for the second-wave labs: memory, padding and windowed decoding.

Not in the catalogue (verify's parity cannot see the first one, and the labs
catch all three): the lab tests materialize them like catalogue faults.
"""

from __future__ import annotations

from labctl.faults.base import Fault
from labctl.i18n import N_

TILED_MATERIALIZED = Fault(
    name="tiled-materializes-scores",
    function="tiled_attention",
    module="attention",
    description=N_(
        "tiled_attention calls full attention: right values, but the (Tq, Tk) score "
        "matrix is held after all"
    ),
    course=N_(
        "Transformer 手撕与注意力机制 §07.5 FlashAttention 核心思想: tiling, never the n x n matrix"
    ),
    source="""
    from .primitives import causal_mask as _causal_mask

    def tiled_attention(q, k, v, block_size, causal=True, scale=None):
        _as_size(block_size, "block_size", minimum=1)
        mask = _causal_mask(q.shape[2], k.shape[2]) if causal else None
        return scaled_dot_product_attention(q, k, v, mask, scale)[0]
    """,
)

PADDING_QUERY_AXIS = Fault(
    name="padding-mask-query-axis",
    function="padding_mask",
    module="primitives",
    description=N_(
        "the padding mask is shaped (B, 1, t, 1): it blocks padded queries, not padded "
        "keys, so real tokens still attend to [PAD]"
    ),
    course=N_("Transformer 手撕与注意力机制 §4.3 Padding Mask vs Causal Mask"),
    source="""
    def padding_mask(lengths, t):
        lengths = np.asarray(lengths)
        t = _as_size(t, "t")
        return (np.arange(t)[None, :] >= lengths[:, None])[:, None, :, None]
    """,
)

DECODE_WINDOW_IGNORED = Fault(
    name="decode-window-ignored",
    function="attention_decode",
    module="transformer_block",
    description=N_(
        "attention_decode accepts window but masks causally only: a cached token "
        "still sees the whole past"
    ),
    course=N_(
        "第8章 · Attention 与 Transformer Block 阶段五 滑动窗口注意力 (SWA): KV beyond the window is dropped"
    ),
    source="""
    _correct_decode = attention_decode

    def attention_decode(x_new, past_k, past_v, wq, wk, wv, wo, n_heads, n_kv_heads=None, window=None, rope_theta=None):
        return _correct_decode(x_new, past_k, past_v, wq, wk, wv, wo, n_heads, n_kv_heads, None, rope_theta)
    """,
)

INFERENCE: tuple[Fault, ...] = (TILED_MATERIALIZED, PADDING_QUERY_AXIS, DECODE_WINDOW_IGNORED)
