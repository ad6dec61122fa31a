"""Faults the labs `positions`, `norms-ffn`, `multi-head` and `worked-examples` are proved on.

Like the catalogue's, each is source appended to a module of the project's
clean room; they are mistakes a learner makes in the functions these labs
exercise. They are kept out of `CATALOGUE` (verify's fault matrix) for now:
the lab tests use them by name through `get` (merge_heads's, a bug learners write,
moved there: `labctl.faults.learner`).
"""

from __future__ import annotations

from labctl.faults.base import Fault
from labctl.i18n import N_

LABS_WAVE2: tuple[Fault, ...] = (
    Fault(
        name="sinusoidal-unfilled",
        function="sinusoidal_positions",
        module="primitives",
        description=N_(
            "sinusoidal_positions returns the zero table it allocated, never filled: "
            "every position gets the same (zero) vector"
        ),
        course=N_("Transformer 手撕与注意力机制 §1.2.2 绝对位置编码的矩阵形式"),
        source="""
        def sinusoidal_positions(seq_len, d_model):
            return np.zeros((seq_len, d_model))
        """,
    ),
    Fault(
        name="sinusoidal-odd-frequency",
        function="sinusoidal_positions",
        module="primitives",
        description=N_(
            "the frequencies are taken per column (10000 ** (j / d) for column j), so "
            "the cos of a pair turns at another rate than its sin"
        ),
        course=N_(
            "第8章 · Attention 与 Transformer Block 阶段五: PE(p, 2i) = sin(p ω_i), PE(p, 2i+1) = cos(p ω_i)"
        ),
        source="""
        def sinusoidal_positions(seq_len, d_model):
            p = np.arange(seq_len, dtype=np.float64)[:, None]
            div = 10000.0 ** (np.arange(d_model, dtype=np.float64) / d_model)
            pe = np.empty((seq_len, d_model))
            pe[:, 0::2] = np.sin(p / div[0::2])
            pe[:, 1::2] = np.cos(p / div[1::2])
            return pe
        """,
    ),
    Fault(
        name="rope-unapplied",
        function="rope",
        module="primitives",
        description=N_("rope returns its input unrotated: attention never sees a position"),
        course=N_("Transformer 手撕与注意力机制 §01.5 RoPE 的旋转矩阵推导"),
        source="""
        def rope(x, positions, theta=10000.0):
            return _as_float(x, "x").copy()
        """,
    ),
    Fault(
        name="rope-not-rotation",
        function="rope",
        module="primitives",
        description=N_(
            "the second row of each 2x2 block has the wrong sign: (x1 cos + x2 sin, "
            "x1 sin + x2 cos) is a reflection-and-stretch, not a rotation"
        ),
        course=N_(
            "Transformer 手撕与注意力机制 §1.5.1 二维旋转的直觉: R(mθ) = [[cos, -sin], [sin, cos]]"
        ),
        source="""
        def rope(x, positions, theta=10000.0):
            x = _as_float(x, "x")
            D = x.shape[-1]
            inv_freq = float(theta) ** (-2.0 * np.arange(D // 2) / D)
            angle = np.asarray(positions).astype(np.float64)[:, None] * inv_freq[None, :]
            cos, sin = np.cos(angle), np.sin(angle)
            even, odd = x[..., 0::2], x[..., 1::2]
            out = np.empty(x.shape, dtype=_float_dtype(x))
            out[..., 0::2] = even * cos + odd * sin
            out[..., 1::2] = even * sin + odd * cos
            return out
        """,
    ),
    Fault(
        name="mha-always-causal",
        function="multi_head_attention",
        module="transformer_block",
        description=N_("multi_head_attention masks causally even when causal=False"),
        course=N_("contract v1 multi_head_attention: mask causal and/or sliding window"),
        source="""
        _correct_mha_causal = multi_head_attention

        def multi_head_attention(x, wq, wk, wv, wo, n_heads, n_kv_heads=None, causal=True, window=None, rope_theta=None):
            return _correct_mha_causal(x, wq, wk, wv, wo, n_heads, n_kv_heads, True, window, rope_theta)
        """,
    ),
    Fault(
        name="rms-mean-subtracted",
        function="rms_norm",
        module="primitives",
        description=N_(
            "rms_norm centres its input first: it becomes LayerNorm without the bias, "
            "and loses RMSNorm's sensitivity to a shift of the input"
        ),
        course=N_("Transformer 手撕与注意力机制 §6.2 RMSNorm 去掉了减均值的步骤"),
        source="""
        def rms_norm(x, weight, eps=1e-6):
            x = _as_float(x, "x")
            weight = _check_vector(weight, "weight", x.shape[-1])
            x = x - np.mean(x, axis=-1, keepdims=True)
            rms = np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
            return (x / rms * weight).astype(_float_dtype(x), copy=False)
        """,
    ),
    Fault(
        name="layer-norm-uncentred",
        function="layer_norm",
        module="primitives",
        description=N_(
            "layer_norm subtracts the mean inside the variance but divides the raw x: "
            "x / sqrt(var + eps) * weight + bias"
        ),
        course=N_(
            "Transformer 手撕与注意力机制 §6.1 LayerNorm(x)_i = γ_i (x_i - μ) / sqrt(σ² + ε) + β_i"
        ),
        source="""
        def layer_norm(x, weight, bias, eps=1e-5):
            x = _as_float(x, "x")
            weight = _check_vector(weight, "weight", x.shape[-1])
            bias = _check_vector(bias, "bias", x.shape[-1])
            var = np.var(x, axis=-1, keepdims=True)
            return (x / np.sqrt(var + eps) * weight + bias).astype(_float_dtype(x), copy=False)
        """,
    ),
    Fault(
        name="rms-no-sqrt",
        function="rms_norm",
        module="primitives",
        description=N_("rms_norm divides by the mean square instead of its square root"),
        course=N_("Transformer 手撕与注意力机制 §6.2 RMS(x) = sqrt((1/d) Σ x_i²)"),
        source="""
        def rms_norm(x, weight, eps=1e-6):
            x = _as_float(x, "x")
            weight = _check_vector(weight, "weight", x.shape[-1])
            ms = np.mean(x * x, axis=-1, keepdims=True) + eps
            return (x / ms * weight).astype(_float_dtype(x), copy=False)
        """,
    ),
    Fault(
        name="split-heads-no-transpose",
        function="split_heads",
        module="primitives",
        description=N_(
            "split_heads stops at view(B, T, H, D) and forgets transpose(1, 2): the "
            "head axis stays behind the sequence axis"
        ),
        course=N_(
            "第8章 · Attention 与 Transformer Block 阶段三: 关键转置 transpose(1, 2) → [B, H, T, d_k]"
        ),
        source="""
        def split_heads(x, n_heads):
            x = _as_float(x, "x", ndim=3)
            B, T, C = x.shape
            return x.reshape(B, T, n_heads, C // n_heads).copy()
        """,
    ),
)


def get(name: str) -> Fault:
    for fault in LABS_WAVE2:
        if fault.name == name:
            return fault
    raise KeyError(name)
