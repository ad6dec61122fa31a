"""Faults the labs of contract v2's wave (`handson-decoder`, `alibi`, `rope-scaling`,
`ffn-variants`) are proved on.

Like `labs_wave2`, each is source appended to a module of the project's clean
room, a mistake a learner makes in a function these labs exercise; they stay
out of `CATALOGUE` (verify's fault matrix) and the lab tests use them by name.
"""

from __future__ import annotations

from labctl.faults.v2 import FaultV2
from labctl.i18n import N_

# Every room declares v2: the labs these faults prove need it, and v2's functions and keywords
# are called only on a room that declares it.
LABS_V2: tuple[FaultV2, ...] = (
    FaultV2(
        name="decoder-positional-ignored",
        function="decoder_forward",
        module="transformer_block",
        description=N_(
            "decoder_forward adds the sinusoidal table whatever `positional` says: "
            "'rope' and 'none' give the sinusoidal model"
        ),
        course=N_("Transformer 手撕与注意力机制 §08 完整最小 Transformer Decoder（纯 NumPy）"),
        source="""
        _correct_decoder_forward = decoder_forward

        def decoder_forward(token_ids, params, n_heads, n_kv_heads=None, eps=1e-6, positional="sinusoidal", rope_theta=10000.0, window=None):
            return _correct_decoder_forward(token_ids, params, n_heads, n_kv_heads, eps, "sinusoidal", rope_theta, window)
        """,
    ),
    FaultV2(
        name="layer-norm-as-rms",
        function="layer_norm",
        module="primitives",
        description=N_(
            "layer_norm never subtracts the mean: x / sqrt(mean(x²) + eps) * weight + bias, "
            "RMSNorm with a bias"
        ),
        course=N_(
            "Transformer 手撕与注意力机制 §6.1 LayerNorm(x)_i = γ_i (x_i - μ) / sqrt(σ² + ε) + β_i"
        ),
        source="""
        def layer_norm(x, weight, bias, eps=1e-5):
            x = _as_float(x, "x")
            weight = _check_vector(weight, "weight", x.shape[-1])
            bias = _check_vector(bias, "bias", x.shape[-1])
            ms = np.mean(x * x, axis=-1, keepdims=True)
            return (x / np.sqrt(ms + eps) * weight + bias).astype(_float_dtype(x), copy=False)
        """,
    ),
    FaultV2(
        name="alibi-slopes-from-one",
        function="alibi_slopes",
        module="positions",
        description=N_(
            "alibi_slopes counts heads from 0: m_h = 2 ** (-8 h / H), so head 0 gets slope 1"
        ),
        course=N_("Transformer 手撕与注意力机制 §01.5: ALiBi score - λ·|m-n|"),
        source="""
        def alibi_slopes(n_heads):
            H = _as_size(n_heads, "n_heads", minimum=1)
            return 2.0 ** (-8.0 * np.arange(H) / H)
        """,
    ),
    FaultV2(
        name="alibi-bias-sign",
        function="alibi_bias",
        module="positions",
        description=N_("alibi_bias adds +m_h · distance: farther keys are favoured, not penalised"),
        course=N_("Transformer 手撕与注意力机制 §01.5: ALiBi score - λ·|m-n|, 距离越远惩罚越大"),
        source="""
        _correct_alibi_bias = alibi_bias

        def alibi_bias(n_heads, t_q, t_k=None):
            return -_correct_alibi_bias(n_heads, t_q, t_k)
        """,
    ),
    FaultV2(
        name="gelu-tanh-ignored",
        function="gelu",
        module="ffn",
        description=N_("gelu ignores `approximate`: 'tanh' gives the exact erf form"),
        course=N_("Transformer 逐部件讲透 §6.8 MLP(x) = W_2 GELU(W_1 x)"),
        source="""
        _correct_gelu = _gelu

        def _gelu(z, approximate):
            return _correct_gelu(z, "none")
        """,
    ),
    FaultV2(
        name="glu-gate-on-up",
        function="glu_ffn",
        module="ffn",
        description=N_("glu_ffn puts the sigmoid on x W_up, not on the gate x W_gate"),
        course=N_("Transformer 手撕与注意力机制 §6.5.2 GLU(x) = (W_1 · x) ⊙ σ(W_gate · x)"),
        source="""
        _correct_glu = glu_ffn

        def glu_ffn(x, w_gate, w_up, w_down):
            return _correct_glu(x, w_up, w_gate, w_down)
        """,
    ),
    FaultV2(
        name="rope-linear-multiplies",
        function="rope",
        module="primitives",
        description=N_(
            "position interpolation multiplies the positions by the factor instead of dividing: "
            "every pair turns s times faster, not s times slower"
        ),
        course=N_(
            "Transformer 逐部件讲透 §6.7 RoPE scaling; contract v2 rope ('linear'): positions / factor"
        ),
        source="""
        _correct_rope = rope

        def rope(x, positions, theta=10000.0, scaling=None, factor=1.0):
            if scaling == "linear":
                positions = np.asarray(positions) * int(factor) ** 2
            return _correct_rope(x, positions, theta, scaling, factor)
        """,
    ),
)


def get(name: str) -> FaultV2:
    for fault in LABS_V2:
        if fault.name == name:
            return fault
    raise KeyError(name)
