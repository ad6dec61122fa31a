"""The NumPy mini decoder, end to end: its logits, its causality, and greedy generation with a cache.

Transformer 手撕与注意力机制 §08 builds a decoder-only Transformer of about
100 lines (embedding, RMSNorm, causal attention, SwiGLU, residuals, a final
RMSNorm and logits = x @ embedᵀ, weights tied); §13.2 asks for GQA and for a
KV cache so that it generates token by token instead of recomputing the
whole prefix. Transformer 逐部件讲透 §6.11 assembles the same block.

Here `decoder_forward` (GQA, RoPE, a sliding window) is compared across the
implementations and checked for future-token invariance at the logits; then
N tokens are generated greedily twice: recomputing `decoder_forward` over the
whole prefix each step, and a cached path composed from the contract's own
functions (`rms_norm`, `attention_decode` per layer, `swiglu_ffn`). Both must
give the same tokens and the same logits to float64 rounding; the time per
token of each is reported, never deciding.
"""

from __future__ import annotations

import math

import numpy as np
from pydantic import Field

from labctl.course import HANDS_ON, PARTS, Section
from labctl.i18n import N_, Msg, joined
from labctl.lab import Lab, LabContext, LabOutput, LabParams, Metric, Note, TableFigure, largest


class Params(LabParams):
    V: int = Field(64, ge=2, le=4096, description=N_("vocabulary size"))
    C: int = Field(32, ge=2, le=256, description=N_("model width"))
    H: int = Field(4, ge=1, le=16, description=N_("query heads"))
    Hkv: int = Field(2, ge=1, le=16, description=N_("key/value heads (GQA)"))
    F: int = Field(64, ge=1, le=1024, description=N_("SwiGLU hidden width"))
    L: int = Field(2, ge=1, le=8, description=N_("decoder blocks"))
    T: int = Field(6, ge=1, le=64, description=N_("prompt length"))
    N: int = Field(8, ge=1, le=64, description=N_("tokens to generate"))
    window: int = Field(6, ge=1, le=64, description=N_("sliding window of every block"))
    rope_theta: float = Field(10000.0, gt=1.0, description=N_("RoPE base"))
    eps: float = Field(1e-6, gt=0.0, le=1e-2, description=N_("RMSNorm epsilon"))


METRICS = (
    Metric(
        "decoder_logits_vs_reference", "abs", "<=1e-10",
        N_("max |logits| difference of decoder_forward between the clean room and the "
           "reference on a batch of two prompts (GQA, RoPE, causal), float64"),
        impls=("both",),
        why=N_("the same float64 model: rounding of two implementations differs by ~1e-15 "
               "through L blocks; a missing final norm or a wrong block is O(1)"),
    ),
    Metric(
        "future_invariance_max_change", "abs", "<=1e-12",
        N_("max change of the logits at positions < 4 when every token from position 4 on is "
           "replaced"),
        why=N_("a causal model computes the first positions from the same inputs: unchanged up "
               "to BLAS rounding (0 in practice); a leaking mask moves them by O(1)"),
    ),
    Metric(
        "greedy_tokens_mismatch", "tokens", "==0",
        N_("generated tokens that differ between recomputing decoder_forward over the prefix "
           "and the cached path (rms_norm, attention_decode per layer, swiglu_ffn)"),
        why=N_("the same model two ways: the same argmax unless two logits tie within "
               "rounding, which random weights do not produce"),
        reproduce_abs=0.0, reproduce_rel=0.0,
    ),
    Metric(
        "greedy_logits_max_error", "abs", "<=1e-10",
        N_("max |logits| difference of every generated step between the two paths"),
        why=N_("float64 through L blocks: ~1e-14; a decode at the wrong RoPE position or "
               "without the window is O(0.1)"),
    ),
    Metric(
        "greedy_tokens_vs_reference", "tokens", "==0",
        N_("tokens of the clean room's cached generation that differ from the reference's"),
        impls=("both",),
        why=N_("the same model and prompt: the same greedy tokens"),
        reproduce_abs=0.0, reproduce_rel=0.0,
    ),
    Metric(
        "greedy_ms_per_token[recompute]", "ms", "<1000",
        N_("milliseconds of implementation compute per generated token, recomputing "
           "decoder_forward over the whole prefix"),
        why=N_("timing depends on the machine and its load: reported, never deciding"),
        timing=True,
    ),
    Metric(
        "greedy_ms_per_token[cached]", "ms", "<1000",
        N_("milliseconds of implementation compute per generated token on the cached path "
           "(the sum of its calls' compute time)"),
        why=N_("timing depends on the machine and its load: reported, never deciding"),
        timing=True,
    ),
)  # fmt: skip


def make_model(rng, p: Params) -> dict:
    """A random mini decoder in the contract's layout (weights (in, out), tied embedding)."""
    C, D = p.C, p.C // p.H

    def block() -> dict[str, np.ndarray]:
        return {
            "norm1": np.ones(C),
            "wq": rng.standard_normal((C, p.H * D)) / math.sqrt(C),
            "wk": rng.standard_normal((C, p.Hkv * D)) / math.sqrt(C),
            "wv": rng.standard_normal((C, p.Hkv * D)) / math.sqrt(C),
            "wo": rng.standard_normal((p.H * D, C)) / math.sqrt(p.H * D),
            "norm2": np.ones(C),
            "w_gate": rng.standard_normal((C, p.F)) / math.sqrt(C),
            "w_up": rng.standard_normal((C, p.F)) / math.sqrt(C),
            "w_down": rng.standard_normal((p.F, C)) / math.sqrt(p.F),
        }

    return {
        # The chapter's 0.02: a larger tied embedding makes every token predict itself.
        "embed": rng.standard_normal((p.V, C)) * 0.02,
        "blocks": [block() for _ in range(p.L)],
        "final_norm": np.ones(C),
    }


def parameter_counts(model: dict) -> list[tuple[str, int]]:
    """Parameters by part, from the arrays themselves."""
    blocks = model["blocks"]
    parts = {
        N_("embedding (tied: also the output head)"): model["embed"].size,
        N_("attention wq, wk, wv, wo"): sum(b[k].size for b in blocks for k in ("wq", "wk", "wv", "wo")),
        N_("SwiGLU w_gate, w_up, w_down"): sum(b[k].size for b in blocks for k in ("w_gate", "w_up", "w_down")),
        N_("RMSNorm weights"): sum(b[k].size for b in blocks for k in ("norm1", "norm2")) + model["final_norm"].size,
    }  # fmt: skip
    return list(parts.items())


def replace_from(rng, ids: np.ndarray, start: int, V: int) -> np.ndarray:
    """`ids` (B, T) with every token from position `start` on replaced by a different one."""
    future = ids.copy()
    shift = 1 + rng.integers(0, V - 1, size=ids[:, start:].shape)  # 1 .. V - 1: never 0 mod V
    future[:, start:] = (ids[:, start:] + shift) % V
    return future


def _forward(impl, ids, model, p: Params):
    """The chapter's model: causal, no window (generation below adds the window)."""
    return impl.decoder_forward(ids, model, p.H, p.Hkv, p.eps, "rope", p.rope_theta, None)


def _recompute(impl, prompt, model, p: Params) -> tuple[list[int], list[np.ndarray], float]:
    """Greedy: decoder_forward over the whole prefix at every step."""
    ids, tokens, logits, seconds = prompt, [], [], 0.0
    for _ in range(p.N):
        full, elapsed = impl.timed(
            "decoder_forward", ids, model, p.H, p.Hkv, p.eps, "rope", p.rope_theta, p.window
        )
        seconds += elapsed
        logits.append(full[0, -1])
        tokens.append(int(np.argmax(full[0, -1])))
        ids = np.concatenate([ids, [[tokens[-1]]]], axis=1)  # (1, T + step)
    return tokens, logits, seconds


def _cached(impl, prompt, model, p: Params) -> tuple[list[int], list[np.ndarray], float]:
    """Greedy with a KV cache per layer, composed from the contract's functions."""
    caches: list[tuple] = [(None, None)] * p.L
    new, tokens, logits, seconds = prompt, [], [], 0.0

    def call(fn, *args):
        nonlocal seconds
        value, elapsed = impl.timed(fn, *args)
        seconds += elapsed
        return value

    for _ in range(p.N):
        x = model["embed"][new]  # (1, Tn, C)
        for layer, block in enumerate(model["blocks"]):
            attended, k, v = call(
                "attention_decode", call("rms_norm", x, block["norm1"], p.eps), *caches[layer],
                block["wq"], block["wk"], block["wv"], block["wo"], p.H, p.Hkv, p.window,
                p.rope_theta,
            )  # fmt: skip
            caches[layer] = (k, v)  # (1, Hkv, T so far, D) each
            h = x + attended
            ffn_in = call("rms_norm", h, block["norm2"], p.eps)
            x = h + call("swiglu_ffn", ffn_in, block["w_gate"], block["w_up"], block["w_down"])
        last = call("rms_norm", x[:, -1], model["final_norm"], p.eps) @ model["embed"].T  # (1, V)
        logits.append(last[0])
        tokens.append(int(np.argmax(last[0])))
        new = np.array([[tokens[-1]]])  # (1, 1): only the new token goes through the blocks
    return tokens, logits, seconds


def run(ctx: LabContext) -> LabOutput:
    p: Params = ctx.params
    if p.C % p.H or p.H % p.Hkv or (p.C // p.H) % 2:
        raise ValueError(f"need C % H == 0, H % Hkv == 0 and an even D, got C={p.C}, H={p.H}")
    rng = np.random.default_rng(ctx.seed)
    model = make_model(rng, p)
    batch = rng.integers(0, p.V, size=(2, 8))  # (B, T)
    future = replace_from(rng, batch, 4, p.V)
    prompt = rng.integers(0, p.V, size=(1, p.T))  # (1, T)
    output = LabOutput()
    logits, runs = {}, {}
    for name, impl in ctx.impls.items():
        logits[name] = _forward(impl, batch, model, p)  # (B, T, V)
        changed = _forward(impl, future, model, p)
        output.add(
            "future_invariance_max_change",
            name,
            float(np.max(np.abs(changed[:, :4] - logits[name][:, :4]))),
        )
        full = _recompute(impl, prompt, model, p)
        cached = _cached(impl, prompt, model, p)
        runs[name] = (full, cached)
        output.add(
            "greedy_tokens_mismatch",
            name,
            sum(a != b for a, b in zip(full[0], cached[0], strict=True)),
        )
        error = largest(np.max(np.abs(a - b)) for a, b in zip(full[1], cached[1], strict=True))
        output.add("greedy_logits_max_error", name, error)
        output.add("greedy_ms_per_token[recompute]", name, full[2] / p.N * 1e3)
        output.add("greedy_ms_per_token[cached]", name, cached[2] / p.N * 1e3)
    if ctx.both:
        diff = float(np.max(np.abs(logits["reference"] - logits["clean-room"])))
        output.add("decoder_logits_vs_reference", "both", diff)
        reference_tokens, room_tokens = runs["reference"][1][0], runs["clean-room"][1][0]
        output.add(
            "greedy_tokens_vs_reference",
            "both",
            sum(a != b for a, b in zip(reference_tokens, room_tokens, strict=True)),
        )
    output.figures += _figures(p, model, logits, runs)
    return output


def _figures(p: Params, model: dict, logits, runs) -> list:
    """The parameters by part, the logits' shape, and the tokens and times of both paths."""
    names = tuple(runs)
    figures: list = []
    counts = parameter_counts(model)
    total = sum(n for _, n in counts)
    figures.append(
        TableFigure(
            title=Msg("parameters of the mini decoder by part (V = {V}, C = {C}, H = {H}, "
                      "Hkv = {Hkv}, F = {F}, L = {L})", V=p.V, C=p.C, H=p.H, Hkv=p.Hkv, F=p.F,
                      L=p.L),
            columns=(N_("part"), N_("parameter count"), N_("share")),
            rows=(*((part, n, n / total) for part, n in counts), (N_("total"), total, 1.0)),
        )
    )  # fmt: skip
    figures.append(
        Note(
            Msg("Tied weights: logits = rms_norm(x) @ embedᵀ, so the output head costs no "
                "parameters; an untied head would add V x C = {untied:,} ({share:.0%} more). "
                "The logits have the chapter's shape (B, T, V): {shape} here.",
                untied=p.V * p.C, share=p.V * p.C / total,
                shape=joined([Msg("{impl} {shape}", impl=n, shape=str(tuple(logits[n].shape)))
                              for n in names]))
        )
    )  # fmt: skip
    figures.append(
        TableFigure(
            title=Msg("greedy generation of {N} tokens from a prompt of {T} (window {W}, GQA, "
                      "RoPE): recompute vs cache", N=p.N, T=p.T, W=p.window),
            columns=(N_("implementation"), N_("tokens, recompute"), N_("tokens, cached"),
                     N_("ms per token, recompute"), N_("ms per token, cached")),
            rows=tuple(
                (n, " ".join(map(str, runs[n][0][0])), " ".join(map(str, runs[n][1][0])),
                 runs[n][0][2] / p.N * 1e3, runs[n][1][2] / p.N * 1e3)
                for n in names
            ),
        )
    )  # fmt: skip
    figures.append(
        Note(
            N_(
                "The cached path sends only the new token through the blocks: attention_decode "
                "appends its key and value to each layer's cache and attends to the window. "
                "Recomputing runs the whole prefix through every block at every step. Times are "
                "each implementation's own compute, summed over its calls; at these sizes fixed "
                "per-call costs dominate, so they are reported, never deciding."
            )
        )
    )
    return figures


LAB = Lab(
    id="decoder",
    title=N_("The mini decoder: logits, causality, and greedy generation with a KV cache"),
    question=N_(
        "Does the NumPy mini decoder give the reference's logits and ignore future "
        "tokens, and does greedy generation with a per-layer KV cache (GQA, RoPE, a "
        "window) give exactly the tokens and logits of recomputing the whole prefix?"
    ),
    sections=(
        Section(HANDS_ON, "§08", "完整最小 Transformer Decoder（纯 NumPy）"),
        Section(HANDS_ON, "§13.2", "代码题"),
        Section(PARTS, "§6.11", "一个完整 Decoder Block"),
    ),
    params=Params,
    metrics=METRICS,
    run=run,
)
