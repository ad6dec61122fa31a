"""The course's faults: its table (第8章 故障注入与预期信号; its residual row as two faults),
then a wrong GQA order and a decode RoPE offset."""

from __future__ import annotations

from labctl.faults.base import Fault
from labctl.i18n import N_

# A causal_mask with the clean room's checks and index grids, blocking where `{blocked}`: the
# course's reversed triangle, and the learners' off-by-ones (`labctl.faults.common`).
CAUSAL_MASK = """
def causal_mask(t_q, t_k=None):
    t_q = _as_size(t_q, "t_q")
    t_k = t_q if t_k is None else _as_size(t_k, "t_k")
    i = np.arange(t_q)[:, None]
    j = np.arange(t_k)[None, :]
    return {blocked}
"""

COURSE: tuple[Fault, ...] = (
    Fault(
        name="residual-dropped",
        function="transformer_block",
        module="transformer_block",
        description=N_(
            "the attention sublayer's residual is dropped: h = attention(norm(x)), not x + ..."
        ),
        course=N_(
            "第8章 · Attention 与 Transformer Block 故障注入与预期信号: residual 分支 shape 或顺序错误"
        ),
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
        description=N_(
            "norm and residual in the wrong order: h = rms_norm(x + attention(x)) (post-norm)"
        ),
        course=N_(
            "第8章 · Attention 与 Transformer Block 故障注入与预期信号: residual 分支 shape 或顺序错误; 阶段四 Pre-LN vs Post-LN"
        ),
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
        description=N_(
            "scores are not divided by sqrt(D): the default scale is 1; when scale is None, "
            "multiply q @ k.T by 1 / sqrt(D), D the head width"
        ),
        course=N_("第8章 · Attention 与 Transformer Block 故障注入与预期信号: 忘记除以 √d_k"),
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
        description=N_(
            "the mask adds 0 instead of -inf to blocked scores, so it blocks nothing; fill blocked scores with -inf (np.where(mask, -np.inf, scores))"
        ),
        course=N_(
            "第8章 · Attention 与 Transformer Block 故障注入与预期信号: mask 加 0 而不是负无穷"
        ),
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
        description=N_(
            "the causal triangle is reversed: the past is blocked and the future visible"
        ),
        course=N_("第8章 · Attention 与 Transformer Block 故障注入与预期信号: mask 上下三角写反"),
        signal="causal",
        source=CAUSAL_MASK.format(blocked="j < (t_k - t_q) + i"),
    ),
    Fault(
        name="head-seq-confused",
        function="split_heads",
        module="primitives",
        description=N_(
            "the reshape confuses head and sequence axes: (B, T, C) -> (B, H, T, D) "
            "without the transpose; reshape to (B, T, H, D), then transpose to (B, H, T, D)"
        ),
        course=N_(
            "第8章 · Attention 与 Transformer Block 故障注入与预期信号: 多头 reshape 时 head 与序列维混淆"
        ),
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
        description=N_(
            "key/value heads are tiled (0,1,0,1) instead of interleaved (0,0,1,1): "
            "query head h reads the wrong group"
        ),
        course=N_(
            "Transformer 手撕与注意力机制 §05.5 GQA (K.repeat(n_groups, axis=0)); contract repeat_kv"
        ),
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
        description=N_("decode applies RoPE at positions 0..Tn-1 instead of Tp..Tp+Tn-1"),
        course=N_("Transformer 手撕与注意力机制 §07 KV Cache; §01.5 RoPE"),
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
)
