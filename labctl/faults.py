"""The fault catalogue: named, documented ways to break a correct clean room.

Each fault is a small transformation of the project's clean room: source
appended to one of its modules. Appending a `def` rebinds the function before
any other module imports it, so the fault flows through every composition
that uses the function, as a learner's bug would (a reversed mask breaks
`multi_head_attention`, the block and the model too).

The catalogue proves labctl's checks: every fault must be caught by at least
one check (`labctl faults` prints the matrix), and verify's diagnosis names a
learner's failure after the fault it matches. `signal` names the check each
fault is there to prove (`labctl.verify.checks`); the matrix shows every
check that catches it. The first six faults are the course's own table (002
故障注入与预期信号; its residual row as two faults), then a wrong GQA order and a
decode RoPE offset; the rest give every contract function a fault and every
check one that proves it (stability, purity, dtype, the import policy, a
hang, the signature, an argument check).
"""

from __future__ import annotations

import shutil
import textwrap
from dataclasses import dataclass
from importlib import util
from pathlib import Path


@dataclass(frozen=True)
class Fault:
    """One fault: `source` appended to `module` of the project's clean room breaks `function`.

    `course` is where the course (or the contract) teaches the right behaviour;
    `signal` is the verify check this fault is there to prove (it must catch it).
    """

    name: str
    function: str
    module: str
    description: str
    course: str
    source: str
    signal: str = "parity"

    def materialize(self, dest: Path, base: Path | None = None) -> Path:
        """Write the project's clean room with this fault into `dest` (which must not exist)."""
        base = base or project_clean_room()
        shutil.copytree(base, dest, ignore=shutil.ignore_patterns("__pycache__"))
        target = dest / f"{self.module}.py"
        with target.open("a", encoding="utf-8") as handle:
            handle.write(f"\n\n# injected fault: {self.name}\n")
            handle.write(textwrap.dedent(self.source).strip() + "\n")
        return dest


def project_clean_room() -> Path:
    return Path(util.find_spec("clean_room").origin).parent


CATALOGUE: tuple[Fault, ...] = (
    Fault(
        name="residual-dropped",
        function="transformer_block",
        module="transformer_block",
        description="the attention sublayer's residual is dropped: h = attention(norm(x)), not x + ...",
        course="002 故障注入与预期信号: residual 分支 shape 或顺序错误",
        source="""
        def transformer_block(x, params, n_heads, n_kv_heads=None, eps=1e-6, rope_theta=None, window=None):
            x = _as_float(x, "x", ndim=3)
            _check_block_params(params)
            p = params
            h = multi_head_attention(
                rms_norm(x, p["norm1"], eps), p["wq"], p["wk"], p["wv"], p["wo"],
                n_heads, n_kv_heads, causal=True, window=window, rope_theta=rope_theta,
            )
            return h + swiglu_ffn(rms_norm(h, p["norm2"], eps), p["w_gate"], p["w_up"], p["w_down"])
        """,
    ),
    Fault(
        name="residual-post-norm",
        function="transformer_block",
        module="transformer_block",
        description="norm and residual in the wrong order: h = rms_norm(x + attention(x)) (post-norm)",
        course="002 故障注入与预期信号: residual 分支 shape 或顺序错误; 阶段四 Pre-LN vs Post-LN",
        source="""
        def transformer_block(x, params, n_heads, n_kv_heads=None, eps=1e-6, rope_theta=None, window=None):
            x = _as_float(x, "x", ndim=3)
            _check_block_params(params)
            p = params
            attended = multi_head_attention(
                x, p["wq"], p["wk"], p["wv"], p["wo"],
                n_heads, n_kv_heads, causal=True, window=window, rope_theta=rope_theta,
            )
            h = rms_norm(x + attended, p["norm1"], eps)
            return rms_norm(h + swiglu_ffn(h, p["w_gate"], p["w_up"], p["w_down"]), p["norm2"], eps)
        """,
    ),
    Fault(
        name="no-sqrt-dk",
        function="scaled_dot_product_attention",
        module="attention",
        description="scores are not divided by sqrt(D): the default scale is 1",
        course="002 故障注入与预期信号: 忘记除以 √d_k",
        source="""
        _correct_sdpa = scaled_dot_product_attention

        def scaled_dot_product_attention(q, k, v, mask=None, scale=None):
            return _correct_sdpa(q, k, v, mask, 1.0 if scale is None else scale)
        """,
    ),
    Fault(
        name="mask-adds-zero",
        function="scaled_dot_product_attention",
        module="attention",
        description="the mask adds 0 instead of -inf to blocked scores, so it blocks nothing",
        course="002 故障注入与预期信号: mask 加 0 而不是负无穷",
        signal="causal",
        source="""
        _correct_sdpa = scaled_dot_product_attention

        def scaled_dot_product_attention(q, k, v, mask=None, scale=None):
            return _correct_sdpa(q, k, v, None, scale)
        """,
    ),
    Fault(
        name="mask-reversed",
        function="causal_mask",
        module="primitives",
        description="the causal triangle is reversed: the past is blocked and the future visible",
        course="002 故障注入与预期信号: mask 上下三角写反",
        signal="causal",
        source="""
        def causal_mask(t_q, t_k=None):
            t_q = _as_size(t_q, "t_q")
            t_k = t_q if t_k is None else _as_size(t_k, "t_k")
            i = np.arange(t_q)[:, None]
            j = np.arange(t_k)[None, :]
            return j < (t_k - t_q) + i
        """,
    ),
    Fault(
        name="head-seq-confused",
        function="split_heads",
        module="primitives",
        description="the reshape confuses head and sequence axes: (B, T, C) -> (B, H, T, D) "
        "without the transpose",
        course="002 故障注入与预期信号: 多头 reshape 时 head 与序列维混淆",
        source="""
        def split_heads(x, n_heads):
            x = _as_float(x, "x", ndim=3)
            n_heads = _as_size(n_heads, "n_heads", minimum=1)
            B, T, C = x.shape
            if C % n_heads:
                _fail("n_heads", f"C={C} is not divisible by n_heads={n_heads}")
            return x.reshape(B, n_heads, T, C // n_heads).copy()
        """,
    ),
    Fault(
        name="gqa-tiled",
        function="repeat_kv",
        module="primitives",
        description="key/value heads are tiled (0,1,0,1) instead of interleaved (0,0,1,1): "
        "query head h reads the wrong group",
        course="004 §05.5 GQA (K.repeat(n_groups, axis=0)); contract repeat_kv",
        source="""
        def repeat_kv(x, n_rep):
            x = _as_float(x, "x", ndim=4)
            n_rep = _as_size(n_rep, "n_rep", minimum=1)
            return np.tile(x, (1, n_rep, 1, 1))
        """,
    ),
    Fault(
        name="decode-rope-offset",
        function="attention_decode",
        module="transformer_block",
        description="decode applies RoPE at positions 0..Tn-1 instead of Tp..Tp+Tn-1",
        course="004 §07 KV Cache; §01.5 RoPE",
        source="""
        _correct_decode = attention_decode

        def attention_decode(x_new, past_k, past_v, wq, wk, wv, wo, n_heads, n_kv_heads=None, window=None, rope_theta=None):
            if rope_theta is None or past_k is None:
                return _correct_decode(x_new, past_k, past_v, wq, wk, wv, wo, n_heads, n_kv_heads, window, rope_theta)
            B, Tn, C = np.asarray(x_new).shape
            H = n_heads
            Hkv = H if n_kv_heads is None else n_kv_heads
            q = rope(split_heads(x_new @ wq, H), np.arange(Tn), rope_theta)
            k_new = rope(split_heads(x_new @ wk, Hkv), np.arange(Tn), rope_theta)
            v_new = split_heads(x_new @ wv, Hkv)
            k_all = np.concatenate([past_k, k_new], axis=2)
            v_all = np.concatenate([past_v, v_new], axis=2)
            Tk = k_all.shape[2]
            mask = causal_mask(Tn, Tk) if window is None else sliding_window_mask(Tn, window, Tk)
            out, _ = scaled_dot_product_attention(q, k_all, v_all, mask)
            return merge_heads(out) @ wo, k_all, v_all
        """,
    ),
    # ---- beyond the course table: one or more faults for every contract function, and a
    # ---- fault for every check (stability, purity, dtype, import policy, hang, signature)
    Fault(
        name="softmax-no-max",
        function="softmax",
        module="primitives",
        description="softmax does not subtract the max first: exp(1000) overflows to inf and "
        "inf / inf gives NaN",
        course="004 §03.5 数值稳定的 softmax：减去最大值防止 exp 溢出",
        signal="finite",
        source="""
        def softmax(x, axis=-1):
            x = _as_float(x, "x")
            e = np.exp(x)  # no max subtracted
            return (e / np.sum(e, axis=axis, keepdims=True)).astype(_float_dtype(x), copy=False)
        """,
    ),
    Fault(
        name="softmax-blocked-nan",
        function="softmax",
        module="primitives",
        description="a slice that is all -inf (every key blocked) gives NaN: -inf - (-inf) is "
        "NaN; the contract asks for zeros",
        course="contract v1 conventions: a fully blocked row gets all-zero weights, never NaN; "
        "004 §04 Causal Mask",
        signal="rows-sum",
        source="""
        def softmax(x, axis=-1):
            x = _as_float(x, "x")
            e = np.exp(x - np.max(x, axis=axis, keepdims=True))
            return (e / np.sum(e, axis=axis, keepdims=True)).astype(_float_dtype(x), copy=False)
        """,
    ),
    Fault(
        name="causal-top-left",
        function="causal_mask",
        module="primitives",
        description="the causal mask is aligned top-left (j > i, as PyTorch's is_causal): "
        "right when Tq == Tk, wrong for decode with a cache (Tq < Tk)",
        course="004 §07 KV Cache; contract v1: causal alignment is bottom-right",
        source="""
        def causal_mask(t_q, t_k=None):
            t_q = _as_size(t_q, "t_q")
            t_k = t_q if t_k is None else _as_size(t_k, "t_k")
            return np.arange(t_k)[None, :] > np.arange(t_q)[:, None]
        """,
    ),
    Fault(
        name="window-off-by-one",
        function="sliding_window_mask",
        module="primitives",
        description="the sliding window sees keys p - window .. p: window + 1 keys, the current "
        "token not counted in the window",
        course="002 阶段五 滑动窗口注意力: [i-W+1, i]",
        source="""
        def sliding_window_mask(t_q, window, t_k=None):
            t_q = _as_size(t_q, "t_q")
            window = _as_size(window, "window", minimum=1)
            t_k = t_q if t_k is None else _as_size(t_k, "t_k")
            p = (t_k - t_q) + np.arange(t_q)[:, None]
            j = np.arange(t_k)[None, :]
            return (j > p) | (j < p - window)
        """,
    ),
    Fault(
        name="window-unchecked",
        function="sliding_window_mask",
        module="primitives",
        description="window < 1 is accepted and gives a mask that blocks every key, instead of "
        "a ValueError naming window",
        course="contract v1 Bad input: window < 1",
        signal="bad-input",
        source="""
        def sliding_window_mask(t_q, window, t_k=None):
            t_q = _as_size(t_q, "t_q")
            t_k = t_q if t_k is None else _as_size(t_k, "t_k")
            p = (t_k - t_q) + np.arange(t_q)[:, None]
            j = np.arange(t_k)[None, :]
            return (j > p) | (j < p - int(window) + 1)
        """,
    ),
    Fault(
        name="padding-off-by-one",
        function="padding_mask",
        module="primitives",
        description="the padding mask blocks positions > length instead of >= length: the "
        "first pad token stays visible",
        course="contract v1 padding_mask: True where key position >= lengths[b]",
        source="""
        def padding_mask(lengths, t):
            lengths = np.asarray(lengths)
            t = _as_size(t, "t")
            return (np.arange(t)[None, :] > lengths[:, None])[:, None, None, :]
        """,
    ),
    Fault(
        name="mask-after-softmax",
        function="scaled_dot_product_attention",
        module="attention",
        description="the mask zeroes blocked weights after the softmax instead of -inf before "
        "it: rows no longer sum to 1 and the future still moves the denominator",
        course="004 §04 Causal Mask: 不是把 mask 位置的权重设为 0（在 softmax 之后）",
        signal="rows-sum",
        source="""
        def scaled_dot_product_attention(q, k, v, mask=None, scale=None):
            q, k, v, n_rep = _check_qkv(q, k, v)
            k = repeat_kv(k, n_rep)
            v = repeat_kv(v, n_rep)
            weights = softmax((q @ k.swapaxes(-1, -2)) * _scale(scale, q.shape[-1]), axis=-1)
            if mask is not None:
                weights = np.where(np.broadcast_to(np.asarray(mask), weights.shape), 0.0, weights)
            dtype = _float_dtype(q)
            return (weights @ v).astype(dtype, copy=False), weights.astype(dtype, copy=False)
        """,
    ),
    Fault(
        name="merge-heads-imports-torch",
        function="merge_heads",
        module="primitives",
        description="merge_heads tries `import torch` for a faster path (and falls back to "
        "NumPy): the clean room breaks the import policy",
        course="002 L3 clean-room 要求: 不得导入课程参考实现",
        signal="import-policy",
        source="""
        def merge_heads(x):
            try:
                import torch  # a faster path when torch is there
            except ImportError:
                torch = None
            x = _as_float(x, "x", ndim=4)
            B, H, T, D = x.shape
            return np.ascontiguousarray(x.transpose(0, 2, 1, 3)).reshape(B, T, H * D)
        """,
    ),
    Fault(
        name="rope-half-split",
        function="rope",
        module="primitives",
        description="RoPE rotates the pairs (i, i + D/2) (HF's rotate_half layout) instead of "
        "the interleaved pairs (2i, 2i+1) of the RoPE paper and the course",
        course="004 §01.5 RoPE 的旋转矩阵推导; contract v1 rope: interleaved pairs",
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
        description="RoPE rotates row t by t (0..T-1) whatever the positions say: right for a "
        "fresh sequence, wrong for non-consecutive positions and for decode with a cache",
        course="004 §01.5 RoPE; §07 KV Cache (new tokens sit at Tp .. Tp+Tn-1)",
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
        description="the loop over column pairs never advances its index: sinusoidal_positions "
        "never returns",
        course="004 §01.2 Positional Encoding",
        signal="runs",
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
        description="eps is added outside the square root: x / (sqrt(mean(x**2)) + eps)",
        course="004 §06.2 RMSNorm; contract v1 rms_norm: x / sqrt(mean(x**2) + eps)",
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
        description="rms_norm's eps defaults to 1e-5 (LayerNorm's) instead of the contract's 1e-6",
        course="004 §06 LayerNorm vs RMSNorm: ε 通常 1e-5 (LayerNorm), rms_norm eps=1e-6",
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
        description="layer_norm divides the variance by C - 1 (unbiased, torch.var's default) "
        "instead of C",
        course="004 §06.1 LayerNorm: σ² = (1/d) Σ (x_i - μ)²",
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
        description="layer_norm centres its input in place (x -= mean): the result is right, "
        "but the caller's array is changed",
        course="contract v1 conventions: functions are pure, never modify an input in place",
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
        description="relu_ffn converts its input to float64 'to be safe': a float32 input comes "
        "back float64",
        course="contract v1 conventions: outputs keep the input's floating dtype",
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
        description="SwiGLU gates the wrong projection: silu(x @ w_up) * (x @ w_gate)",
        course="004 §06.5 FFN 与激活函数：SwiGLU",
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
        description="multi_head_attention accepts window but masks causally only: every "
        "query still sees the whole past",
        course="002 阶段五 滑动窗口注意力 (SWA)",
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
        description="attention_decode hands back only the new tokens' keys and values instead "
        "of the caches with them appended: the next step loses its past",
        course="004 §07 KV Cache 原理",
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
        description="the online softmax never rescales what it has summed when a later block "
        "raises the running max: exp(m_old - m_new) is missing",
        course="004 §07.5 FlashAttention 核心思想: online softmax (running max, running sum)",
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
        description="decoder_forward skips the final rms_norm before the tied unembedding",
        course="004 §06.4 Pre-Norm: 一些模型会在最后额外加一个 RMSNorm; §08 完整最小 Transformer Decoder",
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


def get(name: str) -> Fault:
    for fault in CATALOGUE:
        if fault.name == name:
            return fault
    raise KeyError(name)
