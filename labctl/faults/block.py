"""Faults beyond the course table, in contract order: RoPE, the sinusoidal table, the norms,
the feed-forwards and the composed functions (multi-head attention, decode, tiled attention,
the decoder)."""

from __future__ import annotations

from labctl.faults.base import Fault
from labctl.i18n import N_

BLOCK: tuple[Fault, ...] = (
    Fault(
        name="rope-half-split",
        function="rope",
        module="primitives",
        description=N_(
            "RoPE rotates the pairs (i, i + D/2) (HF's rotate_half layout) instead of "
            "the interleaved pairs (2i, 2i+1) of the RoPE paper and the course; rotate "
            "(x[..., 0::2], x[..., 1::2]) by the angle of pair i"
        ),
        course=N_(
            "Transformer 手撕与注意力机制 §01.5 RoPE 的旋转矩阵推导; contract v1 rope: interleaved pairs"
        ),
        source="""
        def rope(x, positions, theta=10000.0):
            x = _as_float(x, "x")
            T, D = x.shape[-2:]
            if D % 2:
                _fail("x", f"RoPE needs an even head width D, got D={D}")
            inv_freq = float(theta) ** (-2.0 * np.arange(D // 2) / D)
            angle = np.asarray(positions).astype(np.float64)[:, None] * inv_freq[None, :]
            cos, sin = np.cos(angle), np.sin(angle)
            first, second = x[..., : D // 2], x[..., D // 2 :]
            out = np.concatenate([first * cos - second * sin, first * sin + second * cos], axis=-1)
            return out.astype(_float_dtype(x), copy=False)
        """,
    ),
    Fault(
        name="rope-ignores-positions",
        function="rope",
        module="primitives",
        description=N_(
            "RoPE rotates row t by t (0..T-1) whatever the positions say: right for a "
            "fresh sequence, wrong for non-consecutive positions and for decode with a cache"
        ),
        course=N_(
            "Transformer 手撕与注意力机制 §01.5 RoPE; §07 KV Cache (new tokens sit at Tp .. Tp+Tn-1)"
        ),
        source="""
        _correct_rope = rope

        def rope(x, positions, theta=10000.0):
            return _correct_rope(x, np.arange(np.asarray(x).shape[-2]), theta)
        """,
    ),
    Fault(
        name="sinusoidal-hang",
        function="sinusoidal_positions",
        module="primitives",
        description=N_(
            "the loop over column pairs never advances its index: sinusoidal_positions "
            "never returns"
        ),
        course=N_("Transformer 手撕与注意力机制 §01.2 Positional Encoding"),
        signal="runs",
        hangs=True,
        source="""
        def sinusoidal_positions(seq_len, d_model):
            pe = np.zeros((seq_len, d_model))
            p = np.arange(seq_len, dtype=np.float64)
            i = 0
            while i < d_model:  # i is never advanced
                pe[:, i] = np.sin(p / 10000.0 ** (i / d_model))
            return pe
        """,
    ),
    Fault(
        name="rms-eps-outside-sqrt",
        function="rms_norm",
        module="primitives",
        description=N_(
            "eps is added outside the square root: x / (sqrt(mean(x**2)) + eps); add it "
            "inside, x / sqrt(mean(x**2) + eps)"
        ),
        course=N_(
            "Transformer 手撕与注意力机制 §06.2 RMSNorm; contract v1 rms_norm: x / sqrt(mean(x**2) + eps)"
        ),
        source="""
        def rms_norm(x, weight, eps=1e-6):
            x = _as_float(x, "x")
            weight = _check_vector(weight, "weight", x.shape[-1])
            rms = np.sqrt(np.mean(x * x, axis=-1, keepdims=True)) + eps
            return (x / rms * weight).astype(_float_dtype(x), copy=False)
        """,
    ),
    Fault(
        name="rms-eps-default",
        function="rms_norm",
        module="primitives",
        description=N_(
            "rms_norm's eps defaults to 1e-5 (LayerNorm's) instead of the contract's 1e-6"
        ),
        course=N_(
            "Transformer 手撕与注意力机制 §06 LayerNorm vs RMSNorm: ε 通常 1e-5 (LayerNorm), rms_norm eps=1e-6"
        ),
        signal="contract",
        source="""
        _correct_rms_norm = rms_norm

        def rms_norm(x, weight, eps=1e-5):
            return _correct_rms_norm(x, weight, eps)
        """,
    ),
    Fault(
        name="layer-norm-unbiased",
        function="layer_norm",
        module="primitives",
        description=N_(
            "layer_norm divides the variance by C - 1 (unbiased, torch.var's default) instead of C"
        ),
        course=N_("Transformer 手撕与注意力机制 §06.1 LayerNorm: σ² = (1/d) Σ (x_i - μ)²"),
        source="""
        def layer_norm(x, weight, bias, eps=1e-5):
            x = _as_float(x, "x")
            weight = _check_vector(weight, "weight", x.shape[-1])
            bias = _check_vector(bias, "bias", x.shape[-1])
            mean = np.mean(x, axis=-1, keepdims=True)
            var = np.var(x, axis=-1, keepdims=True, ddof=1)
            return ((x - mean) / np.sqrt(var + eps) * weight + bias).astype(_float_dtype(x), copy=False)
        """,
    ),
    Fault(
        name="layer-norm-in-place",
        function="layer_norm",
        module="primitives",
        description=N_(
            "layer_norm centres its input in place (x -= mean): the result is right, "
            "but the caller's array is changed"
        ),
        course=N_("contract v1 conventions: functions are pure, never modify an input in place"),
        signal="pure",
        source="""
        def layer_norm(x, weight, bias, eps=1e-5):
            x = _as_float(x, "x")
            weight = _check_vector(weight, "weight", x.shape[-1])
            bias = _check_vector(bias, "bias", x.shape[-1])
            x -= np.mean(x, axis=-1, keepdims=True)
            var = np.mean(x * x, axis=-1, keepdims=True)
            return (x / np.sqrt(var + eps) * weight + bias).astype(_float_dtype(x), copy=False)
        """,
    ),
    Fault(
        name="relu-ffn-float64",
        function="relu_ffn",
        module="primitives",
        description=N_(
            "relu_ffn converts its input to float64 'to be safe': a float32 input comes "
            "back float64"
        ),
        course=N_("contract v1 conventions: outputs keep the input's floating dtype"),
        signal="dtype",
        source="""
        def relu_ffn(x, w1, b1, w2, b2):
            x = np.asarray(x, dtype=np.float64)
            return np.maximum(x @ w1 + b1, 0.0) @ w2 + b2
        """,
    ),
    Fault(
        name="swiglu-swapped",
        function="swiglu_ffn",
        module="primitives",
        description=N_("SwiGLU gates the wrong projection: silu(x @ w_up) * (x @ w_gate)"),
        course=N_("Transformer 手撕与注意力机制 §06.5 FFN 与激活函数：SwiGLU"),
        source="""
        def swiglu_ffn(x, w_gate, w_up, w_down):
            x = _as_float(x, "x")
            return ((_silu(x @ w_up) * (x @ w_gate)) @ w_down).astype(_float_dtype(x), copy=False)
        """,
    ),
    Fault(
        name="mha-window-ignored",
        function="multi_head_attention",
        module="transformer_block",
        description=N_(
            "multi_head_attention accepts window but masks causally only: every "
            "query still sees the whole past"
        ),
        course=N_("第8章 · Attention 与 Transformer Block 阶段五 滑动窗口注意力 (SWA)"),
        source="""
        _correct_mha = multi_head_attention

        def multi_head_attention(x, wq, wk, wv, wo, n_heads, n_kv_heads=None, causal=True, window=None, rope_theta=None):
            return _correct_mha(x, wq, wk, wv, wo, n_heads, n_kv_heads, causal, None, rope_theta)
        """,
    ),
    Fault(
        name="decode-cache-not-appended",
        function="attention_decode",
        module="transformer_block",
        description=N_(
            "attention_decode hands back only the new tokens' keys and values instead "
            "of the caches with them appended: the next step loses its past"
        ),
        course=N_("Transformer 手撕与注意力机制 §07 KV Cache 原理"),
        signal="shape",
        source="""
        _correct_decode = attention_decode

        def attention_decode(x_new, past_k, past_v, wq, wk, wv, wo, n_heads, n_kv_heads=None, window=None, rope_theta=None):
            out, k_all, v_all = _correct_decode(x_new, past_k, past_v, wq, wk, wv, wo, n_heads, n_kv_heads, window, rope_theta)
            Tn = np.asarray(x_new).shape[1]
            return out, k_all[:, :, -Tn:], v_all[:, :, -Tn:]
        """,
    ),
    Fault(
        name="tiled-no-rescale",
        function="tiled_attention",
        module="attention",
        description=N_(
            "the online softmax never rescales what it has summed when a later block "
            "raises the running max: exp(m_old - m_new) is missing"
        ),
        course=N_(
            "Transformer 手撕与注意力机制 §07.5 FlashAttention 核心思想: online softmax (running max, running sum)"
        ),
        source="""
        def tiled_attention(q, k, v, block_size, causal=True, scale=None):
            q, k, v, n_rep = _check_qkv(q, k, v)
            block_size = _as_size(block_size, "block_size", minimum=1)
            k = repeat_kv(k, n_rep)
            v = repeat_kv(v, n_rep)
            B, H, Tq, _ = q.shape
            Tk, Dv = k.shape[2], v.shape[3]
            s = _scale(scale, q.shape[-1])
            position = (Tk - Tq) + np.arange(Tq)[:, None]
            running_max = np.full((B, H, Tq, 1), -np.inf)
            running_sum = np.zeros((B, H, Tq, 1))
            acc = np.zeros((B, H, Tq, Dv))
            for start in range(0, Tk, block_size):
                stop = min(start + block_size, Tk)
                scores = (q @ k[:, :, start:stop].swapaxes(-1, -2)) * s
                if causal:
                    scores = np.where(np.arange(start, stop)[None, :] > position, -np.inf, scores)
                new_max = np.maximum(running_max, scores.max(axis=-1, keepdims=True))
                shift = np.where(new_max == -np.inf, 0.0, new_max)
                p = np.exp(scores - shift)
                running_sum = running_sum + p.sum(axis=-1, keepdims=True)  # never rescaled
                acc = acc + p @ v[:, :, start:stop]
                running_max = new_max
            out = np.divide(acc, running_sum, out=np.zeros_like(acc), where=running_sum > 0)
            return out.astype(_float_dtype(q), copy=False)
        """,
    ),
    Fault(
        name="decoder-no-final-norm",
        function="decoder_forward",
        module="transformer_block",
        description=N_("decoder_forward skips the final rms_norm before the tied unembedding"),
        course=N_(
            "Transformer 手撕与注意力机制 §06.4 Pre-Norm: 一些模型会在最后额外加一个 RMSNorm; §08 完整最小 Transformer Decoder"
        ),
        source="""
        def decoder_forward(token_ids, params, n_heads, n_kv_heads=None, eps=1e-6, positional="sinusoidal", rope_theta=10000.0, window=None):
            embed = _as_float(params["embed"], "embed", ndim=2)
            V, C = embed.shape
            ids = np.asarray(token_ids)
            x = embed[ids]
            if positional == "sinusoidal":
                x = x + sinusoidal_positions(ids.shape[1], C).astype(x.dtype)
            theta = rope_theta if positional == "rope" else None
            for block in params["blocks"]:
                x = transformer_block(x, block, n_heads, n_kv_heads, eps, rope_theta=theta, window=window)
            return x @ embed.T  # no final rms_norm
        """,
    ),
)
