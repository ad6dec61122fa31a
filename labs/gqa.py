"""GQA and MQA: what do shared key/value heads cost, and what do they save?

The course (逐部件讲透 §6.6; 手撕 §05.5) says MHA gives every query head its own K/V
head, MQA shares one K/V head among all of them, and GQA shares one per group:
"compute K and V with fewer heads, then copy each KV head to the query heads it
serves" (`K.repeat(n_groups, axis=0)`). Fewer K/V heads shrink the KV cache
(手撕 §7.4) and the K/V projections (手撕 §5.3, §5.5.2), at some cost in
quality: "GQA is close to MHA".

This lab runs MHA, GQA and MQA on one input through both implementations and
checks: GQA with Hkv = H is MHA exactly (against the course's per-head loop);
query head h reads K/V head h // (H / Hkv), as torch's
`scaled_dot_product_attention(enable_gqa=True)` does (not tiled); the course's
parameter counts and KV-cache bytes, recomputed beside the numbers it prints;
and the GQA paper's conversion of an MHA layer by mean-pooling the K/V heads of
each group, after which GQA stays closer to MHA than MQA does.
"""

from __future__ import annotations

import math

import numpy as np
from pydantic import Field, model_validator

from labctl.course import HANDS_ON, PARTS, Section
from labctl.i18n import N_, Msg, implementation
from labctl.lab import (
    Lab,
    LabContext,
    LabOutput,
    LabParams,
    Metric,
    Note,
    TableFigure,
    ratio,
    reference_max_error,
    within_memory,
)

# The course's Llama-2-70B example (手撕 §7.4): 80 layers, 8 KV heads of width 128, fp16, 4096 tokens.
LLAMA_LAYERS, LLAMA_KV_HEADS, LLAMA_HEAD_DIM, LLAMA_TOKENS, FP16_BYTES = 80, 8, 128, 4096, 2
LLAMA_QUERY_HEADS = 64  # Llama-2-70B: d_model 8192 = 64 heads x 128
COURSE_LLAMA_PRINTS = "~10.7 GB"
COURSE_LLAMA_GB = 10.7


class Params(LabParams):
    B: int = Field(2, ge=1, le=64, description="batch size")
    T: int = Field(8, ge=1, le=512, description="sequence length")
    C: int = Field(64, ge=1, le=1024, description="model width")
    H: int = Field(8, ge=1, le=64, description="query heads; must divide C")
    Hkv: int = Field(4, ge=1, le=64, description="K/V heads of the GQA variant; must divide H")

    @model_validator(mode="after")
    def _heads_divide(self) -> Params:
        if self.C % self.H:
            raise ValueError(Msg("H = {H} must divide C = {C}", H=self.H, C=self.C))
        if self.H % self.Hkv:
            raise ValueError(Msg("Hkv = {Hkv} must divide H = {H}", Hkv=self.Hkv, H=self.H))
        # held at once: an attention's weights and softmax temporaries (4 of B x H x T x T), and
        # the inputs, torch's answers and both rooms' kept outputs (20 of B x T x C)
        within_memory("B x T x (4HT + 20C)", self.B * self.T * (4 * self.H * self.T + 20 * self.C))
        return self


METRICS = (
    Metric(
        "gqa_full_kv_vs_mha_max_error", "abs", "<=1e-12",
        N_("multi_head_attention with n_kv_heads = H against the course's per-head MHA loop "
        "(Transformer 手撕与注意力机制 §5.3): every query head with its own K/V head"),
        why=N_("the same float64 sums over D and T in another order differ by ~1e-16 relative; "
        "a wrong head layout, scale or mask differs by O(0.1)"),
    ),
    Metric(
        "gqa_head_order_vs_torch_max_error", "abs", "<=1e-10",
        N_("with H = 8 query heads on Hkv = 4 K/V heads: repeat_kv against torch.repeat_interleave "
        "on the head axis, and causal scaled_dot_product_attention against torch's "
        "F.scaled_dot_product_attention(enable_gqa=True), float64; the larger error"),
        why=N_("both compute one float64 formula (~1e-15 apart); tiling the heads (0,1,2,3,0,1,..) "
        "instead of interleaving (0,0,1,1,..) pairs queries with other keys: O(1)"),
    ),
    Metric(
        "gqa_meanpool_error_ratio", "ratio", "<1",
        N_("an MHA layer converted by mean-pooling the K/V projection heads of each group (Ainslie "
        "et al. 2023): relative output distance from MHA of GQA (Hkv = 4) over that of MQA "
        "(Hkv = 1)"),
        why=N_("the course's claim, GQA closer to MHA than MQA, is ratio < 1. With random heads, "
        "pooling n of them leaves (n-1)/n of each key's variance unexplained: 1/2 for GQA, 7/8 "
        "for MQA; seeds 0-299 gave 0.66 to 0.91. A tiled head order pairs queries with another "
        "group's pooled head: 1.02 to 1.33"),
    ),
    Metric(
        "gqa_kv_bytes_llama2_70b_error", "bytes", "==0",
        N_("KV-cache bytes of Llama-2-70B at 4096 tokens (Transformer 手撕与注意力机制 §7.4), measured: the K and V caches "
        "attention_decode returns for 8 KV heads of width 128, per token, in fp16, times 4096 "
        "tokens and 80 layers; minus the course's formula 2 x 4096 x 8 x 128 x 2 x 80 evaluated"),
        why=N_("integer arithmetic on array sizes: exact. A cache that keeps the H repeated heads "
        "instead of the Hkv shared ones is 2x larger here"),
        reproduce_abs=0.0, reproduce_rel=0.0,
    ),
    Metric(
        "gqa_reference_max_error", "abs", "<=1e-10",
        N_("float64 clean room vs reference on the same inputs: multi_head_attention with "
        "n_kv_heads = H, Hkv and 1 (mean-pooled K/V), and attention_decode of the whole "
        "sequence with Hkv K/V heads (its output and its K and V caches)"),
        impls=("both",),
        why=N_("two float64 implementations of one formula differ by rounding only (~1e-15); "
        "the ratio and the byte count above read a room's outputs only against each other "
        "and its cache only by its shape, so a decode that returns its input would pass them"),
    ),
)  # fmt: skip


def _inputs(p: Params, seed: int):
    rng = np.random.default_rng(seed)
    C, D = p.C, p.C // p.H
    x = rng.standard_normal((p.B, p.T, p.C))  # (B, T, C)
    wq, wk, wv, wo = (rng.standard_normal((C, C)) / math.sqrt(C) for _ in range(4))  # MHA layer
    q = rng.standard_normal((p.B, p.H, p.T, D))  # (B, H, T, D)
    k, v = (rng.standard_normal((p.B, p.Hkv, p.T, D)) for _ in range(2))  # (B, Hkv, T, D)
    return x, (wq, wk, wv, wo), (q, k, v)


def _per_head_mha(x, wq, wk, wv, wo, H: int) -> np.ndarray:
    """The course's MHA (Transformer 手撕与注意力机制 §5.3), one head at a time, causal: (B, T, C)."""
    B, T, C = x.shape
    D = C // H
    future = np.triu(np.ones((T, T), dtype=bool), k=1)
    out = np.empty((B, T, H * D))
    for b in range(B):
        for h in range(H):
            cols = slice(h * D, (h + 1) * D)
            q, k, v = x[b] @ wq[:, cols], x[b] @ wk[:, cols], x[b] @ wv[:, cols]  # (T, D) each
            scores = np.where(future, -np.inf, q @ k.T / math.sqrt(D))  # (T, T)
            weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
            out[b, :, cols] = weights / weights.sum(axis=-1, keepdims=True) @ v
    return out @ wo


def _mean_pool(w: np.ndarray, H: int, Hkv: int) -> np.ndarray:
    """(C, H*D) -> (C, Hkv*D): K/V head g of the GQA layer is the mean of MHA heads in group g."""
    C, width = w.shape
    D = width // H
    return w.reshape(C, Hkv, H // Hkv, D).mean(axis=2).reshape(C, Hkv * D)


def _torch_gqa(q, k, v, n_rep: int):
    """(repeat_interleave of k, F.scaled_dot_product_attention with enable_gqa), float64."""
    import torch
    import torch.nn.functional as F

    qt, kt, vt = (torch.from_numpy(a) for a in (q, k, v))
    T_q, T_k = q.shape[2], k.shape[2]
    attend = torch.ones(T_q, T_k, dtype=torch.bool).tril()  # True = attend, as torch wants
    if tuple(int(n) for n in torch.__version__.split(".")[:2]) >= (2, 5):
        out = F.scaled_dot_product_attention(qt, kt, vt, attn_mask=attend, enable_gqa=True)
    else:  # torch < 2.5 has no enable_gqa; its documented equivalent
        kr, vr = (t.repeat_interleave(n_rep, dim=1) for t in (kt, vt))
        out = F.scaled_dot_product_attention(qt, kr, vr, attn_mask=attend)
    return kt.repeat_interleave(n_rep, dim=1).numpy(), out.numpy()


def _llama_cache_bytes(impl) -> tuple[int, tuple[int, ...]]:
    """Llama-2-70B's KV cache in bytes, from the cache attention_decode returns at its KV geometry.

    Query heads are 16 (not 64) to keep the weights small; the cache depends only on the
    KV heads (8) and the head width (128), and 16 > 8 still tells shared heads from repeated.
    """
    H, D = 2 * LLAMA_KV_HEADS, LLAMA_HEAD_DIM
    C = H * D
    Tn = 2
    x_new = np.ones((1, Tn, C), dtype=np.float32)
    wq, wo = np.zeros((C, C), np.float32), np.zeros((C, C), np.float32)
    wk = wv = np.zeros((C, LLAMA_KV_HEADS * D), np.float32)
    _, k_all, v_all = impl.attention_decode(x_new, None, None, wq, wk, wv, wo, H, LLAMA_KV_HEADS)
    per_token_fp16 = (k_all.size + v_all.size) * FP16_BYTES // Tn
    return per_token_fp16 * LLAMA_TOKENS * LLAMA_LAYERS, tuple(k_all.shape)


def run(ctx: LabContext) -> LabOutput:
    p: Params = ctx.params
    x, (wq, wk, wv, wo), (q, k, v) = _inputs(p, ctx.seed)
    n_rep = p.H // p.Hkv
    mha_loop = _per_head_mha(x, wq, wk, wv, wo, p.H)
    torch_repeat, torch_out = _torch_gqa(q, k, v, n_rep)
    output = LabOutput()
    distances: dict[str, dict[int, float]] = {}
    outputs: dict[str, list[np.ndarray]] = {}
    llama_measured = None
    for name, impl in ctx.impls.items():
        full = impl.multi_head_attention(x, wq, wk, wv, wo, p.H, p.H)
        outputs[name] = [full]
        output.add("gqa_full_kv_vs_mha_max_error", name, float(np.max(np.abs(full - mha_loop))))
        repeated = impl.repeat_kv(k, n_rep)
        out, _ = impl.scaled_dot_product_attention(q, k, v, impl.causal_mask(p.T))
        errors = {
            "repeat_kv": float(np.max(np.abs(repeated - torch_repeat))),
            "sdpa": float(np.max(np.abs(out - torch_out))),
        }
        worst = max(errors, key=errors.get)
        output.add("gqa_head_order_vs_torch_max_error", name, errors[worst], f"larger: {worst}")
        distances[name] = {}
        for hkv in (p.H, p.Hkv, 1):
            pooled = impl.multi_head_attention(
                x, wq, _mean_pool(wk, p.H, hkv), _mean_pool(wv, p.H, hkv), wo, p.H, hkv
            )
            distances[name][hkv] = float(np.linalg.norm(pooled - full) / np.linalg.norm(full))
            outputs[name].append(pooled)
        pooled_k, pooled_v = _mean_pool(wk, p.H, p.Hkv), _mean_pool(wv, p.H, p.Hkv)
        decoded = impl.attention_decode(x, None, None, wq, pooled_k, pooled_v, wo, p.H, p.Hkv)
        outputs[name] += list(decoded)
        output.add(
            "gqa_meanpool_error_ratio", name, ratio(distances[name][p.Hkv], distances[name][1])
        )
        measured, shape = _llama_cache_bytes(impl)
        formula = 2 * LLAMA_TOKENS * LLAMA_KV_HEADS * LLAMA_HEAD_DIM * FP16_BYTES * LLAMA_LAYERS
        output.add(
            "gqa_kv_bytes_llama2_70b_error", name, abs(measured - formula), f"cache shape {shape}"
        )
        llama_measured = measured if llama_measured is None else llama_measured
    if ctx.both:
        error = reference_max_error(outputs["reference"], outputs["clean-room"])
        output.add("gqa_reference_max_error", "both", error)
    output.figures += _figures(p, distances, llama_measured)
    return output


def _figures(p: Params, distances: dict[str, dict[int, float]], llama_measured: int | None) -> list:
    """The distances from MHA, the KV cache against T, the course's numbers and the notes."""
    D = p.C // p.H
    figures: list = [
        TableFigure(
            title=Msg(
                "MHA, GQA and MQA on one input (H = {H}, D = {D}); GQA and MQA by "
                "mean-pooling the MHA layer's K/V heads",
                H=p.H,
                D=D,
            ),
            columns=(
                N_("variant"),
                "Hkv",
                N_("K/V params"),
                N_("KV bytes / token (float64)"),
                *(Msg("distance from MHA ({impl})", impl=implementation(n)) for n in distances),
            ),
            rows=tuple(
                (
                    label,
                    str(hkv),
                    f"{2 * p.C * hkv * D:,}",
                    f"{2 * hkv * D * 8:,}",
                    *(distances[n][hkv] for n in distances),
                )
                for label, hkv in (("MHA", p.H), ("GQA", p.Hkv), ("MQA", 1))
            ),
        )
    ]
    lengths = (256, 512, 1024, 2048, 4096)
    variants = (("MHA", p.H), ("GQA", p.Hkv), ("MQA", 1))
    figures.append(
        TableFigure(
            title=Msg(
                "KV cache of one layer against T (B = 1, float64, H = {H}, D = {D}), in KiB",
                H=p.H,
                D=D,
            ),
            columns=("T", *(f"{label} (Hkv={hkv})" for label, hkv in variants)),
            rows=tuple((T, *(T * 2 * hkv * D * 8 / 1024 for _, hkv in variants)) for T in lengths),
        )
    )
    figures += _figure_course(llama_measured)
    figures.append(
        Note(
            N_(
                "Distance from MHA is ||out - out_MHA|| / ||out_MHA||. These weights are random, so "
                "the heads pooled together are unrelated and both distances are large; the GQA paper "
                "(Ainslie et al. 2023) mean-pools a trained checkpoint and then trains it a little "
                "more. The conversion only works with interleaved groups: query head h must read the "
                "pooled head h // (H / Hkv), the one built from its own group."
            )
        )
    )
    figures.append(
        Note(
            N_(
                "Transformer 手撕与注意力机制 §05.5 writes the expansion as K.repeat(n_groups, axis=0): NumPy's repeat, which "
                "interleaves (0,0,1,1), the layout torch's enable_gqa and HF's repeat_kv use. "
                "torch's Tensor.repeat tiles instead (0,1,0,1); in torch write repeat_interleave."
            )
        )
    )
    return figures


def _figure_attention_params(C: int, H: int, Hkv: int) -> int:
    """From the contract's shapes: wq (C, H*D), wk and wv (C, Hkv*D), wo (H*D, C)."""
    D = C // H
    return C * H * D + 2 * C * Hkv * D + H * D * C


def _figure_course(measured_llama: int | None) -> list:
    """The course's own examples: its expression, the value, an independent count, its print."""
    L, T, Hkv, D, b = LLAMA_LAYERS, LLAMA_TOKENS, LLAMA_KV_HEADS, LLAMA_HEAD_DIM, FP16_BYTES
    llama = 2 * T * Hkv * D * b * L  # the course's expression, evaluated
    llama_mha = 2 * T * LLAMA_QUERY_HEADS * D * b * L  # the same with one KV head per query head

    def params(C: int, H: int, hkv: int) -> int:  # Q and O, plus 手撕 §5.5.2's 2 x Hkv x d_k x C
        return 2 * C * C + 2 * hkv * (C // H) * C

    def exact(value: int, prints: int | None) -> str:
        return "" if prints is None else (N_("yes") if value == prints else N_("NO"))

    measured = "" if measured_llama is None else f"{measured_llama:,} B"
    rows = [
        (N_("手撕 §5.3 MHA params, C=512, H=8"), "4×C²", f"{4 * 512**2:,}",
         f"{_figure_attention_params(512, 8, 8):,}", "1,048,576", exact(4 * 512**2, 1_048_576)),
        (N_("手撕 §13.4 MHA params, C=2048, H=16"), "4×C²", f"{4 * 2048**2:,}",
         f"{_figure_attention_params(2048, 16, 16):,}", "16,777,216", exact(4 * 2048**2, 16_777_216)),
        (N_("GQA params, C=2048, H=16, Hkv=4"), "2×C² + 2×Hkv×D×C", f"{params(2048, 16, 4):,}",
         f"{_figure_attention_params(2048, 16, 4):,}", "—", ""),
        (N_("MQA params, C=2048, H=16, Hkv=1"), "2×C² + 2×Hkv×D×C", f"{params(2048, 16, 1):,}",
         f"{_figure_attention_params(2048, 16, 1):,}", "—", ""),
        (N_("KV B/token/layer, C=2048, H=16, fp16: MHA/GQA 4/MQA"), "2×Hkv×D×2",
         " / ".join(f"{2 * h * 128 * 2:,}" for h in (16, 4, 1)), "", "—", ""),
        (N_("逐部件讲透 §6.6 query heads per KV head, 32 Q / 8 KV"), "H / Hkv", "4", "", "4", exact(32 // 8, 4)),
        (N_("手撕 §5.5.2 KV cache shrink, MQA, H=32"), "H / 1", "32x", "", "32 倍", exact(32 // 1, 32)),
        (N_("手撕 §5.5.2 KV cache shrink, GQA, H=32, Hkv=8"), "H / Hkv", "4x", "", "4 倍", exact(32 // 8, 4)),
        (N_("手撕 §7.4 Llama-2-70B KV cache, 4096 tokens"), "2×4096×8×128×2 B×80",
         f"{llama:,} B ({llama / 1e9:.2f} GB)", measured, COURSE_LLAMA_PRINTS, _figure_agrees(llama)),
        (N_("same with 64 KV heads (MHA, no GQA)"), "2×4096×64×128×2 B×80",
         f"{llama_mha:,} B ({llama_mha / 1e9:.2f} GB)", "", COURSE_LLAMA_PRINTS, _figure_agrees(llama_mha)),
    ]  # fmt: skip
    table = TableFigure(
        title=N_(
            "the course's numbers, recomputed (check: summed from the contract's weight "
            "shapes, or measured from attention_decode's cache)"
        ),
        columns=(
            N_("course example"),
            N_("formula"),
            N_("computed"),
            N_("check"),
            N_("course prints"),
            N_("agrees"),
        ),
        rows=tuple(rows),
    )
    notes = []
    if _figure_agrees(llama) != "yes":
        notes.append(
            Note(
                Msg(
                    "Transformer 手撕与注意力机制 §7.4 prints {COURSE_LLAMA_PRINTS} for Llama-2-70B, but its own expression 2 x "
                    "4096 x 8 x 128 x 2 B x 80 is {llama:,} B = {llama_g:.2f} GB ({llama_gib:.2f} GiB), "
                    "{factor}x less. The printed number is what 64 KV heads give ({llama_mha:,} B = "
                    "{llama_mha_g:.2f} GB): one KV head per query head, i.e. the cache without GQA. With "
                    "GQA's 8 KV heads the cache is 8x smaller, which is the point of §05.5.",
                    COURSE_LLAMA_PRINTS=COURSE_LLAMA_PRINTS,
                    llama=llama,
                    llama_g=llama / 1000000000.0,
                    llama_gib=llama / 2**30,
                    factor=llama_mha // llama,
                    llama_mha=llama_mha,
                    llama_mha_g=llama_mha / 1000000000.0,
                ),
                flag=True,
            )
        )
    return [table, *notes]


def _figure_agrees(value_bytes: int) -> str:
    """Does a byte count agree with the course's '~10.7 GB' at the precision printed?"""
    return N_("yes") if abs(value_bytes / 1e9 - COURSE_LLAMA_GB) < 0.05 else N_("NO")


LAB = Lab(
    id="gqa",
    title=N_("MHA, GQA and MQA: shared K/V heads, their order, and what they save"),
    question=N_(
        "Is GQA with Hkv = H exactly MHA, do query heads read the K/V head torch's "
        "enable_gqa gives them, and what do fewer K/V heads save in parameters and KV cache?"
    ),
    sections=(
        Section(PARTS, "§6.6", "MHA、MQA 和 GQA"),
        Section(HANDS_ON, "§05.5", "GQA / MQA：参数共享如何降低推理成本"),
        Section(HANDS_ON, "§5.3", "参数量精确计算"),
        Section(HANDS_ON, "§7.4", "显存开销计算"),
        Section(HANDS_ON, "§9.2", "前向传播核心逻辑", part="repeat_kv"),
    ),
    params=Params,
    metrics=METRICS,
    run=run,
)
