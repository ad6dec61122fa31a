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
"""

from __future__ import annotations

from labctl.faults.base import Fault
from labctl.faults.course import CAUSAL_MASK
from labctl.faults.sources import decode_source
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
)
