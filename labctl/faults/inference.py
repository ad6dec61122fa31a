"""Faults for the second-wave labs: memory, padding and windowed decoding.

The last two are not in the catalogue (the labs catch both): the lab tests materialize them
like catalogue faults. The first, full attention posing as tiled, is the catalogue's since
verify measures tiled_attention's memory.
"""

from __future__ import annotations

from labctl.faults.base import Fault
from labctl.faults.learner import LEARNER
from labctl.i18n import N_

# A tiled_attention that calls full attention: verify's memory check catches it now, so it is
# the catalogue's (`tiled-full-attention`); the lab tests materialize it under this name too.
TILED_MATERIALIZED = next(f for f in LEARNER if f.name == "tiled-full-attention")

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
