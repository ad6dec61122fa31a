"""Contract v2 bugs verify caught but could only call "its values differ" (or point at a
fixture's note) for, as faults (stop 58): a decoder that refuses T == Tmax, ALiBi that drops the
sliding window, an entropy that renormalises the weights first, multi-head attention that
rotates at 0..T-1 whatever positions it is given, and a symmetric ALiBi bias.

They come after every other fault of v2 (`for_contract`), the catalogue's order kept. Each makes
the contract's refusals first (through the correct function), as a learner who checks the
arguments as asked and gets only the formula wrong has them; each sentence says what is wrong
and what to change.
"""

from __future__ import annotations

from labctl.faults.v2 import FaultV2
from labctl.i18n import N_

V2_NAMED: tuple[FaultV2, ...] = (
    FaultV2(
        name="decoder-refuses-t-equal-tmax",
        function="decoder_forward",
        module="transformer_block",
        description=N_(
            "the decoder refuses a sequence exactly as long as pos_embed (T == Tmax), whose "
            "positions 0 .. Tmax-1 are all rows of the table; refuse only T > Tmax "
            "(if T > Tmax, not T >= Tmax)"
        ),
        course=N_(
            "contract v2 decoder_forward: learned_positions(arange(T), pos_embed), "
            "pos_embed (Tmax, C); Bad input: T > Tmax"
        ),
        signal="runs",
        source="""
        _correct_positional = _positional

        def _positional(params, positional, x, n_heads):
            out = _correct_positional(params, positional, x, n_heads)
            T = x.shape[1]
            if positional == "learned" and np.shape(params["pos_embed"])[0] == T:
                _fail("token_ids", f"T={T} must be shorter than pos_embed")
            return out
        """,
    ),
    FaultV2(
        name="alibi-drops-window",
        function="decoder_forward",
        module="transformer_block",
        description=N_(
            "with positional='alibi' the decoder ignores window: every earlier key stays "
            "visible, however far; ALiBi's bias is added to the scores and the mask still "
            "applies, so block the keys outside the window (sliding_window_mask) as without "
            "ALiBi"
        ),
        course=N_(
            "contract v2 decoder_forward: alibi_bias(H, T) added to the scaled scores inside "
            "every block's attention; the window's mask still applies"
        ),
        source="""
        _correct_alibi_block = _alibi_block

        def _alibi_block(x, p, n_heads, n_kv_heads, eps, window, bias):
            return _correct_alibi_block(x, p, n_heads, n_kv_heads, eps, None, bias)
        """,
    ),
    FaultV2(
        name="entropy-renormalised",
        function="attention_entropy",
        module="attention",
        description=N_(
            "attention_entropy divides the weights by their sum before taking -sum(w ln w): "
            "weights that do not sum to 1 get the entropy of other weights; take "
            "-sum(w ln w) of the weights as given, without renormalising them"
        ),
        course=N_(
            "Transformer 手撕与注意力机制 §13.2 代码题 (注意力熵); contract v2 attention_entropy: "
            "-sum(w * ln w) over axis"
        ),
        source="""
        _correct_entropy = attention_entropy

        def attention_entropy(weights, axis=-1):
            _correct_entropy(weights, axis)
            w = _as_float(weights, "weights")
            total = w.sum(axis=axis, keepdims=True)
            return _correct_entropy(np.divide(w, total, out=np.zeros_like(w), where=total > 0), axis)
        """,
    ),
    FaultV2(
        name="mha-positions-ignored",
        function="multi_head_attention",
        module="transformer_block",
        description=N_(
            "multi_head_attention rotates q and k at 0 .. T-1 even when it is given "
            "positions: an offset or a left pad is lost; rotate at positions when they are "
            "given, at np.arange(T) only when positions is None"
        ),
        course=N_(
            "contract v2 multi_head_attention: RoPE on Q and K at positions, int (T,) or "
            "(B, T), default 0..T-1"
        ),
        source="""
        _correct_mha = multi_head_attention

        def multi_head_attention(x, wq, wk, wv, wo, n_heads, n_kv_heads=None, causal=True, window=None, rope_theta=None, positions=None):
            _correct_mha(x, wq, wk, wv, wo, n_heads, n_kv_heads, causal, window, rope_theta, positions)
            return _correct_mha(x, wq, wk, wv, wo, n_heads, n_kv_heads, causal, window, rope_theta)
        """,
    ),
    FaultV2(
        name="alibi-bias-symmetric",
        function="alibi_bias",
        module="positions",
        description=N_(
            "the ALiBi bias is symmetric, -m * |p_i - j|: a key after the query is penalised "
            "like one before it; the bias is -m * (p_i - j), positive for j > p_i (the causal "
            "mask blocks those keys): drop the absolute value"
        ),
        course=N_(
            "Press et al. 2022 (ALiBi); contract v2 alibi_bias: bias[h, i, j] = "
            "-slopes[h] * (p_i - j), p_i = Tk - Tq + i"
        ),
        source="""
        _correct_alibi_bias = alibi_bias

        def alibi_bias(n_heads, t_q, t_k=None):
            return -np.abs(_correct_alibi_bias(n_heads, t_q, t_k))
        """,
    ),
)
