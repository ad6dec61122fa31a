"""Bugs verify caught but could only call "its values differ" for, as faults (stop 57).

RoPE's frequencies with the exponent i/D (`theta ** (-np.arange(D // 2) / D)`), RoPE on k alone
or on q alone (in multi-head attention; on k alone in decode), an online softmax that rescales
its output but not its running sum or the other way round (both forgotten is
`tiled-no-rescale`), scores multiplied by sqrt(d_k), and `scale = scale or 1 / sqrt(D)`, which
takes scale=0.0 for None (in scaled_dot_product_attention, and in tiled_attention, which calls
no other function to blame). Each was written by learners from the contract alone; each
sentence says what is wrong and what to change.
"""

from __future__ import annotations

from labctl.faults.base import Fault
from labctl.faults.learner import SDPA_SCALE_COURSE
from labctl.faults.sources import (
    MHA_ROTATING,
    ONLINE,
    SDPA_DEFAULT_SCALE,
    decode_source,
    tiled_source,
)
from labctl.i18n import N_

_ROPE_QK = N_(
    "第8章 · Attention 与 Transformer Block 阶段五 位置从哪里来: 直接旋转 Q/K; "
    "contract v1 multi_head_attention: RoPE on Q and K"
)
_DECODE_ROPE = N_(
    "第8章 · Attention 与 Transformer Block 阶段五 位置从哪里来: 直接旋转 Q/K; "
    "contract v1 attention_decode: the new tokens sit at positions Tp .. Tp+Tn-1"
)
_SCALE_DEFAULT = N_(
    "Transformer 手撕与注意力机制 §03 Scaled Dot-Product Attention: 除以 √d_k; "
    "contract v1 scaled_dot_product_attention: scale defaults to 1/sqrt(D)"
)
_ONLINE_SOFTMAX = N_(
    "Transformer 手撕与注意力机制 §07.5 FlashAttention 核心思想, 7.5.3 Online Softmax 的核心算法: "
    "d = d * np.exp(m - m_new) + np.exp(scores[j] - m_new)"
)

FORMULAS: tuple[Fault, ...] = (
    Fault(
        name="rope-freq-i-over-d",
        function="rope",
        module="primitives",
        description=N_(
            "RoPE's frequencies take the exponent i/D instead of 2i/D "
            "(theta ** (-np.arange(D // 2) / D)): every pair after the first turns too fast; "
            "pair i turns by theta ** (-2i/D): take theta ** (-2.0 * np.arange(D // 2) / D), "
            "or theta ** (-np.arange(0, D, 2) / D)"
        ),
        course=N_(
            "Transformer 手撕与注意力机制 §01.5 RoPE, 1.5.2 高维推广: θ_i = 10000^(-2i/d_model); "
            "contract v1 rope: angle positions[t] * theta ** (-2i / D)"
        ),
        source="""
        def rope(x, positions, theta=10000.0):
            x = _as_float(x, "x")
            D = x.shape[-1]
            if D % 2:
                _fail("x", f"RoPE needs an even head width D, got D={D}")
            inv_freq = float(theta) ** (-np.arange(D // 2) / D)
            angle = np.asarray(positions).astype(np.float64)[:, None] * inv_freq[None, :]
            cos, sin = np.cos(angle), np.sin(angle)
            even, odd = x[..., 0::2], x[..., 1::2]
            out = np.empty(x.shape, dtype=_float_dtype(x))
            out[..., 0::2] = even * cos - odd * sin
            out[..., 1::2] = even * sin + odd * cos
            return out
        """,
    ),
    Fault(
        name="mha-rope-k-only",
        function="multi_head_attention",
        module="transformer_block",
        description=N_(
            "RoPE rotates k but not q: the scores then depend on each key's own position, "
            "not on how far it is from the query; rotate q and k both by their positions "
            "(v is never rotated)"
        ),
        course=_ROPE_QK,
        source=MHA_ROTATING.format(rotated="k"),
    ),
    Fault(
        name="mha-rope-q-only",
        function="multi_head_attention",
        module="transformer_block",
        description=N_(
            "RoPE rotates q but not k: the scores then depend on each query's own position, "
            "not on how far the key is from it; rotate q and k both by their positions "
            "(v is never rotated)"
        ),
        course=_ROPE_QK,
        source=MHA_ROTATING.format(rotated="q"),
    ),
    Fault(
        name="tiled-sum-not-rescaled",
        function="tiled_attention",
        module="attention",
        description=N_(
            "the online softmax rescales the output accumulator by exp(m_old - m_new) when a "
            "block raises the running max, but not the running sum: the earlier blocks stay "
            "counted at the old max and the weights no longer sum to 1; multiply the running "
            "sum by the same factor (l = l * exp(m_old - m_new) + p.sum(axis=-1))"
        ),
        course=_ONLINE_SOFTMAX,
        source=tiled_source(
            ONLINE.format(
                running_sum="running_sum + p.sum(axis=-1, keepdims=True)",
                acc="acc * rescale + p @ v[:, :, start:stop]",
            )
        ),
    ),
    Fault(
        name="tiled-acc-not-rescaled",
        function="tiled_attention",
        module="attention",
        description=N_(
            "the online softmax rescales the running sum by exp(m_old - m_new) when a block "
            "raises the running max, but not the output accumulator: the earlier blocks' "
            "values keep the weight of the old max; multiply the accumulator by the same "
            "factor (acc = acc * exp(m_old - m_new) + p @ v_block)"
        ),
        course=_ONLINE_SOFTMAX,
        source=tiled_source(
            ONLINE.format(
                running_sum="running_sum * rescale + p.sum(axis=-1, keepdims=True)",
                acc="acc + p @ v[:, :, start:stop]",
            )
        ),
    ),
    Fault(
        name="decode-rope-k-only",
        function="attention_decode",
        module="transformer_block",
        description=N_(
            "attention_decode rotates the new keys with RoPE but not the new queries: the "
            "scores then depend on each key's own position, not on how far it is from the "
            "query; rotate q and k_new both, at positions Tp .. Tp+Tn-1"
        ),
        course=_DECODE_ROPE,
        source=decode_source(
            cache="",
            k_all="k_new if past_k is None else np.concatenate([past_k, k_new], axis=2)",
            v_all="v_new if past_v is None else np.concatenate([past_v, v_new], axis=2)",
            rotated=("k_new",),
        ),
    ),
    Fault(
        name="sdpa-scale-sqrt-multiplied",
        function="scaled_dot_product_attention",
        module="attention",
        description=N_(
            "the scores are multiplied by sqrt(d_k) instead of divided by it: the softmax "
            "grows sharper with the head width instead of staying steady; when scale is None, "
            "multiply q @ k.T by 1 / sqrt(D), D the head width"
        ),
        course=SDPA_SCALE_COURSE,
        source=SDPA_DEFAULT_SCALE.format(default="np.sqrt(d_k)"),
    ),
    Fault(
        name="sdpa-scale-or-default",
        function="scaled_dot_product_attention",
        module="attention",
        description=N_(
            "scale=0.0 is replaced by the default 1 / sqrt(D) (scale = scale or 1 / sqrt(D): "
            "0.0 is falsy), so a scale of 0 does not give every visible key the same weight; "
            "take the default only when scale is None: if scale is None: scale = 1 / np.sqrt(D)"
        ),
        course=_SCALE_DEFAULT,
        source="""
        _correct_sdpa = scaled_dot_product_attention

        def scaled_dot_product_attention(q, k, v, mask=None, scale=None):
            return _correct_sdpa(q, k, v, mask, scale or None)  # 0.0 taken as None
        """,
    ),
    Fault(
        name="tiled-scale-or-default",
        function="tiled_attention",
        module="attention",
        description=N_(
            "tiled_attention replaces scale=0.0 by the default 1 / sqrt(D) (scale = scale or "
            "1 / sqrt(D): 0.0 is falsy), so its result is not scaled_dot_product_attention's "
            "at scale 0; take the default only when scale is None: if scale is None: "
            "scale = 1 / np.sqrt(D)"
        ),
        course=N_(
            "Transformer 手撕与注意力机制 §03 Scaled Dot-Product Attention: 除以 √d_k; "
            "contract v1 tiled_attention: the result of scaled_dot_product_attention, whose "
            "scale defaults to 1/sqrt(D)"
        ),
        source="""
        _correct_tiled = tiled_attention

        def tiled_attention(q, k, v, block_size, causal=True, scale=None):
            return _correct_tiled(q, k, v, block_size, causal, scale or None)  # 0.0 taken as None
        """,
    ),
    Fault(
        name="rms-norm-one-plus-weight",
        function="rms_norm",
        module="primitives",
        description=N_(
            "rms_norm multiplies by (1 + weight), Gemma's convention, instead of by weight: "
            "every channel is scaled one too much; multiply x / rms by weight itself"
        ),
        course=N_(
            "Transformer 手撕与注意力机制 §06.2 RMSNorm; contract v1 rms_norm: "
            "x / sqrt(mean(x**2, axis=-1) + eps) * weight"
        ),
        source="""
        _correct_rms_norm = rms_norm

        def rms_norm(x, weight, eps=1e-6):
            _correct_rms_norm(x, weight, eps)
            weight = np.asarray(weight)
            return _correct_rms_norm(x, 1 + weight.astype(np.result_type(weight, np.float32)), eps)
        """,
    ),
    Fault(
        name="decode-rope-q-only",
        function="attention_decode",
        module="transformer_block",
        description=N_(
            "attention_decode rotates the new queries with RoPE but not the new keys: the "
            "scores then depend on each query's own position, not on how far the key is from "
            "it; rotate q and k_new both, at positions Tp .. Tp+Tn-1, and cache the rotated keys"
        ),
        course=_DECODE_ROPE,
        source=decode_source(
            cache="",
            k_all="k_new if past_k is None else np.concatenate([past_k, k_new], axis=2)",
            v_all="v_new if past_v is None else np.concatenate([past_v, v_new], axis=2)",
            rotated=("q",),
        ),
    ),
)
