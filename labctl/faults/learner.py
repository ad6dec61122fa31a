"""The bugs learners write, as faults: each one seen in rooms written from the contract.

Each sentence says what is wrong and what to change, in the learner's terms:
the scale (1/d_k), the softmax axis, a finite mask fill, a float64 mask or
cache, a hard-coded eps, LayerNorm with std + eps, an online softmax that
meets a row blocked so far, blocks that must divide the keys, RoPE tables in
float32, a forgotten `repeat_kv`, a scale never applied (a given one ignored too), a
LayerNorm whose eps is hard-coded. The scale left out by default, eps outside the square
root and the head axis confused with time were already in the catalogue
(`no-sqrt-dk`, `rms-eps-outside-sqrt`, `head-seq-confused`); `merge-heads-no-transpose`,
its mirror in merge_heads, came from the multi-head lab's faults.
"""

from __future__ import annotations

from labctl.faults.base import Fault
from labctl.faults.sources import SDPA_DEFAULT_SCALE, decode_source, tiled_source
from labctl.i18n import N_

# The scale's rule, cited by the faults of scaled_dot_product_attention's scale.
SDPA_SCALE_COURSE = N_(
    "Transformer 手撕与注意力机制 §03 Scaled Dot-Product Attention: 除以 √d_k; "
    "contract v1: scale defaults to 1/sqrt(D)"
)

LEARNER: tuple[Fault, ...] = (
    Fault(
        name="sdpa-scale-dk",
        function="scaled_dot_product_attention",
        module="attention",
        description=N_(
            "the scores are divided by d_k instead of sqrt(d_k): when scale is None, "
            "multiply q @ k.T by 1 / sqrt(D), D the head width"
        ),
        course=SDPA_SCALE_COURSE,
        source=SDPA_DEFAULT_SCALE.format(default="1.0 / d_k"),
    ),
    Fault(
        name="sdpa-scale-ignored",
        function="scaled_dot_product_attention",
        module="attention",
        description=N_(
            "the scores are never scaled, and a scale passed in is ignored too: multiply "
            "q @ k.T by scale, or by 1 / sqrt(D) when scale is None"
        ),
        course=SDPA_SCALE_COURSE,
        source="""
        _correct_sdpa = scaled_dot_product_attention

        def scaled_dot_product_attention(q, k, v, mask=None, scale=None):
            return _correct_sdpa(q, k, v, mask, 1.0)
        """,
    ),
    Fault(
        name="sdpa-softmax-wrong-axis",
        function="scaled_dot_product_attention",
        module="attention",
        description=N_(
            "the softmax runs over the queries (axis=-2) instead of the keys, so a "
            "query's weights do not sum to 1: take softmax(scores, axis=-1)"
        ),
        course=N_(
            "Transformer 手撕与注意力机制 §03 Scaled Dot-Product Attention: "
            "softmax 沿最后一维（每个 query 对所有 key）"
        ),
        source="""
        def scaled_dot_product_attention(q, k, v, mask=None, scale=None):
            q, k, v, n_rep = _check_qkv(q, k, v)
            k = repeat_kv(k, n_rep)
            v = repeat_kv(v, n_rep)
            scores = (q @ k.swapaxes(-1, -2)) * _scale(scale, q.shape[-1])
            if mask is not None:
                scores = np.where(np.broadcast_to(np.asarray(mask), scores.shape), -np.inf, scores)
            weights = softmax(scores, axis=-2)  # over the queries
            dtype = _float_dtype(q)
            return (weights @ v).astype(dtype, copy=False), weights.astype(dtype, copy=False)
        """,
    ),
    Fault(
        name="sdpa-mask-fill-finite",
        function="scaled_dot_product_attention",
        module="attention",
        description=N_(
            "blocked scores are filled with -1e9 instead of -inf: a row whose keys are "
            "all blocked gets uniform weights instead of zeros; fill with -np.inf and "
            "let the softmax give such a row zeros"
        ),
        course=N_(
            "contract v1 conventions: a fully blocked row gets all-zero weights, never NaN; "
            "Transformer 手撕与注意力机制 §04 Causal Mask (填充 -inf)"
        ),
        signal="rows-sum",
        source="""
        def scaled_dot_product_attention(q, k, v, mask=None, scale=None):
            q, k, v, n_rep = _check_qkv(q, k, v)
            k = repeat_kv(k, n_rep)
            v = repeat_kv(v, n_rep)
            scores = (q @ k.swapaxes(-1, -2)) * _scale(scale, q.shape[-1])
            if mask is not None:
                scores = np.where(np.broadcast_to(np.asarray(mask), scores.shape), -1e9, scores)
            weights = softmax(scores, axis=-1)
            dtype = _float_dtype(q)
            return (weights @ v).astype(dtype, copy=False), weights.astype(dtype, copy=False)
        """,
    ),
    Fault(
        name="sdpa-no-repeat-kv",
        function="scaled_dot_product_attention",
        module="attention",
        description=N_(
            "k and v keep their Hkv heads (repeat_kv is not called): with GQA (Hkv < H) "
            "q @ k.T does not fit; call repeat_kv(k, H // Hkv) and repeat_kv(v, H // Hkv) first"
        ),
        course=N_(
            "Transformer 手撕与注意力机制 §05.5 GQA; contract v1 repeat_kv and "
            "scaled_dot_product_attention: query head h reads key/value head h // (H // Hkv)"
        ),
        signal="runs",
        source="""
        def scaled_dot_product_attention(q, k, v, mask=None, scale=None):
            q, k, v, n_rep = _check_qkv(q, k, v)
            scores = (q @ k.swapaxes(-1, -2)) * _scale(scale, q.shape[-1])  # k keeps Hkv heads
            if mask is not None:
                scores = np.where(np.broadcast_to(np.asarray(mask), scores.shape), -np.inf, scores)
            weights = softmax(scores, axis=-1)
            dtype = _float_dtype(q)
            return (weights @ v).astype(dtype, copy=False), weights.astype(dtype, copy=False)
        """,
    ),
    Fault(
        name="tiled-mask-fill-finite",
        function="tiled_attention",
        module="attention",
        description=N_(
            "tiled_attention fills blocked scores with -1e9 instead of -inf: a query that "
            "may see no key (Tq > Tk) averages the values instead of giving zeros; fill "
            "with -np.inf and give a row with no visible key zeros"
        ),
        course=N_(
            "contract v1 conventions: a fully blocked row gets an all-zero output; "
            "Transformer 手撕与注意力机制 §07.5 FlashAttention 核心思想: online softmax"
        ),
        signal="parity",
        source=tiled_source(
            """
        running_max = np.full((B, H, Tq, 1), -np.inf)
        running_sum = np.zeros((B, H, Tq, 1))
        acc = np.zeros((B, H, Tq, Dv))
        for start in range(0, Tk, block_size):
            stop = min(start + block_size, Tk)
            scores = (q @ k[:, :, start:stop].swapaxes(-1, -2)) * s
            if causal:
                scores = np.where(np.arange(start, stop)[None, :] > position, -1e9, scores)
            new_max = np.maximum(running_max, scores.max(axis=-1, keepdims=True))
            rescale = np.exp(running_max - new_max)
            p = np.exp(scores - new_max)
            running_sum = running_sum * rescale + p.sum(axis=-1, keepdims=True)
            acc = acc * rescale + p @ v[:, :, start:stop]
            running_max = new_max
        return (acc / running_sum).astype(_float_dtype(q), copy=False)
        """
        ),
    ),
    Fault(
        name="tiled-nan-first-blocked",
        function="tiled_attention",
        module="attention",
        description=N_(
            "the online softmax shifts by the running max while it is still -inf (every "
            "score so far blocked): -inf - (-inf) is NaN; shift by 0 while the running max "
            "is -inf, and give a row with no visible key zeros"
        ),
        course=N_(
            "Transformer 手撕与注意力机制 §07.5 FlashAttention 核心思想: online softmax "
            "(running max, running sum); contract v1: never NaN"
        ),
        signal="finite",
        source=tiled_source(
            """
        running_max = np.full((B, H, Tq, 1), -np.inf)
        running_sum = np.zeros((B, H, Tq, 1))
        acc = np.zeros((B, H, Tq, Dv))
        for start in range(0, Tk, block_size):
            stop = min(start + block_size, Tk)
            scores = (q @ k[:, :, start:stop].swapaxes(-1, -2)) * s
            if causal:
                scores = np.where(np.arange(start, stop)[None, :] > position, -np.inf, scores)
            new_max = np.maximum(running_max, scores.max(axis=-1, keepdims=True))
            with np.errstate(invalid="ignore", divide="ignore"):
                rescale = np.exp(running_max - new_max)
                p = np.exp(scores - new_max)
            running_sum = running_sum * rescale + p.sum(axis=-1, keepdims=True)
            acc = acc * rescale + p @ v[:, :, start:stop]
            running_max = new_max
        with np.errstate(invalid="ignore", divide="ignore"):
            out = acc / running_sum
        return out.astype(_float_dtype(q), copy=False)
        """
        ),
    ),
    Fault(
        name="tiled-block-must-divide",
        function="tiled_attention",
        module="attention",
        description=N_(
            "tiled_attention reshapes the keys into Tk // block_size blocks: it fails when "
            "block_size does not divide Tk or is larger than it; loop over "
            "range(0, Tk, block_size) and let the last block be shorter"
        ),
        course=N_(
            "Transformer 手撕与注意力机制 §07.5 FlashAttention 核心思想: tiling; "
            "contract v1 tiled_attention: any block_size >= 1"
        ),
        signal="runs",
        source=tiled_source(
            """
        n_blocks = Tk // block_size
        k_blocks = k.reshape(B, H, n_blocks, block_size, D)
        v_blocks = v.reshape(B, H, n_blocks, block_size, Dv)
        running_max = np.full((B, H, Tq, 1), -np.inf)
        running_sum = np.zeros((B, H, Tq, 1))
        acc = np.zeros((B, H, Tq, Dv))
        for b in range(n_blocks):
            scores = (q @ k_blocks[:, :, b].swapaxes(-1, -2)) * s
            if causal:
                keys = b * block_size + np.arange(block_size)[None, :]
                scores = np.where(keys > position, -np.inf, scores)
            new_max = np.maximum(running_max, scores.max(axis=-1, keepdims=True))
            shift = np.where(new_max == -np.inf, 0.0, new_max)
            rescale = np.exp(running_max - shift)
            p = np.exp(scores - shift)
            running_sum = running_sum * rescale + p.sum(axis=-1, keepdims=True)
            acc = acc * rescale + p @ v_blocks[:, :, b]
            running_max = new_max
        out = np.divide(acc, running_sum, out=np.zeros_like(acc), where=running_sum > 0)
        return out.astype(_float_dtype(q), copy=False)
        """
        ),
    ),
    Fault(
        name="tiled-full-attention",
        function="tiled_attention",
        module="attention",
        description=N_(
            "tiled_attention computes full attention: it holds the whole (Tq, Tk) score array, "
            "so its memory is full attention's; loop over key blocks of block_size with an "
            "online softmax (running max, running sum), holding (Tq, block_size) scores at a time"
        ),
        course=N_(
            "Transformer 手撕与注意力机制 §07.5 FlashAttention 核心思想: tiling, never the n x n matrix"
        ),
        signal="memory",
        measured=True,
        source="""
        def tiled_attention(q, k, v, block_size, causal=True, scale=None):
            q, k, v, n_rep = _check_qkv(q, k, v)
            block_size = _as_size(block_size, "block_size", minimum=1)
            Tq, Tk = q.shape[2], k.shape[2]
            mask = (np.arange(Tk)[None, :] > (Tk - Tq) + np.arange(Tq)[:, None]) if causal else None
            out, _ = scaled_dot_product_attention(q, k, v, mask, scale)
            return out
        """,
    ),
    Fault(
        name="merge-heads-no-transpose",
        function="merge_heads",
        module="primitives",
        description=N_(
            "merge_heads reshapes (B, H, T, D) straight to (B, T, H * D) without moving "
            "the head axis back, so positions and heads are mixed: transpose to (B, T, H, D) "
            "first, then reshape to (B, T, C)"
        ),
        course=N_(
            "第8章 · Attention 与 Transformer Block 阶段三: 恢复序列顺序 transpose(1, 2) before view(B, T, D)"
        ),
        source="""
        def merge_heads(x):
            x = _as_float(x, "x", ndim=4)
            B, H, T, D = x.shape
            return x.reshape(B, T, H * D).copy()
        """,
    ),
    Fault(
        name="mha-float64-mask",
        function="multi_head_attention",
        module="transformer_block",
        description=N_(
            "the mask is a float64 array of 0 and -inf added to the scores: float32 inputs "
            "come back float64; keep the mask boolean and fill with "
            "np.where(mask, -np.inf, scores), or build it in the scores' dtype"
        ),
        course=N_(
            "contract v1 conventions: outputs keep the input's floating dtype; "
            "Transformer 手撕与注意力机制 §04 Causal Mask"
        ),
        signal="dtype",
        source="""
        from .primitives import softmax

        def multi_head_attention(x, wq, wk, wv, wo, n_heads, n_kv_heads=None, causal=True, window=None, rope_theta=None):
            x = _as_float(x, "x", ndim=3)
            B, T, C = x.shape
            H, Hkv, D = _heads(C, n_heads, n_kv_heads)
            _check_rope(D, rope_theta)
            wq, wk, wv, wo = _check_projections(C, H, Hkv, D, _float_dtype(x), wq, wk, wv, wo)
            if window is not None:
                _as_size(window, "window", minimum=1)
            q = split_heads(x @ wq, H)
            k = split_heads(x @ wk, Hkv)
            v = split_heads(x @ wv, Hkv)
            if rope_theta is not None:
                q = rope(q, np.arange(T), rope_theta)
                k = rope(k, np.arange(T), rope_theta)
            k = np.repeat(k, H // Hkv, axis=1)
            v = np.repeat(v, H // Hkv, axis=1)
            bias = np.zeros((T, T))  # float64, whatever x is
            blocked = _mask(T, T, causal, window)
            if blocked is not None:
                bias[blocked] = -np.inf
            weights = softmax((q @ k.swapaxes(-1, -2)) / np.sqrt(D) + bias, axis=-1)
            return merge_heads(weights @ v) @ wo
        """,
    ),
    Fault(
        name="decode-float64-cache",
        function="attention_decode",
        module="transformer_block",
        description=N_(
            "an empty cache is allocated with np.zeros, which is float64: float32 inputs "
            "come back with float64 caches; allocate it in the new keys' dtype "
            "(np.zeros(..., dtype=k_new.dtype)) or start from the new keys"
        ),
        course=N_(
            "contract v1 conventions: outputs keep the input's floating dtype; "
            "Transformer 手撕与注意力机制 §07 KV Cache"
        ),
        signal="dtype",
        source=decode_source(
            cache="""
            if past_k is None:
                past_k = np.zeros((B, Hkv, 0, D))
                past_v = np.zeros((B, Hkv, 0, D))
            """,
            k_all="np.concatenate([past_k, k_new], axis=2)",
            v_all="np.concatenate([past_v, v_new], axis=2)",
        ),
    ),
    Fault(
        name="rms-eps-hard-coded",
        function="rms_norm",
        module="primitives",
        description=N_(
            "rms_norm adds a fixed 1e-6 and ignores its eps argument: use the eps it is given"
        ),
        course=N_(
            "Transformer 手撕与注意力机制 §06.2 RMSNorm; contract v1 rms_norm(x, weight, eps=1e-6)"
        ),
        source="""
        def rms_norm(x, weight, eps=1e-6):
            x = _as_float(x, "x")
            weight = _check_vector(weight, "weight", x.shape[-1])
            rms = np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-6)
            return (x / rms * weight).astype(_float_dtype(x), copy=False)
        """,
    ),
    Fault(
        name="layer-norm-eps-hard-coded",
        function="layer_norm",
        module="primitives",
        description=N_(
            "layer_norm adds a fixed 1e-5 and ignores its eps argument: use the eps it is given"
        ),
        course=N_(
            "Transformer 手撕与注意力机制 §06.1 LayerNorm: (x - μ) / √(σ² + ε); "
            "contract v1 layer_norm(x, weight, bias, eps=1e-5)"
        ),
        source="""
        _correct_layer_norm = layer_norm

        def layer_norm(x, weight, bias, eps=1e-5):
            return _correct_layer_norm(x, weight, bias, 1e-5)
        """,
    ),
    Fault(
        name="layer-norm-std-plus-eps",
        function="layer_norm",
        module="primitives",
        description=N_(
            "layer_norm divides by std + eps: divide by sqrt(var + eps), eps inside the square root"
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
            mean = np.mean(x, axis=-1, keepdims=True)
            std = np.std(x, axis=-1, keepdims=True)
            return ((x - mean) / (std + eps) * weight + bias).astype(_float_dtype(x), copy=False)
        """,
    ),
    Fault(
        name="rope-float32-tables",
        function="rope",
        module="primitives",
        description=N_(
            "RoPE's angles, cos and sin are computed in float32: float64 inputs lose "
            "precision, large positions most; compute the tables in float64"
        ),
        course=N_(
            "Transformer 手撕与注意力机制 §01.5 RoPE; contract v1 conventions: inputs "
            "arrive as float64"
        ),
        source="""
        def rope(x, positions, theta=10000.0):
            x = _as_float(x, "x")
            T, D = x.shape[-2:]
            if D % 2:
                _fail("x", f"RoPE needs an even head width D, got D={D}")
            inv_freq = (float(theta) ** (-2.0 * np.arange(D // 2) / D)).astype(np.float32)
            angle = np.asarray(positions).astype(np.float32)[:, None] * inv_freq[None, :]
            cos, sin = np.cos(angle), np.sin(angle)
            even, odd = x[..., 0::2], x[..., 1::2]
            out = np.empty(x.shape, dtype=_float_dtype(x))
            out[..., 0::2] = even * cos - odd * sin
            out[..., 1::2] = even * sin + odd * cos
            return out
        """,
    ),
)
