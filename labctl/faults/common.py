"""The common bugs a Chinese-speaking learner's whole clean room showed (issue 38), as faults.

Each was "no catalogued fault matches it" before: a mask filled with 0 (the chapter's own
fault, "mask 加 0 而不是负无穷") or multiplied into the scores; rms_norm without eps, over
the mean of x, or over the whole array; LayerNorm as (x - mu) / (sigma + 1e-6); a KV cache
concatenated on the wrong axis (a raw NumPy error); RoPE whose tables leak float64; a causal
mask that blocks the diagonal, or one that is a key late (from rooms written from the
contract alone, stop 56: "11% of the entries differ" said neither where nor which way). Each
sentence says what is wrong and what to change. A missing repeat_kv and an online softmax
that is NaN on a row blocked so far were catalogued already (`sdpa-no-repeat-kv`,
`tiled-nan-first-blocked`); what else they look like is said from what the checks saw
(`labctl.verify.blame`).

After them, bugs verify caught but only said "its values differ" for: RoPE's frequencies with
the exponent i/D (`theta ** (-np.arange(D // 2) / D)`), RoPE on k alone or on q alone (in
multi-head attention; on k alone in decode), an online softmax that rescales its output but not
its running sum or the other way round (both forgotten is `tiled-no-rescale`), scores
multiplied by sqrt(d_k), and `scale = scale or 1 / sqrt(D)`, which takes scale=0.0 for None (in
scaled_dot_product_attention, and in tiled_attention, which calls no other function to blame).
"""

from __future__ import annotations

from labctl.faults.base import Fault
from labctl.faults.course import CAUSAL_MASK
from labctl.faults.sources import MHA_ROTATING, ONLINE, decode_source, tiled_source
from labctl.i18n import N_

_MASKED_SDPA = """
def scaled_dot_product_attention(q, k, v, mask=None, scale=None):
    q, k, v, n_rep = _check_qkv(q, k, v)
    k = repeat_kv(k, n_rep)
    v = repeat_kv(v, n_rep)
    scores = (q @ k.swapaxes(-1, -2)) * _scale(scale, q.shape[-1])
    if mask is not None:
        mask = np.broadcast_to(np.asarray(mask), scores.shape)
        scores = {masked}
    weights = softmax(scores, axis=-1)
    dtype = _float_dtype(q)
    return (weights @ v).astype(dtype, copy=False), weights.astype(dtype, copy=False)
"""

# The chapter's fault table (第8章 故障注入与预期信号) lists "mask 加 0 而不是负无穷".
_CHAPTER_MASK = N_(
    "第8章 · Attention 与 Transformer Block 故障注入与预期信号: mask 加 0 而不是负无穷 "
    "(遮罩位置填极小负值再相加)"
)

_ROPE_QK = N_(
    "第8章 · Attention 与 Transformer Block 阶段五 位置从哪里来: 直接旋转 Q/K; "
    "contract v1 multi_head_attention: RoPE on Q and K"
)
_SCALE_DEFAULT = N_(
    "Transformer 手撕与注意力机制 §03 Scaled Dot-Product Attention: 除以 √d_k; "
    "contract v1 scaled_dot_product_attention: scale defaults to 1/sqrt(D)"
)
_ONLINE_SOFTMAX = N_(
    "Transformer 手撕与注意力机制 §07.5 FlashAttention 核心思想, 7.5.3 Online Softmax 的核心算法: "
    "d = d * np.exp(m - m_new) + np.exp(scores[j] - m_new)"
)

COMMON: tuple[Fault, ...] = (
    Fault(
        name="mask-fills-zero",
        function="scaled_dot_product_attention",
        module="attention",
        description=N_(
            "blocked scores are set to 0 (np.where(mask, 0, scores), or scores * ~mask) "
            "instead of -inf: exp(0) still gives a blocked key weight, so the future leaks; "
            "fill blocked scores with -np.inf (np.where(mask, -np.inf, scores))"
        ),
        course=_CHAPTER_MASK,
        signal="parity",
        source=_MASKED_SDPA.format(masked="np.where(mask, 0.0, scores)"),
    ),
    Fault(
        name="mask-multiplied",
        function="scaled_dot_product_attention",
        module="attention",
        description=N_(
            "the mask is multiplied into the scores (scores * mask): a product cannot block "
            "a key (exp(0) = 1 still weighs it), and with True = blocked it zeroes the "
            "visible scores; fill blocked scores with -np.inf (np.where(mask, -np.inf, scores))"
        ),
        course=_CHAPTER_MASK,
        signal="parity",
        source=_MASKED_SDPA.format(masked="scores * mask"),
    ),
    Fault(
        name="rms-no-eps",
        function="rms_norm",
        module="primitives",
        description=N_(
            "rms_norm leaves eps out: x / sqrt(mean(x**2)) is off for small x and divides "
            "by zero for x = 0; add eps inside the square root "
            "(np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps))"
        ),
        course=N_(
            "Transformer 手撕与注意力机制 §06.2 RMSNorm; contract v1 rms_norm: "
            "x / sqrt(mean(x**2, axis=-1) + eps) * weight"
        ),
        source="""
        def rms_norm(x, weight, eps=1e-6):
            x = _as_float(x, "x")
            weight = _check_vector(weight, "weight", x.shape[-1])
            rms = np.sqrt(np.mean(x * x, axis=-1, keepdims=True))
            return (x / rms * weight).astype(_float_dtype(x), copy=False)
        """,
    ),
    Fault(
        name="rms-mean-not-square",
        function="rms_norm",
        module="primitives",
        description=N_(
            "rms_norm takes the mean of x, not of x**2: a row whose mean is negative gives the "
            "square root of a negative number, NaN; take np.mean(x * x, axis=-1, keepdims=True)"
        ),
        course=N_(
            "Transformer 手撕与注意力机制 §06.2 RMSNorm; contract v1 rms_norm: "
            "x / sqrt(mean(x**2, axis=-1) + eps) * weight"
        ),
        signal="finite",
        source="""
        def rms_norm(x, weight, eps=1e-6):
            x = _as_float(x, "x")
            weight = _check_vector(weight, "weight", x.shape[-1])
            with np.errstate(invalid="ignore"):
                rms = np.sqrt(np.mean(x, axis=-1, keepdims=True) + eps)
            return (x / rms * weight).astype(_float_dtype(x), copy=False)
        """,
    ),
    Fault(
        name="rms-mean-all-axes",
        function="rms_norm",
        module="primitives",
        description=N_(
            "rms_norm averages x**2 over the whole array, not over each token's C features: "
            "each token is scaled by the others, later tokens included; take the mean over "
            "the last axis (axis=-1, keepdims=True)"
        ),
        course=N_(
            "Transformer 手撕与注意力机制 §06.2 RMSNorm; contract v1 rms_norm: "
            "x / sqrt(mean(x**2, axis=-1) + eps) * weight"
        ),
        source="""
        def rms_norm(x, weight, eps=1e-6):
            x = _as_float(x, "x")
            weight = _check_vector(weight, "weight", x.shape[-1])
            rms = np.sqrt(np.mean(x * x) + eps)
            return (x / rms * weight).astype(_float_dtype(x), copy=False)
        """,
    ),
    Fault(
        name="layer-norm-std-plus-fixed-eps",
        function="layer_norm",
        module="primitives",
        description=N_(
            "layer_norm divides by (sigma + 1e-6): eps is outside the square root and is not "
            "the one it is given; divide by np.sqrt(var + eps), var the biased variance and "
            "eps the argument"
        ),
        course=N_(
            "Transformer 手撕与注意力机制 §06.1 LayerNorm: (x - μ) / √(σ² + ε); "
            "contract v1 layer_norm"
        ),
        source="""
        def layer_norm(x, weight, bias, eps=1e-5):
            x = _as_float(x, "x")
            weight = _check_vector(weight, "weight", x.shape[-1])
            bias = _check_vector(bias, "bias", x.shape[-1])
            mu = np.mean(x, axis=-1, keepdims=True)
            sigma = np.std(x, axis=-1, keepdims=True)
            return ((x - mu) / (sigma + 1e-6) * weight + bias).astype(_float_dtype(x), copy=False)
        """,
    ),
    Fault(
        name="decode-cache-wrong-axis",
        function="attention_decode",
        module="transformer_block",
        description=N_(
            "the new keys and values are appended to the cache on another axis than time "
            "(the heads, axis=1, or the features, axis=-1): the cache's shapes do not fit, or "
            "its heads or features double; append along time "
            "(np.concatenate([past_k, k_new], axis=2))"
        ),
        course=N_(
            "Transformer 手撕与注意力机制 §07 KV Cache; contract v1 attention_decode: "
            "k_all (B, Hkv, Tp+Tn, D)"
        ),
        signal="runs",
        source=decode_source(
            cache="",
            k_all="k_new if past_k is None else np.concatenate([past_k, k_new], axis=1)",
            v_all="v_new if past_v is None else np.concatenate([past_v, v_new], axis=1)",
        ),
    ),
    Fault(
        name="rope-float64-tables",
        function="rope",
        module="primitives",
        description=N_(
            "RoPE's cos and sin tables are float64, and so are their products with a float32 "
            "x: float32 input comes back float64; cast the tables to x's dtype "
            "(np.cos(angle).astype(x.dtype)) or the result"
        ),
        course=N_(
            "Transformer 手撕与注意力机制 §01.5 RoPE; contract v1 conventions: outputs keep "
            "the input's floating dtype"
        ),
        signal="dtype",
        source="""
        def rope(x, positions, theta=10000.0):
            x = _as_float(x, "x")
            D = x.shape[-1]
            if D % 2:
                _fail("x", f"RoPE needs an even head width D, got D={D}")
            inv_freq = float(theta) ** (-2.0 * np.arange(D // 2) / D)
            angle = np.asarray(positions).astype(np.float64)[:, None] * inv_freq[None, :]
            cos, sin = np.cos(angle), np.sin(angle)
            even, odd = x[..., 0::2], x[..., 1::2]
            out = np.empty(x.shape[:-1] + (D,))  # float64, whatever x is
            out[..., 0::2] = even * cos - odd * sin
            out[..., 1::2] = even * sin + odd * cos
            return out
        """,
    ),
    Fault(
        name="mask-polarity",
        function="causal_mask",
        module="primitives",
        description=N_(
            "the causal mask is True where a query may look (PyTorch's boolean attn_mask), "
            "where the contract's is True where a key is blocked: every visible key is "
            "blocked and every future key visible; return j > t_k - t_q + i, or invert "
            "the mask where it is built"
        ),
        course=N_(
            "contract v1 causal_mask: True where a key is blocked (j > t_k - t_q + i); "
            "Transformer 手撕与注意力机制 §04 Causal Mask"
        ),
        source="""
        _blocked = causal_mask

        def causal_mask(t_q, t_k=None):
            return ~_blocked(t_q, t_k)  # True where query i may see key j
        """,
    ),
    Fault(
        name="mask-blocks-diagonal",
        function="causal_mask",
        module="primitives",
        description=N_(
            "the causal mask blocks the diagonal too (j >= p): a query cannot see its own "
            "key, and the first query sees no key at all; block only the keys after it: "
            "return j > t_k - t_q + i"
        ),
        course=N_(
            "contract v1 causal_mask: True where a key is blocked (j > t_k - t_q + i); "
            "Transformer 手撕与注意力机制 §04 Causal Mask"
        ),
        source=CAUSAL_MASK.format(blocked="j >= (t_k - t_q) + i"),
    ),
    Fault(
        name="mask-one-ahead",
        function="causal_mask",
        module="primitives",
        description=N_(
            "the causal mask is one key late (j > p + 1): each query also sees the next "
            "token, the one it is meant to predict; block every key after its own: return "
            "j > t_k - t_q + i"
        ),
        course=N_(
            "contract v1 causal_mask: True where a key is blocked (j > t_k - t_q + i); "
            "Transformer 手撕与注意力机制 §04 Causal Mask"
        ),
        source=CAUSAL_MASK.format(blocked="j > (t_k - t_q) + i + 1"),
    ),
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
        course=N_(
            "第8章 · Attention 与 Transformer Block 阶段五 位置从哪里来: 直接旋转 Q/K; "
            "contract v1 attention_decode: the new tokens sit at positions Tp .. Tp+Tn-1"
        ),
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
        course=N_(
            "Transformer 手撕与注意力机制 §03 Scaled Dot-Product Attention: 除以 √d_k; "
            "contract v1: scale defaults to 1/sqrt(D)"
        ),
        source="""
        _correct_sdpa = scaled_dot_product_attention

        def scaled_dot_product_attention(q, k, v, mask=None, scale=None):
            d_k = np.shape(q)[-1]
            return _correct_sdpa(q, k, v, mask, np.sqrt(d_k) if scale is None else scale)
        """,
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
)
