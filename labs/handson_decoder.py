"""The chapter's own decoder: 手撕 §08 as printed, and what it does not share with Llama.

Transformer 手撕与注意力机制 §08 builds a decoder-only Transformer in about
100 lines: token embedding plus a sinusoidal table, pre-norm blocks (RMSNorm,
causal attention with a -1e9 mask, SwiGLU with F = int(d_ff · 2/3)), a final
RMSNorm and logits = x @ embedᵀ (tied), all weights drawn × 0.02. It ends:
"这个最小实现虽然参数是随机的（未训练），但其前向传播逻辑和真实 Llama 模型完全一致".

Here the chapter's code is written out as printed and compared with the
implementation's `decoder_forward(positional="sinusoidal")` on seeded weights.
Then one component at a time is swapped on the same weights, each swap
composed from the implementation's own functions and written out too:
RoPE inside attention instead of the added table (Llama), LayerNorm instead of
RMSNorm (GPT-2), a ReLU FFN instead of SwiGLU (the original Transformer), an
untied output head (Llama 2). The logits' change under each swap is measured,
so the chapter's "完全一致" is examined, not assumed. At the chapter's 0.02
init the table (entries of size 1) dwarfs the token embedding (about 0.02), so
the model's input is mostly its position code.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from labctl.course import HANDS_ON, PARTS, Section
from labctl.i18n import N_, Msg
from labctl.lab import Lab, LabContext, LabOutput, LabParams, Metric, Note, TableFigure, ratio
from labctl.labs.positions import interleaved_rope

CHAPTER_SEED = 42  # 手撕 §08: np.random.seed(42)
CHAPTER_CONFIG = {"V": 256, "C": 64, "H": 4, "d_ff": 128, "L": 2}
CHAPTER_TOKENS = (10, 42, 7, 128, 200)
SWAPS = ("rope", "layernorm", "relu", "untied")
SWAP_LABELS = {
    "rope": N_("positions: the added sinusoidal table → RoPE in attention (Llama)"),
    "layernorm": N_("norm: RMSNorm → LayerNorm (GPT-2)"),
    "relu": N_("FFN: SwiGLU → ReLU, W_up and W_down kept (original Transformer)"),
    "untied": N_("head: tied embedᵀ → an untied lm_head (Llama 2)"),
}


class Params(LabParams):
    V: int = Field(256, ge=2, le=4096, description=N_("vocabulary size"))
    C: int = Field(64, ge=4, le=256, description=N_("model width; H·D with an even D"))
    H: int = Field(4, ge=1, le=16, description=N_("attention heads"))
    F: int = Field(
        85, ge=1, le=1024, description=N_("SwiGLU hidden width (the chapter's int(128 · 2/3))")
    )
    L: int = Field(2, ge=1, le=8, description=N_("decoder blocks"))
    T: int = Field(8, ge=2, le=64, description=N_("tokens in the sequence"))
    scale: float = Field(
        0.02,
        gt=0.0,
        le=1.0,
        description=N_("standard deviation of every weight (the chapter's 0.02)"),
    )
    rope_theta: float = Field(10000.0, gt=1.0, description=N_("RoPE base θ for the Llama swap"))
    eps: float = Field(1e-6, gt=0.0, le=1e-2, description=N_("RMSNorm and LayerNorm epsilon"))


METRICS = (
    Metric(
        "handson_forward_max_error", "abs", "<=1e-12",
        N_("max |logits| difference between decoder_forward(positional='sinusoidal') and the "
           "chapter's §08 code written out (sinusoidal table, -1e9 mask, tied head)"),
        why=N_("the same float64 model; exp(-1e9 - max) is exactly 0, so the chapter's -1e9 "
               "equals a blocked key: rounding only (~1e-16); a wrong block or table is O(0.1)"),
    ),
    Metric(
        "handson_swaps_max_error", "abs", "<=1e-12",
        N_("max |logits| difference, over the baseline and each swap, between the model composed "
           "from the implementation's functions and the same model written out"),
        why=N_("each swap must change one component only, so each is checked against its own "
               "written-out model: rounding only (~1e-16)"),
    ),
    Metric(
        "handson_llama_rope_change", "ratio", ">1e-2",
        N_("max |Δ logits| / max |logits| when the added sinusoidal table is replaced by RoPE "
           "inside attention (Llama's positions), same weights"),
        why=N_("the chapter's input is mostly its position table, so removing it moves the "
               "logits by O(1) of their size; a model that ignores `positional` moves them by 0"),
    ),
    Metric(
        "handson_layernorm_change", "ratio", ">1e-3",
        N_("max |Δ logits| / max |logits| when every RMSNorm is replaced by LayerNorm (γ kept, "
           "β = 0), same weights"),
        why=N_("the table's rows have nonzero means, so centring moves the logits by O(0.1) of "
               "their size; a layer_norm that does not centre moves them by ~eps only"),
    ),
    Metric(
        "handson_reference_max_error", "abs", "<=1e-10",
        N_("float64 clean room vs reference over the baseline's and every swap's logits"),
        impls=("both",),
        why=N_("two float64 implementations of one formula differ by rounding only (~1e-15)"),
    ),
)  # fmt: skip


def make_model(draw, V: int, C: int, F: int, L: int, scale: float) -> dict:
    """The chapter's make_block and model, in its draw order, as the contract names the weights.

    `draw(shape)` gives standard normals. The chapter's w1 is the contract's w_up, its w2 is
    w_down; an extra `lm_head` (drawn last, so the chapter's weights come out unchanged) is for
    the untied swap only.
    """

    def block() -> dict[str, np.ndarray]:
        drawn = {k: draw(s) * scale for k, s in (
            ("wq", (C, C)), ("wk", (C, C)), ("wv", (C, C)), ("wo", (C, C)),
            ("w_up", (C, F)), ("w_gate", (C, F)), ("w_down", (F, C)),
        )}  # fmt: skip
        return {"norm1": np.ones(C), "norm2": np.ones(C), **drawn}

    model = {"embed": draw((V, C)) * scale}
    model["blocks"] = [block() for _ in range(L)]
    model["final_norm"] = np.ones(C)
    model["lm_head"] = draw((C, V)) * scale
    return model


def chapter_model() -> dict:
    """The chapter's own run: np.random.seed(42), V = 256, d = 64, 4 heads, d_ff = 128, 2 layers."""
    c = CHAPTER_CONFIG
    legacy = np.random.RandomState(CHAPTER_SEED)  # the stream np.random.seed(42) + randn draws
    return make_model(
        lambda shape: legacy.randn(*shape), c["V"], c["C"], int(c["d_ff"] * 2 / 3), c["L"], 0.02
    )


def _rms(x, g, eps):
    return g * (x / np.sqrt(np.mean(x**2, axis=-1, keepdims=True) + eps))


def _layer(x, g, eps):
    mu = np.mean(x, axis=-1, keepdims=True)
    return g * (x - mu) / np.sqrt(np.mean((x - mu) ** 2, axis=-1, keepdims=True) + eps)


def _silu(x):
    return x * (1 / (1 + np.exp(-x)))


def written_out(ids, model, n_heads, eps, swap=None, theta=10000.0) -> np.ndarray:
    """手撕 §08's mini_decoder_forward as printed (one sequence, (n, d)), with one optional swap."""
    norm = _layer if swap == "layernorm" else _rms
    x = model["embed"][ids]  # (n, d)
    n, d = x.shape
    if swap != "rope":
        pos = np.arange(n)[:, None]
        div = 10000 ** (np.arange(0, d, 2) / d)
        pe = np.zeros((n, d))
        pe[:, 0::2] = np.sin(pos / div)
        pe[:, 1::2] = np.cos(pos / div)
        x = x + pe
    for b in model["blocks"]:
        h = norm(x, b["norm1"], eps)
        dk = d // n_heads
        Q, K, V = (
            (h @ b[w]).reshape(n, n_heads, dk).transpose(1, 0, 2) for w in ("wq", "wk", "wv")
        )
        if swap == "rope":
            Q, K = (
                interleaved_rope(Q, np.arange(n), theta),
                interleaved_rope(K, np.arange(n), theta),
            )
        scores = Q @ K.transpose(0, 2, 1) / np.sqrt(dk)
        scores = np.where(np.triu(np.ones((n, n), dtype=bool), k=1), -1e9, scores)
        scores = scores - np.max(scores, axis=-1, keepdims=True)
        attn = np.exp(scores) / np.sum(np.exp(scores), axis=-1, keepdims=True)
        x = x + (attn @ V).transpose(1, 0, 2).reshape(n, d) @ b["wo"]
        h = norm(x, b["norm2"], eps)
        if swap == "relu":
            x = x + np.maximum(0.0, h @ b["w_up"]) @ b["w_down"]
        else:
            x = x + (_silu(h @ b["w_gate"]) * (h @ b["w_up"])) @ b["w_down"]
    x = norm(x, model["final_norm"], eps)
    return x @ (model["lm_head"] if swap == "untied" else model["embed"].T)


def composed(impl, ids, model, p: Params, swap=None) -> np.ndarray:
    """The same model from the implementation's functions, one component swapped (ids (1, T))."""
    C = model["embed"].shape[1]
    zeros_c, theta = np.zeros(C), (p.rope_theta if swap == "rope" else None)

    def norm(x, g):
        return (
            impl.layer_norm(x, g, zeros_c, p.eps)
            if swap == "layernorm"
            else impl.rms_norm(x, g, p.eps)
        )

    x = model["embed"][ids]  # (1, T, C)
    if swap != "rope":
        x = x + impl.sinusoidal_positions(ids.shape[1], C)
    for b in model["blocks"]:
        attended = impl.multi_head_attention(
            norm(x, b["norm1"]), b["wq"], b["wk"], b["wv"], b["wo"], p.H, rope_theta=theta
        )
        h = x + attended
        if swap == "relu":
            F = b["w_up"].shape[1]
            x = h + impl.relu_ffn(norm(h, b["norm2"]), b["w_up"], np.zeros(F), b["w_down"], zeros_c)
        else:
            x = h + impl.swiglu_ffn(norm(h, b["norm2"]), b["w_gate"], b["w_up"], b["w_down"])
    x = norm(x, model["final_norm"])
    return x @ (model["lm_head"] if swap == "untied" else model["embed"].T)  # (1, T, V)


def _tied(model: dict) -> dict:
    return {k: model[k] for k in ("embed", "blocks", "final_norm")}


def _measure(impl, ids, model, p: Params) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    base = written_out(ids[0], model, p.H, p.eps)  # (T, V)
    forward = impl.decoder_forward(ids, _tied(model), p.H, None, p.eps, "sinusoidal")[0]
    got = {"handson_forward_max_error": float(np.max(np.abs(forward - base)))}
    kept = {"forward": forward}
    errors = [float(np.max(np.abs(composed(impl, ids, model, p)[0] - base)))]
    for swap in SWAPS:
        if swap == "rope":  # Llama's positions through the contract's own model
            logits = impl.decoder_forward(ids, _tied(model), p.H, None, p.eps, "rope", p.rope_theta)
        else:
            logits = composed(impl, ids, model, p, swap)
        kept[swap] = logits[0]
        want = written_out(ids[0], model, p.H, p.eps, swap, p.rope_theta)
        errors.append(float(np.max(np.abs(logits[0] - want))))
    got["handson_swaps_max_error"] = max(errors)
    top = float(np.max(np.abs(forward)))
    got["handson_llama_rope_change"] = ratio(float(np.max(np.abs(kept["rope"] - forward))), top)
    got["handson_layernorm_change"] = ratio(float(np.max(np.abs(kept["layernorm"] - forward))), top)
    return got, kept


def run(ctx: LabContext) -> LabOutput:
    p: Params = ctx.params
    if p.C % p.H or (p.C // p.H) % 2:
        raise ValueError(f"C = {p.C} must be H = {p.H} times an even head width")
    rng = np.random.default_rng(ctx.seed)
    model = make_model(rng.standard_normal, p.V, p.C, p.F, p.L, p.scale)
    ids = rng.integers(0, p.V, size=(1, p.T))  # (1, T)
    chapter = chapter_model()
    chapter_ids = np.array([CHAPTER_TOKENS])
    output = LabOutput()
    kept: dict[str, dict[str, np.ndarray]] = {}
    printed: dict[str, np.ndarray] = {}
    for name, impl in ctx.impls.items():
        got, kept[name] = _measure(impl, ids, model, p)
        for metric, value in got.items():
            output.add(metric, name, value)
        c = CHAPTER_CONFIG
        printed[name] = impl.decoder_forward(chapter_ids, _tied(chapter), c["H"], None, 1e-6)[0]
    if ctx.both:
        ref, room = kept["reference"], kept["clean-room"]
        output.add(
            "handson_reference_max_error", "both",
            max(float(np.max(np.abs(ref[k] - room[k]))) for k in ref),
        )  # fmt: skip
    output.figures += _figures(p, model, ids, kept, printed, chapter)
    return output


def _figures(p: Params, model, ids, kept, printed, chapter) -> list:
    """The chapter's own run, the swaps table, the input's make-up and the verdict on the claim."""
    names = list(kept)
    own = written_out(np.array(CHAPTER_TOKENS), chapter, CHAPTER_CONFIG["H"], 1e-6)

    def top5(logits: np.ndarray) -> str:
        return " ".join(str(int(i)) for i in np.argsort(logits[-1])[-5:][::-1])

    figures: list = [
        TableFigure(
            title=N_("手撕 §08's own run (np.random.seed(42), tokens [10, 42, 7, 128, 200]): the "
                     "chapter prints the code and the shape (5, 256), not the prediction"),
            columns=(N_("implementation"), N_("logits shape"), N_("argmax at the last position"),
                     N_("top-5 at the last position")),
            rows=(
                (N_("written out"), str(own.shape), int(np.argmax(own[-1])), top5(own)),
                *((n, str(printed[n].shape), int(np.argmax(printed[n][-1])), top5(printed[n]))
                  for n in names),
            ),
        )
    ]  # fmt: skip
    rows = []
    for swap in SWAPS:
        cells = []
        for n in names:
            base, other = kept[n]["forward"], kept[n][swap]
            cells.append(ratio(float(np.max(np.abs(other - base))), float(np.max(np.abs(base)))))
        for n in names:
            base, other = kept[n]["forward"], kept[n][swap]
            moved = int(np.sum(np.argmax(other, -1) != np.argmax(base, -1)))
            cells.append(f"{moved} / {p.T}")
        rows.append((SWAP_LABELS[swap], *cells))
    figures.append(
        TableFigure(
            title=Msg("one component swapped at a time on the same seeded weights (V = {V}, "
                      "C = {C}, H = {H}, F = {F}, L = {L}, T = {T}, weights × {scale})",
                      V=p.V, C=p.C, H=p.H, F=p.F, L=p.L, T=p.T, scale=p.scale),
            columns=(N_("swap"),
                     *(Msg("max |Δ logits| / max |logits|, {impl}", impl=n) for n in names),
                     *(Msg("positions whose argmax changes, {impl}", impl=n) for n in names)),
            rows=tuple(rows),
        )
    )  # fmt: skip
    table = np.zeros((p.T, p.C))
    pos = np.arange(p.T)[:, None]
    table[:, 0::2] = np.sin(pos / 10000 ** (np.arange(0, p.C, 2) / p.C))
    table[:, 1::2] = np.cos(pos / 10000 ** (np.arange(0, p.C, 2) / p.C))
    embedded = model["embed"][ids[0]]
    figures.append(
        Note(
            Msg("The model's input x = embed[ids] + PE: the token embedding's rows have norm "
                "{e:.3f} on average, the table's {t:.3f} ({r:.0f}x). At the chapter's init the "
                "input is mostly the position code, which is why swapping the table for RoPE "
                "moves the logits most.",
                e=float(np.mean(np.linalg.norm(embedded, axis=-1))),
                t=float(np.mean(np.linalg.norm(table, axis=-1))),
                r=float(np.mean(np.linalg.norm(table, axis=-1)))
                / float(np.mean(np.linalg.norm(embedded, axis=-1))))
        )
    )  # fmt: skip
    for n in names:
        change = ratio(
            float(np.max(np.abs(kept[n]["rope"] - kept[n]["forward"]))),
            float(np.max(np.abs(kept[n]["forward"]))),
        )
        figures.append(
            Note(
                Msg("手撕 §08 says its forward pass is 完全一致 with a real Llama. {impl}: on the "
                    "same weights, Llama's positions alone (RoPE in attention, no added table) "
                    "move the logits by {change:.0%} of their largest value; Llama 2 also unties "
                    "the head (and HuggingFace's port of it pairs RoPE's columns half-split, "
                    "where Meta's llama/model.py pairs them interleaved as the contract does: "
                    "positions lab). The "
                    "block (pre-norm RMSNorm, SwiGLU, residuals) is Llama's; the measurement "
                    "{verdict} with the claim for the whole model.",
                    impl=n, change=change,
                    verdict=Msg("disagrees") if change > 1e-2 else Msg("agrees")),
                flag=change > 1e-2,
            )
        )  # fmt: skip
    F, C = p.F, p.C
    figures.append(
        Note(
            Msg("The chapter's F = int(d_ff · 2/3) = int(128 · 2/3) = 85 keeps SwiGLU's 3·d·F = "
                "{glu:,} parameters near the ReLU FFN's 2·d·d_ff = {relu:,} (here F = {F}: "
                "{here:,} per block). Its d_ff = 128 is 2·d, not the 4·d of 手撕 §06.5.",
                glu=3 * 64 * 85, relu=2 * 64 * 128, F=F, here=3 * C * F)
        )
    )  # fmt: skip
    return figures


LAB = Lab(
    id="handson-decoder",
    title=N_("The chapter's own decoder: 手撕 §08 with sinusoidal positions, against Llama"),
    question=N_(
        "Does decoder_forward reproduce the decoder 手撕 §08 prints, and how far is that "
        "decoder from a Llama-style model when its components are swapped one at a time?"
    ),
    sections=(
        Section(HANDS_ON, "§08", "完整最小 Transformer Decoder（纯 NumPy）"),
        Section(HANDS_ON, "§09", "HuggingFace LlamaAttention 源码剖析"),
        Section(HANDS_ON, "§1.2.2", "绝对位置编码的矩阵形式"),
        Section(PARTS, "§6.11", "一个完整 Decoder Block"),
    ),
    params=Params,
    metrics=METRICS,
    run=run,
)
