"""Faults of contract v2: at least one for each function v2 adds and for the new parameters of
the functions it widens. Each is written into a copy of the project's clean room that
declares v2 (`CONTRACT = "transformer-block-v2"`), so verify checks it against v2.

They form their own catalogue (`V2`), beside the v1 catalogue the fault matrix runs. A fault
whose bug is in a formula makes the contract's refusals first (through the correct function):
a match needs the fault's side symptoms, and a learner who makes the same mistake but checks
the arguments as asked would otherwise match none.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from labctl.faults.base import Fault
from labctl.i18n import N_

DECLARATION = '\nCONTRACT = "transformer-block-v2"\n'


@dataclass(frozen=True)
class FaultV2(Fault):
    """A fault whose room declares contract v2."""

    def materialize(self, dest: Path, base: Path | None = None) -> Path:
        room = super().materialize(dest, base)
        with (room / "__init__.py").open("a", encoding="utf-8") as handle:
            handle.write(DECLARATION)
        return room


V2: tuple[FaultV2, ...] = (
    FaultV2(
        name="alibi-slopes-off-by-one",
        function="alibi_slopes",
        module="positions",
        description=N_(
            "ALiBi's slopes start at h = 0: 2 ** (-8 h / H), so head 0 gets slope 1 and every "
            "head the slope of the one before it"
        ),
        course=N_(
            "Press et al. 2022 (ALiBi); contract v2 alibi_slopes: m_h = 2 ** (-8 (h + 1) / H)"
        ),
        source="""
        def _power_of_two_slopes(n):
            return 2.0 ** (-8.0 * np.arange(0, n) / n)
        """,
    ),
    FaultV2(
        name="alibi-bias-top-left",
        function="alibi_bias",
        module="positions",
        description=N_(
            "the ALiBi bias measures distance from query index i, top-left aligned, instead "
            "of from its position Tk - Tq + i: wrong whenever Tq < Tk (decode with a cache)"
        ),
        course=N_(
            "contract v2 alibi_bias: p_i = Tk - Tq + i, bottom-right aligned like causal_mask"
        ),
        source="""
        def alibi_bias(n_heads, t_q, t_k=None):
            slopes = alibi_slopes(n_heads)
            t_k = t_q if t_k is None else t_k
            i = np.arange(t_q, dtype=np.float64)[:, None]
            distance = i - np.arange(t_k, dtype=np.float64)[None, :]
            return -slopes[:, None, None] * distance[None, :, :]
        """,
    ),
    FaultV2(
        name="learned-positions-wrap",
        function="learned_positions",
        module="positions",
        description=N_(
            "a negative position is not refused: NumPy's indexing wraps it to a row from the "
            "end of the table"
        ),
        course=N_("contract v2 Bad input: learned_positions, a position < 0 or >= Tmax"),
        signal="bad-input",
        source="""
        def learned_positions(positions, table):
            positions = np.asarray(positions)
            table = _as_float(table, "table", ndim=2)
            if positions.size and positions.max() >= table.shape[0]:
                _fail("positions", f"must be < {table.shape[0]}")
            return table[positions]
        """,
    ),
    FaultV2(
        name="gelu-tanh-constant",
        function="gelu",
        module="ffn",
        description=N_(
            "the tanh approximation of GELU uses 0.04715 for the cubic's coefficient instead "
            "of 0.044715"
        ),
        course=N_(
            "Transformer 逐部件讲透 §6.8 前馈网络：每个 token 自己思考; contract v2 gelu: 0.044715 x^3"
        ),
        source="""
        _correct_gelu = gelu

        def gelu(x, approximate="none"):
            if approximate != "tanh":
                return _correct_gelu(x, approximate)
            x = _as_float(x, "x")
            z = x.astype(np.float64)
            out = 0.5 * z * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (z + 0.04715 * z**3)))
            return out.astype(_float_dtype(x), copy=False)
        """,
    ),
    FaultV2(
        name="gelu-tanh-for-exact",
        function="gelu",
        module="ffn",
        description=N_(
            "gelu computes the tanh approximation when approximate is 'none': use the exact "
            "0.5 x (1 + erf(x / sqrt(2))) for 'none', the tanh formula only for 'tanh'"
        ),
        course=N_(
            "Transformer 逐部件讲透 §6.8 前馈网络：每个 token 自己思考; contract v2 gelu: "
            "approximate 'none' is the exact erf form"
        ),
        source="""
        _correct_gelu = gelu

        def gelu(x, approximate="none"):
            return _correct_gelu(x, "tanh" if approximate == "none" else approximate)
        """,
    ),
    FaultV2(
        name="glu-uses-silu",
        function="glu_ffn",
        module="ffn",
        description=N_("GLU's gate is SiLU (that is SwiGLU) instead of the sigmoid"),
        course=N_(
            "Transformer 逐部件讲透 §6.8 前馈网络：每个 token 自己思考; contract v2 glu_ffn: sigmoid gate"
        ),
        source="""
        def glu_ffn(x, w_gate, w_up, w_down):
            x, w_gate, w_up, w_down = _gated(x, w_gate, w_up, w_down)
            gate = x @ w_gate
            hidden = gate * _sigmoid(gate) * (x @ w_up)
            return (hidden @ w_down).astype(_float_dtype(x), copy=False)
        """,
    ),
    FaultV2(
        name="geglu-ignores-approximate",
        function="geglu_ffn",
        module="ffn",
        description=N_("GeGLU always uses the exact GELU, whatever approximate asks for"),
        course=N_("contract v2 geglu_ffn: gelu(x @ w_gate, approximate)"),
        source="""
        _correct_geglu = geglu_ffn

        def geglu_ffn(x, w_gate, w_up, w_down, approximate="none"):
            if approximate not in ("none", "tanh"):
                _fail("approximate", f"expected 'none' or 'tanh', got {approximate!r}")
            return _correct_geglu(x, w_gate, w_up, w_down)
        """,
    ),
    FaultV2(
        name="entropy-in-bits",
        function="attention_entropy",
        module="attention",
        description=N_("attention entropy in bits (log2) instead of nats (ln)"),
        course=N_(
            "Transformer 手撕与注意力机制 §13.2 代码题 (注意力熵); contract v2 attention_entropy: nats"
        ),
        source="""
        _correct_entropy = attention_entropy

        def attention_entropy(weights, axis=-1):
            return _correct_entropy(weights, axis) / math.log(2.0)
        """,
    ),
    FaultV2(
        name="temperature-multiplies",
        function="softmax",
        module="primitives",
        description=N_(
            "softmax multiplies the logits by the temperature instead of dividing: a high "
            "temperature sharpens the weights instead of flattening them"
        ),
        course=N_(
            "第8章 · Attention 与 Transformer Block 阶段五：位置从哪里来 (缩放和温度); contract v2 softmax: softmax(x / temperature)"
        ),
        source="""
        _correct_softmax = softmax

        def softmax(x, axis=-1, temperature=1.0):
            if not temperature > 0:
                _fail("temperature", f"must be > 0, got {temperature!r}")
            return _correct_softmax(_as_float(x, "x") * temperature, axis)
        """,
    ),
    FaultV2(
        name="ntk-exponent-inverted",
        function="rope",
        module="primitives",
        description=N_(
            "NTK-aware scaling raises the base by factor ** ((D - 2) / D) instead of "
            "factor ** (D / (D - 2))"
        ),
        course=N_(
            "Transformer 逐部件讲透 §6.7 位置编码; contract v2 rope (NTK-aware): theta * factor ** (D / (D - 2))"
        ),
        source="""
        _correct_rope = rope

        def rope(x, positions, theta=10000.0, scaling=None, factor=1.0):
            # The contract's refusals first (D < 4 for NTK among them), as a learner who
            # checks the arguments and gets only the exponent wrong has them.
            out = _correct_rope(x, positions, theta, scaling, factor)
            if scaling == "ntk":
                D = np.asarray(x).shape[-1]
                theta = float(theta) * float(factor) ** ((D - 2) / D)
                return _correct_rope(x, positions, theta)
            return out
        """,
    ),
    FaultV2(
        name="rope-linear-scales-theta",
        function="rope",
        module="primitives",
        description=N_(
            "linear scaling multiplies theta by factor instead of dividing the positions by "
            "it: divide the positions by factor and keep theta (position interpolation)"
        ),
        course=N_(
            "Transformer 逐部件讲透 §6.7 RoPE scaling; contract v2 rope ('linear'): "
            "positions / factor"
        ),
        source="""
        _correct_rope = rope

        def rope(x, positions, theta=10000.0, scaling=None, factor=1.0):
            if scaling == "linear":
                return _correct_rope(x, positions, float(theta) * float(factor))
            return _correct_rope(x, positions, theta, scaling, factor)
        """,
    ),
    FaultV2(
        name="rope-batched-positions-first-row",
        function="rope",
        module="primitives",
        description=N_(
            "with batched positions (B, T), every batch row is rotated at the first row's "
            "positions: an offset or a left pad in any other row is lost"
        ),
        course=N_("contract v2 rope: row t of batch b uses positions[b, t]"),
        source="""
        _correct_rope = rope

        def rope(x, positions, theta=10000.0, scaling=None, factor=1.0):
            # The contract's refusals first (positions of the wrong shape among them): the
            # first row is taken only from positions that match x.
            out = _correct_rope(x, positions, theta, scaling, factor)
            positions = np.asarray(positions)
            if positions.ndim == 2:
                return _correct_rope(x, positions[0], theta, scaling, factor)
            return out
        """,
    ),
    FaultV2(
        name="lm-head-ignored",
        function="decoder_forward",
        module="transformer_block",
        description=N_("the decoder ignores an untied lm_head and always multiplies by embed.T"),
        course=N_("contract v2 decoder_forward: logits = x @ lm_head when params hold one"),
        source="""
        _correct_decoder = decoder_forward

        def decoder_forward(token_ids, params, n_heads, n_kv_heads=None, eps=1e-6, positional="sinusoidal", rope_theta=10000.0, window=None):
            if isinstance(params, Mapping) and "lm_head" in params:
                params = {key: value for key, value in params.items() if key != "lm_head"}
            return _correct_decoder(token_ids, params, n_heads, n_kv_heads, eps, positional, rope_theta, window)
        """,
    ),
)
