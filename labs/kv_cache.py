"""The KV cache: does cached decoding reproduce full attention exactly, and how much does it save?

The course (手撕 §07) says that when token t+1 is generated the keys and values
of tokens 1..t do not change, so they can be cached and only the new token's
K and V appended; Q is never cached, because each step needs only the new
query (§7.2, §7.3). Without the cache each step recomputes the whole prefix
(§7.1). §7.4 gives the cache's size, 2 x seq_len x n_kv_heads x d_k x sizeof
per layer, and §13.2 asks the learner to make a decoder generate token by token
with a cache instead of recomputing everything.

Here `attention_decode` is driven token by token and in uneven chunks, with
GQA and RoPE, on both implementations, and compared with `multi_head_attention`
over the whole sequence (float64, <= 1e-10). Then, at T = 64, 128, 256 and
512, one generated token costs: FLOPs counted from the shapes (the deciding
evidence) and time measured (reported, never deciding), cached vs recomputed.
"""

from __future__ import annotations

import math

import numpy as np
from pydantic import Field, model_validator

from labctl.course import HANDS_ON, Section
from labctl.i18n import N_, Msg, implementation, joined
from labctl.lab import (
    Lab,
    LabContext,
    LabOutput,
    LabParams,
    Metric,
    Note,
    TableFigure,
    larger,
    reference_max_error,
    satisfies,
    within_memory,
)

LENGTHS = (64, 128, 256, 512)
# A step within this of the full attention read the cache it was handed (float64 rounding).
GIVEN_CACHE_TOLERANCE = "<=1e-10"


class Params(LabParams):
    B: int = Field(2, ge=1, le=64, description="batch size")
    T: int = Field(16, ge=1, le=512, description="sequence length; the chunks must sum to it")
    C: int = Field(64, ge=2, le=1024, description="model width")
    H: int = Field(8, ge=1, le=64, description="query heads; must divide C, with C / H even")
    Hkv: int = Field(2, ge=1, le=64, description="K/V heads; must divide H")
    rope_theta: float = Field(10000.0, gt=1.0, le=1e9, description="RoPE base")
    # a prefill of 5, then 1, 3 and 7 tokens: sums to T
    chunks: tuple[int, ...] = Field(
        (5, 1, 3, 7), min_length=1, description="decode chunk sizes, summing to T"
    )
    repeats: int = Field(3, ge=1, le=100, description="timing: best of this many calls")

    @model_validator(mode="after")
    def _shapes_agree(self) -> Params:
        if self.C % self.H or (self.C // self.H) % 2:
            raise ValueError(
                Msg("H = {H} must divide C = {C} into an even head width", H=self.H, C=self.C)
            )
        if self.H % self.Hkv:
            raise ValueError(Msg("Hkv = {Hkv} must divide H = {H}", Hkv=self.Hkv, H=self.H))
        if any(c < 1 for c in self.chunks) or sum(self.chunks) != self.T:
            raise ValueError(
                Msg(
                    "chunks {chunks} must be positive and sum to T = {T}",
                    chunks=",".join(map(str, self.chunks)),
                    T=self.T,
                )
            )
        # held at once: the full attention's weights and softmax temporaries (4 of
        # B x H x T x T), and the input and both rooms' outputs and caches (12 of B x T x C)
        within_memory("B x T x (4HT + 12C)", self.B * self.T * (4 * self.H * self.T + 12 * self.C))
        return self


def _flops_metric(T: int) -> Metric:
    return Metric(
        f"decode_flops_ratio[T={T}]", "ratio", f">={T // 2}",
        Msg(
            "matmul FLOPs to produce token {T}'s output by recomputing all {T} positions, over the "
            "FLOPs of one cached attention_decode step, counted from the cache the step returned; "
            "a step that does not give the right answer from the cache it is handed (another "
            "sequence decoded in between, its cached positions reversed) did not attend that cache "
            "and is counted as a recompute",
            T=T,
        ),
        why=Msg(
            "every term is linear in the query count, so recompute = T x cached: {T}. At least "
            "T/2 leaves room for counting conventions; a decode that recomputes the prefix is ~1, "
            "and so is one that keeps its own copy of the prefix and ignores the cache",
            T=T,
        ),
        reproduce_abs=0.0, reproduce_rel=0.0,
    )  # fmt: skip


def _time_metric(T: int) -> Metric:
    return Metric(
        f"decode_time_ratio[T={T}]", "ratio-of-times", ">1",
        Msg(
            "seconds for token {T}'s output by recomputing (multi_head_attention over {T} tokens) "
            "over one cached attention_decode step; best of `repeats` calls, timed where the code "
            "runs",
            T=T,
        ),
        why=N_("timing depends on the machine and its load: reported, never deciding"),
        timing=True,
    )  # fmt: skip


METRICS = (
    Metric(
        "decode_token_by_token_max_error", "abs", "<=1e-10",
        N_("attention_decode one token at a time from an empty cache, against the rows of "
        "multi_head_attention over the whole sequence; GQA (H = 8, Hkv = 2) and RoPE, float64"),
        why=N_("the same float64 formula: rounding differs by ~1e-15; RoPE at the wrong positions "
        "moves every row after the first by O(0.1)"),
    ),
    Metric(
        "decode_chunked_max_error", "abs", "<=1e-10",
        N_("attention_decode in chunks of 5, 1, 3 and 7 tokens (bottom-right causal mask within a "
        "chunk) against multi_head_attention over the whole sequence"),
        why=N_("as token by token; a chunk also needs the causal mask aligned bottom-right"),
    ),
    Metric(
        "decode_kv_bytes_per_token_error", "bytes", "==0",
        N_("(k_all.nbytes + v_all.nbytes) / (B x T) of the cache attention_decode built, minus "
        "2 x Hkv x D x itemsize (Transformer 手撕与注意力机制 §7.4 per layer and token)"),
        why=N_("array sizes are integers: exact. A cache of the H repeated heads is H/Hkv = 4x larger"),
        reproduce_abs=0.0, reproduce_rel=0.0,
    ),
    Metric(
        "decode_given_cache_max_error", "abs", GIVEN_CACHE_TOLERANCE,
        N_("one attention_decode step at T = 64..512 handed the cache of a prefix with its cached "
        "positions reversed, after another sequence was decoded, against the last row of "
        "multi_head_attention over the prefix and the new token"),
        why=N_("the new token attends every cached position, so their order does not matter and "
        "only rounding (~1e-15) differs; a decode that keeps its own copy of the prefix (the "
        "last sequence it saw, or one looked up by the cache's contents) instead of reading "
        "the cache it is given answers for another sequence: O(0.1)"),
    ),
    Metric(
        "decode_reference_max_error", "abs", "<=1e-10",
        N_("float64 clean room vs reference on the same inputs: multi_head_attention, "
        "attention_decode token by token and in chunks, and the K and V caches it returned"),
        impls=("both",),
        why=N_("two float64 implementations of one formula differ by rounding only (~1e-15); "
        "the rows above compare decode with the room's own full attention, so a room whose "
        "multi_head_attention and attention_decode both return zeros would pass them"),
    ),
    *(_flops_metric(T) for T in LENGTHS),
    *(_time_metric(T) for T in LENGTHS),
)  # fmt: skip


def _weights(rng, p: Params):
    C, D = p.C, p.C // p.H
    wq = rng.standard_normal((C, p.H * D)) / math.sqrt(C)
    wk = rng.standard_normal((C, p.Hkv * D)) / math.sqrt(C)
    wv = rng.standard_normal((C, p.Hkv * D)) / math.sqrt(C)
    wo = rng.standard_normal((p.H * D, C)) / math.sqrt(p.H * D)
    return wq, wk, wv, wo


def _decode(impl, x, weights, p: Params, sizes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Feed x through attention_decode in chunks of `sizes`; return (out, k_all, v_all)."""
    k = v = None
    outs, start = [], 0
    for size in sizes:
        out, k, v = impl.attention_decode(
            x[:, start : start + size], k, v, *weights, p.H, p.Hkv, rope_theta=p.rope_theta
        )
        outs.append(out)
        start += size
    return np.concatenate(outs, axis=1), k, v


def flops(Tn: int, Tk: int, C: int, H: int, Hkv: int, D: int) -> int:
    """Matmul FLOPs (2 per multiply-add) of attention for Tn queries over Tk keys.

    Q, K, V projections of the Tn new tokens, scores Q Kᵀ and weights @ V over Tk keys for
    each of the H query heads, and the output projection. Softmax, RoPE and masking are
    O(H Tn Tk) element-wise work and left out.
    """
    projections = 2 * Tn * C * (H * D + 2 * Hkv * D)
    attention = 2 * 2 * H * Tn * Tk * D
    output = 2 * Tn * H * D * C
    return projections + attention + output


def _per_token(impl, x, other, weights, p: Params) -> dict[str, float]:
    """One generated token at length T = x.shape[1]: cached step vs recompute, FLOPs and seconds.

    The step is handed the prefix's cache after `other` (another sequence of the same length)
    was decoded, with the cached positions reversed: only a decode that reads the cache it is
    given answers right, so only then are its FLOPs counted from that cache.
    """
    T, D = x.shape[1], p.C // p.H
    _, k, v = impl.attention_decode(
        x[:, : T - 1], None, None, *weights, p.H, p.Hkv, rope_theta=p.rope_theta
    )  # the prefill: the cache of the first T - 1 tokens, (B, Hkv, T - 1, D)
    impl.attention_decode(
        other[:, : T - 1], None, None, *weights, p.H, p.Hkv, rope_theta=p.rope_theta
    )
    k, v = k[:, :, ::-1].copy(), v[:, :, ::-1].copy()  # (B, Hkv, T - 1, D), positions reversed
    cached_s, recompute_s, error = math.inf, math.inf, 0.0
    for _ in range(p.repeats):
        (out, k_all, _), seconds = impl.timed(
            "attention_decode", x[:, T - 1 :], k, v, *weights, p.H, p.Hkv, None, p.rope_theta
        )
        cached_s = min(cached_s, seconds)
        full, seconds = impl.timed(
            "multi_head_attention", x, *weights, p.H, p.Hkv, True, None, p.rope_theta
        )
        recompute_s = min(recompute_s, seconds)
        error = larger(error, float(np.max(np.abs(out - full[:, T - 1 :]))))
    attended = satisfies(error, GIVEN_CACHE_TOLERANCE)
    Hkv, Tk = k_all.shape[1], k_all.shape[2]  # what the implementation cached and attended
    return {
        "flops_cached": flops(1, Tk, p.C, p.H, Hkv, D)
        if attended
        else flops(T, T, p.C, p.H, Hkv, D),
        "flops_recompute": flops(T, T, p.C, p.H, Hkv, D),
        "cached_s": cached_s,
        "recompute_s": recompute_s,
        "error": error,
    }


def run(ctx: LabContext) -> LabOutput:
    p: Params = ctx.params  # Params has checked that the chunks sum to T
    rng = np.random.default_rng(ctx.seed)
    x = rng.standard_normal((p.B, p.T, p.C))  # (B, T, C)
    weights = _weights(rng, p)
    long_x = rng.standard_normal((1, max(LENGTHS), p.C))  # (1, 512, C): prefixes for timing
    other_x = rng.standard_normal((1, max(LENGTHS), p.C))  # (1, 512, C): decoded in between
    D = p.C // p.H
    output = LabOutput()
    timings: dict[str, dict[int, dict[str, float]]] = {}
    outputs: dict[str, list[np.ndarray]] = {}
    for name, impl in ctx.impls.items():
        full = impl.multi_head_attention(
            x, *weights, p.H, p.Hkv, rope_theta=p.rope_theta
        )  # (B, T, C)
        stepped, k_all, v_all = _decode(impl, x, weights, p, [1] * p.T)
        chunked, _, _ = _decode(impl, x, weights, p, p.chunks)
        outputs[name] = [full, stepped, chunked, k_all, v_all]
        output.add("decode_token_by_token_max_error", name, float(np.max(np.abs(stepped - full))))
        output.add("decode_chunked_max_error", name, float(np.max(np.abs(chunked - full))))
        per_token = (k_all.nbytes + v_all.nbytes) / (p.B * p.T)
        formula = 2 * p.Hkv * D * x.dtype.itemsize
        output.add(
            "decode_kv_bytes_per_token_error",
            name,
            abs(per_token - formula),
            f"{per_token:g} B per token and layer",
        )
        timings[name] = {
            T: _per_token(impl, long_x[:, :T], other_x[:, :T], weights, p) for T in LENGTHS
        }
        output.add(
            "decode_given_cache_max_error",
            name,
            max(t["error"] for t in timings[name].values()),
        )
        for T, t in timings[name].items():
            output.add(f"decode_flops_ratio[T={T}]", name, t["flops_recompute"] / t["flops_cached"])
            output.add(f"decode_time_ratio[T={T}]", name, t["recompute_s"] / t["cached_s"])
    if ctx.both:
        error = reference_max_error(outputs["reference"], outputs["clean-room"])
        output.add("decode_reference_max_error", "both", error)
    output.figures += _figures(timings, p, x.dtype.itemsize)
    return output


def _figures(timings: dict[str, dict[int, dict[str, float]]], p: Params, itemsize: int) -> list:
    """The FLOP and timing tables per length, and the notes on cache size and timings."""
    D = p.C // p.H
    bytes_per_token = 2 * p.Hkv * D * itemsize
    figures: list = []
    names = list(timings)
    figures.append(
        TableFigure(
            title=Msg(
                "one generated token at length T (B = 1, C = {C}, H = {H}, Hkv = {Hkv}): matmul "
                "FLOPs counted from the shapes of each implementation's calls and cache",
                C=p.C,
                H=p.H,
                Hkv=p.Hkv,
            ),
            columns=(
                "T",
                *(Msg("FLOPs cached ({impl})", impl=implementation(n)) for n in names),
                *(Msg("FLOPs recompute ({impl})", impl=implementation(n)) for n in names),
                *(Msg("ratio ({impl})", impl=implementation(n)) for n in names),
                N_("KV cache, 1 layer"),
            ),
            rows=tuple(
                (
                    str(T),
                    *(f"{timings[n][T]['flops_cached']:,}" for n in names),
                    *(f"{timings[n][T]['flops_recompute']:,}" for n in names),
                    *(
                        timings[n][T]["flops_recompute"] / timings[n][T]["flops_cached"]
                        for n in names
                    ),
                    f"{T * bytes_per_token:,} B",
                )
                for T in LENGTHS
            ),
        )
    )
    figures.append(
        TableFigure(
            title=Msg(
                "the same token timed where the code runs, best of {repeats} (reported, never "
                "deciding)",
                repeats=p.repeats,
            ),
            columns=("T", N_("implementation"), N_("ms cached"), N_("ms recompute"), N_("ratio")),
            rows=tuple(
                (
                    str(T),
                    name,
                    t["cached_s"] * 1e3,
                    t["recompute_s"] * 1e3,
                    t["recompute_s"] / t["cached_s"],
                )
                for T in LENGTHS
                for name, per_length in timings.items()
                for t in (per_length[T],)
            ),
        )
    )
    figures.append(
        Note(
            Msg(
                "KV cache per token and layer (Transformer 手撕与注意力机制 §7.4): 2 x Hkv x D x bytes = 2 x {Hkv} x {D} x "
                "{itemsize} = {per_token} B in float64 here; with MHA's {H} K/V heads it would be "
                "{per_token_mha} B. The cache grows by that much per token: it is the memory the cache "
                "trades for the FLOPs above.",
                Hkv=p.Hkv,
                D=D,
                itemsize=itemsize,
                per_token=2 * p.Hkv * D * itemsize,
                H=p.H,
                per_token_mha=2 * p.H * D * itemsize,
            )
        )
    )
    figures.append(
        Note(
            N_(
                "Recomputing token T's output costs T times one cached step: every FLOP term is "
                "linear in the number of queries, and here both paths score every query against all "
                "T keys (a causal kernel that skips the masked half would save about half of the "
                "recompute's attention term). Generating n tokens without the cache therefore costs "
                "O(n^2) projections and O(n^3) attention in total, as Transformer 手撕与注意力机制 §7.1 says."
            )
        )
    )
    below = {
        name: [str(T) for T, t in per_length.items() if t["recompute_s"] / t["cached_s"] < T]
        for name, per_length in timings.items()
    }
    if any(below.values()):
        where = joined(
            [
                Msg("{impl}: T = {lengths}", impl=n, lengths=", ".join(Ts))
                for n, Ts in below.items()
                if Ts
            ]
        )
        biggest = max(
            t["flops_cached"] for per_length in timings.values() for t in per_length.values()
        )
        figures.append(
            Note(
                Msg(
                    "Measured time ratios fall short of the FLOP ratio ({where}): a cached step of at most "
                    "{biggest:,} FLOPs is dominated by fixed per-call costs (argument checks, allocation, "
                    "dispatch), not arithmetic. The FLOP counts decide; the times are reported only.",
                    where=where,
                    biggest=biggest,
                )
            )
        )
    return figures


LAB = Lab(
    id="kv-cache",
    title=N_("The KV cache: exact decoding, and what one generated token costs"),
    question=N_(
        "Does decoding with a KV cache, token by token or in chunks, reproduce full "
        "attention exactly, and how much work does the cache save per generated token?"
    ),
    sections=(
        Section(HANDS_ON, "§07", "KV Cache 原理：推理时为什么可以缓存 K 和 V"),
        Section(HANDS_ON, "§13.2", "代码题"),
        Section(HANDS_ON, "§9.2", "前向传播核心逻辑", part="KV Cache 更新"),
    ),
    params=Params,
    metrics=METRICS,
    run=run,
)
