"""Contract v2's decoder options, each against the same model built from its parts.

Transformer 手撕与注意力机制 §08 ends its decoder with logits = x @ embedᵀ, weight
tying, and says this "能减少约 V × d_model 个参数"; contract v2 lets
`decoder_forward` take an untied `lm_head` (C, V) instead. Transformer 逐部件讲透
§6.7 lists ALiBi ("在注意力分数上加入与距离相关的偏置") beside the position
vectors; v2's `positional="alibi"` adds alibi_bias inside every block's
attention and no vector to the tokens. And v2's token positions may be batched,
(B, T): each row of a batch at its own positions (a conversation continued at
its own offset), moving RoPE only.

Here each option is checked against the model composed by hand: the untied
decoder against the implementation's own sinusoidal_positions,
transformer_block and rms_norm followed by @ lm_head; the ALiBi decoder against
the blocks written out with the implementation's rms_norm, split_heads,
repeat_kv, softmax, merge_heads and swiglu_ffn and the bias computed from the
contract's formula (so a wrong alibi_bias cannot hide behind a decoder that
uses it); multi_head_attention at batched positions against one call per row;
and a cached decode (attention_decode, batched positions) against full
attention at the same positions.
"""

from __future__ import annotations

import math

import numpy as np
from pydantic import Field, model_validator

from labctl.course import HANDS_ON, PARTS, Section
from labctl.i18n import N_, Msg, implementation
from labctl.lab import Lab, LabContext, LabOutput, LabParams, Metric, Note, TableFigure, larger


class Params(LabParams):
    V: int = Field(48, ge=2, le=4096, description=N_("vocabulary size"))
    C: int = Field(32, ge=4, le=256, description=N_("model width"))
    H: int = Field(4, ge=1, le=16, description=N_("query heads"))
    Hkv: int = Field(2, ge=1, le=16, description=N_("key/value heads (GQA)"))
    F: int = Field(64, ge=1, le=1024, description=N_("SwiGLU hidden width"))
    L: int = Field(2, ge=1, le=8, description=N_("decoder blocks"))
    T: int = Field(8, ge=2, le=128, description=N_("tokens per sequence"))
    prefill: int = Field(3, ge=1, le=127, description=N_("tokens cached before decoding"))
    shift: int = Field(
        37, ge=1, le=100000, description=N_("where the second batch row's positions start")
    )
    pad: int = Field(
        3,
        ge=0,
        le=127,
        description=N_("left padding of the second row: its first tokens share a position"),
    )
    rope_theta: float = Field(10000.0, gt=1.0, description=N_("RoPE base"))

    @model_validator(mode="after")
    def _shapes(self) -> Params:
        D = self.C // self.H
        if self.C % self.H or D % 2 or self.H % self.Hkv:
            raise ValueError(
                Msg("need H to divide C into even head widths and Hkv to divide H, got C = {C}, "
                    "H = {H}, Hkv = {Hkv}", C=self.C, H=self.H, Hkv=self.Hkv)
            )  # fmt: skip
        if self.prefill >= self.T:
            raise ValueError(Msg("prefill = {p} must be below T = {T}", p=self.prefill, T=self.T))
        if self.pad >= self.T:
            raise ValueError(Msg("pad = {p} must be below T = {T}", p=self.pad, T=self.T))
        return self


METRICS = (
    Metric(
        "untied_head_vs_composed_error", "abs", "<=1e-10",
        N_("max |decoder_forward with params['lm_head'] - the same model composed: "
           "sinusoidal_positions, transformer_block per block, rms_norm, then @ lm_head|"),
        why=N_("one float64 model computed twice by the same implementation: rounding only "
               "(~1e-15); a decoder that keeps the tied embedᵀ is O(1) off"),
    ),
    Metric(
        "alibi_decoder_vs_written_error", "abs", "<=1e-10",
        N_("max |decoder_forward(positional='alibi') - the blocks written out with the "
           "implementation's primitives and the bias -m_h (p_i - j) of the contract's slopes|"),
        why=N_("the same float64 model two ways (~1e-15); a decoder that adds the bias after "
               "the softmax, forgets it, or also adds sinusoidal vectors is O(0.1) off; any bias "
               "form that gives the same attention passes (softmax ignores a row's constant)"),
    ),
    Metric(
        "batched_positions_vs_rows_error", "abs", "<=1e-12",
        N_("max |multi_head_attention(x, ..., positions (B, T)) - one call per row with that "
           "row's positions (T,)|, RoPE and GQA"),
        why=N_("each batch row is rotated at its own positions: the same sums per row "
               "(~1e-16); a room that applies row 0's positions to every row is O(1) off"),
    ),
    Metric(
        "batched_decode_vs_full_error", "abs", "<=1e-10",
        N_("max |attention_decode one token at a time after a prefill, positions (B, 1) per "
           "step - multi_head_attention over the whole sequence at positions (B, T)|"),
        why=N_("a KV cache changes the order of the work, not the result (~1e-15); a decode "
               "that ignores the batched positions rotates at Tp + i instead and is O(1) off"),
    ),
    Metric(
        "decoder_options_reference_max_error", "abs", "<=1e-10",
        N_("float64 clean room vs reference: both decoders, the batched and decoded attention"),
        impls=("both",),
        why=N_("two float64 implementations of the same functions: rounding only (~1e-15)"),
    ),
)  # fmt: skip


def contract_slopes(H: int) -> np.ndarray:
    """alibi_slopes as contract v2 defines them, written out here (not the room's)."""

    def power(n: int) -> np.ndarray:
        return 2.0 ** (-8.0 * np.arange(1, n + 1) / n)

    n = 1 << (H.bit_length() - 1)
    return power(H) if n == H else np.concatenate([power(n), power(2 * n)[0::2][: H - n]])


def make_model(rng: np.random.Generator, p: Params) -> dict:
    C, D = p.C, p.C // p.H

    def block() -> dict[str, np.ndarray]:
        return {
            "norm1": 1.0 + 0.1 * rng.standard_normal(C),
            "wq": rng.standard_normal((C, p.H * D)) / math.sqrt(C),
            "wk": rng.standard_normal((C, p.Hkv * D)) / math.sqrt(C),
            "wv": rng.standard_normal((C, p.Hkv * D)) / math.sqrt(C),
            "wo": rng.standard_normal((p.H * D, C)) / math.sqrt(p.H * D),
            "norm2": 1.0 + 0.1 * rng.standard_normal(C),
            "w_gate": rng.standard_normal((C, p.F)) / math.sqrt(C),
            "w_up": rng.standard_normal((C, p.F)) / math.sqrt(C),
            "w_down": rng.standard_normal((p.F, C)) / math.sqrt(p.F),
        }

    return {
        "embed": rng.standard_normal((p.V, C)),
        "blocks": [block() for _ in range(p.L)],
        "final_norm": 1.0 + 0.1 * rng.standard_normal(C),
        "lm_head": rng.standard_normal((C, p.V)) / math.sqrt(C),  # (C, V): untied
    }


def untied_composed(impl, ids: np.ndarray, model: dict, p: Params) -> np.ndarray:
    T = ids.shape[1]
    x = model["embed"][ids] + impl.sinusoidal_positions(T, p.C)  # (B, T, C)
    for block in model["blocks"]:
        x = impl.transformer_block(x, block, p.H, p.Hkv)
    return impl.rms_norm(x, model["final_norm"]) @ model["lm_head"]  # (B, T, V)


def _alibi_attention(impl, h: np.ndarray, block: dict, p: Params) -> np.ndarray:
    B, T, _ = h.shape
    D, n_rep = p.C // p.H, p.H // p.Hkv
    q = impl.split_heads(h @ block["wq"], p.H)  # (B, H, T, D)
    k = impl.repeat_kv(impl.split_heads(h @ block["wk"], p.Hkv), n_rep)  # (B, H, T, D)
    v = impl.repeat_kv(impl.split_heads(h @ block["wv"], p.Hkv), n_rep)
    distance = np.arange(T)[:, None] - np.arange(T)[None, :]  # (T, T): p_i - j
    bias = -contract_slopes(p.H)[:, None, None] * distance  # (H, T, T)
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(D) + bias  # (B, H, T, T)
    scores = np.where(impl.causal_mask(T), -np.inf, scores)
    return impl.merge_heads(impl.softmax(scores) @ v) @ block["wo"]  # (B, T, C)


def alibi_written(impl, ids: np.ndarray, model: dict, p: Params) -> np.ndarray:
    """The ALiBi decoder written out: no vector added to the tokens, the bias in the scores."""
    x = model["embed"][ids]  # (B, T, C)
    for block in model["blocks"]:
        x = x + _alibi_attention(impl, impl.rms_norm(x, block["norm1"]), block, p)
        h = impl.rms_norm(x, block["norm2"])
        x = x + impl.swiglu_ffn(h, block["w_gate"], block["w_up"], block["w_down"])
    return impl.rms_norm(x, model["final_norm"]) @ model["embed"].T  # (B, T, V): tied


def _weights(block: dict) -> tuple:
    return block["wq"], block["wk"], block["wv"], block["wo"]


def _measure(impl, p: Params, model: dict, ids: np.ndarray, x: np.ndarray, positions):
    got: dict[str, float] = {}
    kept: dict[str, np.ndarray] = {}

    def gap(a, b) -> float:
        a, b = np.asarray(a), np.asarray(b)
        return float(np.max(np.abs(a - b))) if a.shape == b.shape else math.inf

    kept["untied"] = np.asarray(impl.decoder_forward(ids, model, p.H, p.Hkv, 1e-6, "sinusoidal"))
    got["untied_head_vs_composed_error"] = gap(kept["untied"], untied_composed(impl, ids, model, p))
    tied = {k: v for k, v in model.items() if k != "lm_head"}
    kept["tied"] = np.asarray(impl.decoder_forward(ids, tied, p.H, p.Hkv, 1e-6, "sinusoidal"))
    kept["alibi"] = np.asarray(impl.decoder_forward(ids, tied, p.H, p.Hkv, 1e-6, "alibi"))
    got["alibi_decoder_vs_written_error"] = gap(kept["alibi"], alibi_written(impl, ids, tied, p))
    w, theta = _weights(model["blocks"][0]), p.rope_theta
    batched = impl.multi_head_attention(x, *w, p.H, p.Hkv, True, None, theta, positions)
    kept["batched"] = np.asarray(batched)
    rows = [
        impl.multi_head_attention(x[b : b + 1], *w, p.H, p.Hkv, True, None, theta, positions[b])
        for b in range(len(x))
    ]
    got["batched_positions_vs_rows_error"] = gap(batched, np.concatenate(rows))
    same = x[[0, 0]]  # (B, T, C): one sequence twice, the second row at shifted positions
    shifted = np.stack([np.arange(p.T), np.arange(p.shift, p.shift + p.T)])  # (B, T)
    kept["shifted"] = np.asarray(
        impl.multi_head_attention(same, *w, p.H, p.Hkv, True, None, theta, shifted)
    )
    Tp = p.prefill
    out, past_k, past_v = impl.attention_decode(
        x[:, :Tp], None, None, *w, p.H, p.Hkv, None, theta, positions[:, :Tp]
    )
    steps = [np.asarray(out)]
    for t in range(Tp, p.T):
        out, past_k, past_v = impl.attention_decode(
            x[:, t : t + 1], past_k, past_v, *w, p.H, p.Hkv, None, theta, positions[:, t : t + 1]
        )
        steps.append(np.asarray(out))
    kept["decoded"] = np.concatenate(steps, axis=1)
    got["batched_decode_vs_full_error"] = gap(kept["decoded"], batched)
    return got, kept


def run(ctx: LabContext) -> LabOutput:
    p: Params = ctx.params
    rng = np.random.default_rng(ctx.seed)
    model = make_model(rng, p)
    ids = rng.integers(0, p.V, size=(2, p.T))  # (B, T)
    x = rng.standard_normal((2, p.T, p.C))  # (B, T, C)
    # (B, T): row 0 from 0; row 1 left-padded (its first pad + 1 tokens at one position) and
    # continued from `shift`, as a batch of conversations at their own offsets
    padded = p.shift + np.maximum(np.arange(p.T) - p.pad, 0)
    positions = np.stack([np.arange(p.T), padded])
    output = LabOutput()
    kept = {}
    for name, impl in ctx.impls.items():
        got, kept[name] = _measure(impl, p, model, ids, x, positions)
        for metric, value in got.items():
            output.add(metric, name, value)
    if ctx.both:
        gap = 0.0
        for key, ref in kept["reference"].items():
            room = kept["clean-room"][key]
            gap = larger(gap, float(np.max(np.abs(ref - room))) if ref.shape == room.shape
                         else math.inf)  # fmt: skip
        output.add("decoder_options_reference_max_error", "both", gap)
    output.figures += _figures(p, model, kept)
    return output


def _figures(p: Params, model: dict, kept: dict) -> list:
    names = list(kept)

    def moved(n: str, a: str, b: str) -> float:
        return float(np.max(np.abs(kept[n][a] - kept[n][b])))

    probes = (
        (N_("max |logits| change, tied embedᵀ → untied lm_head"),
         lambda n: moved(n, "untied", "tied")),
        (N_("max |logits| change, sinusoid → ALiBi"), lambda n: moved(n, "alibi", "tied")),
        (Msg("one sequence at positions 0.. and {s}..: attention outputs differ by", s=p.shift),
         lambda n: float(np.max(np.abs(kept[n]["shifted"][0] - kept[n]["shifted"][1])))),
    )  # fmt: skip
    table = TableFigure(
        title=Msg(
            "what each option changes, on a batch of 2 sequences of {T} tokens (the second at "
            "positions {positions})",
            T=p.T,
            positions=", ".join(
                str(int(q)) for q in p.shift + np.maximum(np.arange(p.T) - p.pad, 0)
            ),
        ),
        columns=(N_("probe"), *(implementation(n) for n in names)),
        rows=tuple((label, *(value(n) for n in names)) for label, value in probes),
    )
    head, embed = model["lm_head"].size, model["embed"].size
    return [
        table,
        Note(
            Msg(
                "RoPE sees distances only: the same tokens shifted by {s} positions give the "
                "same attention; the causal mask stays by index",
                s=p.shift,
            )
        ),
        Note(
            Msg(
                "手撕 §08: tying the head saves V × d_model = {V} × {C} = {saved:,} parameters "
                "(counted from the arrays: lm_head holds {head:,}, embed {embed:,})",
                V=p.V,
                C=p.C,
                saved=p.V * p.C,
                head=head,
                embed=embed,
            )
        ),
    ]


LAB = Lab(
    id="decoder-options",
    title=N_("Decoder options of contract v2: untied head, ALiBi inside, batched positions"),
    question=N_(
        "Does decoder_forward with an untied lm_head, and with ALiBi inside every block, equal "
        "the same model built from its parts, and do batched token positions move each row of "
        "a batch on its own, in attention and in a cached decode?"
    ),
    sections=(
        Section(HANDS_ON, "§08", "完整最小 Transformer Decoder（纯 NumPy）"),
        Section(PARTS, "§6.7", "位置编码"),
        Section(HANDS_ON, "§01.5", "位置编码再讲深一点：RoPE 的旋转矩阵推导"),
        Section(HANDS_ON, "§07", "KV Cache 原理：推理时为什么可以缓存 K 和 V"),
    ),
    params=Params,
    metrics=METRICS,
    run=run,
    contract=2,
)
