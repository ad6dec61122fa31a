"""Every formula the chapters print that a lab implements, set against that implementation.

Each `Formula` is one printed formula: where the chapter prints it, the formula as
printed, the code that implements it (a function of the contract, run on every
implementation, or labctl's own lab code, run once), and a numeric check: the
printed formula evaluated as printed (`printed_side`, written out here in NumPy)
against that code (`code_side`) on the same seeded inputs. They agree when the
largest difference is within `tol` (float64 rounding unless stated); where they
do not, the lab flags both formulas and the measured difference, and `code_says`
writes out what the code computes instead.

A formula whose check is statistical or needs a trained or whole model is checked by
the lab named in `ELSEWHERE`, not again here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from labctl.course import CH8, HANDS_ON, PARTS, Section
from labctl.i18n import N_

Inputs = dict[str, Any]


@dataclass(frozen=True)
class Formula:
    key: str
    section: Section
    printed: str
    code: str
    printed_side: Callable[[Inputs], np.ndarray]
    code_side: Callable[[Any, Inputs], np.ndarray]
    inputs: Callable[[np.random.Generator], Inputs]
    by_contract: bool = True  # code_side calls the implementation; else labctl's own code
    tol: float = 1e-12
    code_says: str = ""  # the formula the code computes, where it is not the printed one
    reason: str = ""  # why the two differ, shown with the measured difference
    says_side: Callable[[Inputs], np.ndarray] | None = None  # `code_says`, written out

    def difference(self, printed: np.ndarray, code: np.ndarray) -> float:
        """max |printed - code|; inf where the shapes differ, NaN where either has a NaN."""
        printed, code = np.asarray(printed, np.float64), np.asarray(code, np.float64)
        if printed.shape != code.shape:
            return math.inf
        return float(np.max(np.abs(printed - code), initial=0.0)) if printed.size else 0.0

    def verdict(self, difference: float, from_says: float = math.inf) -> str:
        """agrees: the code computes the printed formula; disagrees: it computes `code_says`
        (the formula the course should have printed); neither: something else."""
        if difference <= self.tol:
            return "agrees"
        if self.says_side is None or from_says <= self.tol:
            return "disagrees"
        return "neither"


# ---- the printed formulas, written out -------------------------------------------------------


def softmax_rows(s: np.ndarray) -> np.ndarray:
    e = np.exp(s - np.max(s, axis=-1, keepdims=True))
    return e / np.sum(e, axis=-1, keepdims=True)


def causal_blocked(T: int) -> np.ndarray:
    """(T, T), True where j > i: 手撕 §4.1's np.triu(np.ones((T, T)), k=1)."""
    return np.triu(np.ones((T, T), dtype=bool), k=1)


def attention_printed(q, k, v, mask: np.ndarray | None) -> np.ndarray:
    """softmax(Q Kᵀ / √d_k + M) V, M = -inf where `mask` blocks, written out."""
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s + np.where(mask, -np.inf, 0.0)
    return softmax_rows(s) @ v


def rms_printed(x, gamma) -> np.ndarray:
    """手撕 §6.2: RMS(x) = √((1/d) Σ x_i²), RMSNorm(x)_i = γ_i · x_i / RMS(x): no ε."""
    return gamma * x / np.sqrt(np.mean(x**2, axis=-1, keepdims=True))


def rms_eps(x, gamma, eps: float = 1e-6) -> np.ndarray:
    return gamma * x / np.sqrt(np.mean(x**2, axis=-1, keepdims=True) + eps)


def silu(z):
    return z / (1.0 + np.exp(-z))


def gelu_printed(z):
    """GELU(z) ≈ z · Φ(z), Φ the standard normal's CDF (exactly GELU's definition)."""
    erf = np.vectorize(math.erf)
    return z * 0.5 * (1.0 + erf(z / math.sqrt(2.0)))


def heads_loop(x, wq, wk, wv, wo, H: int, mask: np.ndarray | None) -> np.ndarray:
    """head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V); Concat(head_1, ..., head_h) W^O."""
    D = wq.shape[1] // H
    heads = [
        attention_printed(
            x @ wq[:, h * D : (h + 1) * D],
            x @ wk[:, h * D : (h + 1) * D],
            x @ wv[:, h * D : (h + 1) * D],
            mask,
        )
        for h in range(H)
    ]  # each (B, T, D)
    return np.concatenate(heads, axis=-1) @ wo  # (B, T, H·D) @ (H·D, C)


# ---- inputs ---------------------------------------------------------------------------------

B, H, T, D = 2, 2, 6, 4
C, F = H * D, 12


def _qkv(rng) -> Inputs:
    return {name: rng.standard_normal((B, H, T, D)) for name in ("q", "k", "v")}


def _x(rng) -> Inputs:
    return {"x": rng.standard_normal((B, T, C)), "gamma": 1.0 + 0.1 * rng.standard_normal(C)}


def _weights(rng, *shapes) -> list[np.ndarray]:
    return [rng.standard_normal(s) / math.sqrt(s[0]) for s in shapes]


def _mha(rng) -> Inputs:
    wq, wk, wv, wo = _weights(rng, (C, C), (C, C), (C, C), (C, C))
    return {"x": rng.standard_normal((B, T, C)), "w": (wq, wk, wv, wo)}


def _ffn(rng) -> Inputs:
    w1, w2 = _weights(rng, (C, F), (F, C))
    return {"x": rng.standard_normal((B, T, C)), "w1": w1, "w2": w2,
            "b1": rng.standard_normal(F), "b2": rng.standard_normal(C),
            "w_gate": _weights(rng, (C, F))[0]}  # fmt: skip


def _block(rng) -> Inputs:
    wq, wk, wv, wo = _weights(rng, (C, C), (C, C), (C, C), (C, C))
    w_gate, w_up, w_down = _weights(rng, (C, F), (C, F), (F, C))
    params = {"norm1": np.ones(C), "wq": wq, "wk": wk, "wv": wv, "wo": wo, "norm2": np.ones(C),
              "w_gate": w_gate, "w_up": w_up, "w_down": w_down}  # fmt: skip
    return {"x": rng.standard_normal((B, T, C)), "params": params}


# ---- the pieces of the contract a formula's code side runs ------------------------------------


def _sdpa(impl, i: Inputs, mask) -> np.ndarray:
    return np.asarray(impl.scaled_dot_product_attention(i["q"], i["k"], i["v"], mask)[0])


def _causal_weights(impl, i: Inputs) -> np.ndarray:
    """The weights of causal attention, given labctl's mask: the formula is the softmax's."""
    return np.asarray(
        impl.scaled_dot_product_attention(i["q"], i["k"], i["v"], causal_blocked(T))[1]
    )


def _combined(impl, lengths) -> np.ndarray:
    """causal_mask | padding_mask as the implementation returns them; NaN where they do not
    combine (a mask of the wrong shape), which no printed formula matches."""
    causal, padding = np.asarray(impl.causal_mask(T)), np.asarray(impl.padding_mask(lengths, T))
    try:
        return (causal | padding).astype(np.float64)
    except (TypeError, ValueError):
        return np.array([np.nan])


def _block_pre(impl, i: Inputs) -> np.ndarray:
    return np.asarray(impl.transformer_block(i["x"], i["params"], H))


def _pre_printed(i: Inputs) -> np.ndarray:
    """x = x + Attention(Norm(x)); x = x + MLP(Norm(x)), with the contract's RMSNorm (ε 1e-6),
    causal attention and SwiGLU written out."""
    p, x = i["params"], i["x"]
    h = x + heads_loop(rms_eps(x, p["norm1"]), p["wq"], p["wk"], p["wv"], p["wo"], H,
                       causal_blocked(T))  # fmt: skip
    z = rms_eps(h, p["norm2"])
    return h + (silu(z @ p["w_gate"]) * (z @ p["w_up"])) @ p["w_down"]


def _post_sublayers(i: Inputs):
    """The post-norm block's attention (no norm inside) and FFN, and the norm, in torch."""
    import torch

    from labctl.reference.primitives import rms_norm_t, swiglu_ffn_t
    from labctl.reference.transformer_block import mha_t

    p = {k: torch.from_numpy(v) for k, v in i["params"].items()}

    def attention(z):
        return mha_t(z, p["wq"], p["wk"], p["wv"], p["wo"], H, H, True, None, None)

    def ffn(z):
        return swiglu_ffn_t(z, p["w_gate"], p["w_up"], p["w_down"])

    return p, attention, ffn, rms_norm_t


def _post_hands_on(i: Inputs) -> np.ndarray:
    """手撕 §6.4 as printed: each sublayer x + Norm(Sublayer(x))."""
    import torch

    p, attention, ffn, norm = _post_sublayers(i)
    x = torch.from_numpy(i["x"])
    h = x + norm(attention(x), p["norm1"], 1e-6)
    return (h + norm(ffn(h), p["norm2"], 1e-6)).numpy()


def _post_ch8(i: Inputs) -> np.ndarray:
    """第8章 阶段四 as printed: x_{l+1} = LN(x_l + F(x_l)), for each sublayer."""
    import torch

    p, attention, ffn, norm = _post_sublayers(i)
    x = torch.from_numpy(i["x"])
    h = norm(x + attention(x), p["norm1"], 1e-6)
    return norm(h + ffn(h), p["norm2"], 1e-6).numpy()


def _post_lab(i: Inputs) -> np.ndarray:
    """The residual-ablation lab's post-norm block (its `_block_t("post-norm")`)."""
    import torch

    from labctl.labs.residual_ablation import Params as ResidualParams
    from labctl.labs.residual_ablation import _block_t

    params = ResidualParams(C=C, H=H, F=F, T=T, B=B)
    q = {k: torch.from_numpy(v) for k, v in i["params"].items()}
    return _block_t("post-norm", torch.from_numpy(i["x"]), q, params).numpy()


def _reach(impl, layers: int, window: int) -> np.ndarray:
    """Positions the last token reaches through `layers` stacked sliding-window masks."""
    n = layers * window + 2
    sees = (~np.asarray(impl.sliding_window_mask(n, window))).astype(np.int64)
    return np.array([np.count_nonzero(np.linalg.matrix_power(sees, layers)[-1])])


def _jacobian_by_differences(impl, z: np.ndarray, h: float = 1e-5) -> np.ndarray:
    n = len(z)
    columns = []
    for j in range(n):
        step = np.zeros(n)
        step[j] = h
        columns.append(
            (np.asarray(impl.softmax(z + step)) - np.asarray(impl.softmax(z - step))) / (2 * h)
        )
    return np.stack(columns, axis=1)  # (n, n): d p_i / d z_j


def _rope_pairs(x, positions, theta: float = 10000.0) -> np.ndarray:
    """手撕 §1.5.1-§1.5.2: pair i = (x_{2i}, x_{2i+1}) turns by m θ_i, θ_i = 10000^(-2i/d)."""
    d = x.shape[-1]
    out = np.empty_like(x)
    for i in range(d // 2):
        angle = positions * theta ** (-2.0 * i / d)
        a, b = x[..., 2 * i], x[..., 2 * i + 1]
        out[..., 2 * i] = a * np.cos(angle) - b * np.sin(angle)
        out[..., 2 * i + 1] = a * np.sin(angle) + b * np.cos(angle)
    return out


def _pe_printed(n: int, d: int) -> np.ndarray:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model))."""
    pe = np.zeros((n, d))
    for pos in range(n):
        for i in range(d // 2):
            pe[pos, 2 * i] = math.sin(pos / 10000 ** (2 * i / d))
            pe[pos, 2 * i + 1] = math.cos(pos / 10000 ** (2 * i / d))
    return pe


def _pe_dots(pe: np.ndarray, pairs) -> np.ndarray:
    return np.array([pe[p] @ pe[p + d] for p, d in pairs])


def _rope_identity(impl, i: Inputs) -> np.ndarray:
    """(R(mθ)·q)ᵀ · (R(nθ)·k) for each (m, n), through rope at d = 2 (θ = 10000^0 = 1)."""
    return np.array([
        float(np.asarray(impl.rope(i["q2"], np.array([m])))[0] @ np.asarray(impl.rope(i["k2"], np.array([n])))[0])
        for m, n in i["mn"]
    ])  # fmt: skip


def _rope_identity_printed(i: Inputs) -> np.ndarray:
    """qᵀ · R((n - m)θ) · k, θ = 1 rad."""
    out = []
    for m, n in i["mn"]:
        a = float(n - m)
        turn = np.array([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]])
        out.append(float(i["q2"][0] @ turn @ i["k2"][0]))
    return np.array(out)


def _alibi_attention(bias, scores) -> np.ndarray:
    from labctl.labs.alibi import causal_weights

    return causal_weights(bias, scores)


def _alibi_printed(i: Inputs) -> np.ndarray:
    """手撕 §01.5: score - λ·|m - n|, with the ALiBi slopes as λ, under the causal mask."""
    from labctl.labs.alibi import paper_slopes

    m, n = np.arange(T)[:, None], np.arange(T)[None, :]
    bias = -paper_slopes(H)[:, None, None] * np.abs(m - n)[None]
    return _alibi_attention(bias, i["scores"])


def _alibi_code(_impl, i: Inputs) -> np.ndarray:
    from labctl.reference import v2

    return _alibi_attention(v2.alibi_bias(H, T), i["scores"])


def _kv_bytes(impl, i: Inputs) -> np.ndarray:
    """A float32 cache of Tp + Tn tokens from attention_decode: its K and V bytes."""
    x = i["x"].astype(np.float32)
    w = [a.astype(np.float32) for a in i["w"]]
    wq, wk, wv, wo = w[0], w[1][:, :D], w[2][:, :D], w[3]  # one K/V head of width D
    _, k_all, v_all = impl.attention_decode(x, None, None, wq, wk, wv, wo, H, 1)
    return np.array([np.asarray(k_all).nbytes + np.asarray(v_all).nbytes]) / B


def _cache_appends(impl, i: Inputs) -> np.ndarray:
    """K_cache = [K_1, ..., K_t, K_{t+1}]: the cache after one more token, minus the old one."""
    x, (wq, wk, wv, wo) = i["x"], i["w"]
    _, k_t, v_t = impl.attention_decode(x[:, :-1], None, None, wq, wk, wv, wo, H)
    _, k_all, _ = impl.attention_decode(x[:, -1:], k_t, v_t, wq, wk, wv, wo, H)
    k_all = np.asarray(k_all)
    return np.concatenate([k_all[:, :, :-1] - np.asarray(k_t), k_all[:, :, -1:]], axis=2)


def _cache_appends_printed(i: Inputs) -> np.ndarray:
    x, (_, wk, _, _) = i["x"], i["w"]
    new_k = (x[:, -1:] @ wk).reshape(B, 1, H, D).transpose(0, 2, 1, 3)  # K_{t+1}: (B, H, 1, D)
    return np.concatenate([np.zeros((B, H, T - 1, D)), new_k], axis=2)


FORMULAS: tuple[Formula, ...] = (
    # ---- Transformer 逐部件讲透 -------------------------------------------------------------
    Formula(
        "parts-attention",
        Section(PARTS, "§6.2", "Q、K、V 的直觉"),
        "Attention(Q,K,V) = softmax((Q K^T) / sqrt(d_k) + Mask) V",
        N_("scaled_dot_product_attention(q, k, v, mask), mask = np.triu(ones, k=1)"),
        lambda i: attention_printed(i["q"], i["k"], i["v"], causal_blocked(T)),
        lambda impl, i: _sdpa(impl, i, causal_blocked(T)),
        _qkv,
    ),
    Formula(
        "parts-heads-merge",
        Section(PARTS, "§6.5", "多头注意力"),
        "D = C / H;  [B,H,T,D] → [B,T,H×D] = [B,T,C]",
        "merge_heads(x)",
        lambda i: np.swapaxes(i["q"], 1, 2).reshape(B, T, H * D),
        lambda impl, i: np.asarray(impl.merge_heads(i["q"])),
        _qkv,
        tol=0.0,
    ),
    Formula(
        "parts-swiglu",
        Section(PARTS, "§6.8", "前馈网络：每个 token 自己思考"),
        "SwiGLU(x) = W_down( SiLU(W_gate x) ⊙ (W_up x) )",
        "swiglu_ffn(x, w_gate, w_up, w_down)",
        lambda i: (silu(i["x"] @ i["w_gate"]) * (i["x"] @ i["w1"])) @ i["w2"],
        lambda impl, i: np.asarray(impl.swiglu_ffn(i["x"], i["w_gate"], i["w1"], i["w2"])),
        _ffn,
    ),
    Formula(
        "parts-gelu-mlp",
        Section(PARTS, "§6.8", "前馈网络：每个 token 自己思考"),
        "MLP(x) = W_2 GELU(W_1 x)",
        N_("labctl's reference: gelu(x @ w1) @ w2 (contract v2, the ffn-variants lab's reference)"),
        lambda i: gelu_printed(i["x"] @ i["w1"]) @ i["w2"],
        lambda _impl, i: _v2("gelu")(i["x"] @ i["w1"]) @ i["w2"],
        _ffn,
        by_contract=False,
    ),
    Formula(
        "parts-pre-norm",
        Section(PARTS, "§6.10", "LayerNorm 与 RMSNorm"),
        "x = x + Attention(Norm(x));  x = x + MLP(Norm(x))",
        N_("transformer_block(x, params, n_heads): RMSNorm, causal attention, SwiGLU"),
        _pre_printed,
        _block_pre,
        _block,
        tol=1e-10,
    ),
    # ---- 第8章 · Attention 与 Transformer Block -------------------------------------------------
    Formula(
        "ch8-attention",
        Section(CH8, "阶段二", "scaled dot-product attention 逐步算"),
        "Attn(Q,K,V) = softmax(Q K^T / √d_k + M) V",
        N_("scaled_dot_product_attention(q, k, v, mask), mask = np.triu(ones, k=1)"),
        lambda i: attention_printed(i["q"], i["k"], i["v"], causal_blocked(T)),
        lambda impl, i: _sdpa(impl, i, causal_blocked(T)),
        _qkv,
    ),
    Formula(
        "ch8-softmax-derivative",
        Section(CH8, "阶段二", "scaled dot-product attention 逐步算"),
        "∂p_i/∂z_j = p_i(δ_ij − p_j)",
        N_("softmax(z), differentiated by central differences (h = 1e-5)"),
        lambda i: np.diag(softmax_rows(i["z"])) - np.outer(softmax_rows(i["z"]), softmax_rows(i["z"])),
        lambda impl, i: _jacobian_by_differences(impl, i["z"]),
        lambda rng: {"z": rng.standard_normal(5)},
        tol=1e-8,  # the differences' own error: h² and rounding / h, ~1e-10
    ),
    Formula(
        "ch8-paper-attention",
        Section(CH8, "阶段四", "组装 Transformer Block", part="论文原文公式 (1)"),
        "Attention(Q,K,V) = softmax(Q K^T / √d_k) V",
        N_("scaled_dot_product_attention(q, k, v), mask=None: the paper's equation (1)"),
        lambda i: attention_printed(i["q"], i["k"], i["v"], None),
        lambda impl, i: _sdpa(impl, i, None),
        _qkv,
    ),
    Formula(
        "ch8-multi-head",
        Section(CH8, "阶段四", "组装 Transformer Block", part="Section 3.2.2: Multi-Head Attention"),
        "MultiHead(Q,K,V) = Concat(head_1, …, head_h) W^O,  head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)",
        "multi_head_attention(x, wq, wk, wv, wo, n_heads, causal=False)",
        lambda i: heads_loop(i["x"], *i["w"], H, None),
        lambda impl, i: np.asarray(impl.multi_head_attention(i["x"], *i["w"], H, causal=False)),
        _mha,
        tol=1e-10,
    ),
    Formula(
        "ch8-relu-ffn",
        Section(CH8, "阶段四", "组装 Transformer Block", part="Section 3.3: Position-wise Feed-Forward Networks"),
        "FFN(x) = max(0, x W_1 + b_1) W_2 + b_2",
        "relu_ffn(x, w1, b1, w2, b2)",
        lambda i: np.maximum(0.0, i["x"] @ i["w1"] + i["b1"]) @ i["w2"] + i["b2"],
        lambda impl, i: np.asarray(impl.relu_ffn(i["x"], i["w1"], i["b1"], i["w2"], i["b2"])),
        _ffn,
    ),
    Formula(
        "ch8-gelu-ffn",
        Section(CH8, "阶段四", "组装 Transformer Block", part="GPT-2 / GPT-3"),
        "FFN_GELU(x) = GELU(x W_1 + b_1) W_2 + b_2",
        N_("labctl's reference: gelu(x @ w1 + b1) @ w2 + b2 (contract v2, the ffn-variants lab's reference)"),
        lambda i: gelu_printed(i["x"] @ i["w1"] + i["b1"]) @ i["w2"] + i["b2"],
        lambda _impl, i: _v2("gelu")(i["x"] @ i["w1"] + i["b1"]) @ i["w2"] + i["b2"],
        _ffn,
        by_contract=False,
    ),
    Formula(
        "ch8-swiglu-ffn",
        Section(CH8, "阶段四", "组装 Transformer Block", part="LLaMA / DeepSeek"),
        "FFN_SwiGLU(x) = (SiLU(x W_gate) ⊗ (x W_up)) W_down",
        N_("swiglu_ffn(x, w_gate, w_up, w_down), with ⊗ read as the elementwise product"),
        lambda i: (silu(i["x"] @ i["w_gate"]) * (i["x"] @ i["w1"])) @ i["w2"],
        lambda impl, i: np.asarray(impl.swiglu_ffn(i["x"], i["w_gate"], i["w1"], i["w2"])),
        _ffn,
    ),
    Formula(
        "ch8-pre-ln",
        Section(CH8, "阶段四", "组装 Transformer Block", part="Pre-LN（GPT-2, LLaMA, DeepSeek 等现代 LLM 统一标配）"),
        "x_{l+1} = x_l + F(LN(x_l))",
        N_("transformer_block(x, params, n_heads): F the attention, then the FFN"),
        _pre_printed,
        _block_pre,
        _block,
        tol=1e-10,
    ),
    Formula(
        "ch8-post-ln",
        Section(CH8, "阶段四", "组装 Transformer Block", part="Post-LN（Vaswani 2017 原版 Transformer）"),
        "x_{l+1} = LN(x_l + F(x_l))",
        N_("the residual-ablation lab's post-norm block, _block_t('post-norm'): F the attention, then the FFN"),
        _post_ch8,
        lambda _impl, i: _post_lab(i),
        _block,
        by_contract=False,
        tol=1e-10,
    ),
    Formula(
        "ch8-sinusoidal",
        Section(CH8, "阶段五", "位置从哪里来"),
        "PE(p,2i) = sin(p ω_i), PE(p,2i+1) = cos(p ω_i), ω_i = 10000^(-2i/D)",
        "sinusoidal_positions(16, 32)",
        lambda i: _pe_printed(16, 32),
        lambda impl, i: np.asarray(impl.sinusoidal_positions(16, 32)),
        lambda rng: {},
    ),
    Formula(
        "ch8-pe-dot",
        Section(CH8, "阶段五", "位置从哪里来"),
        "PE(p) · PE(p+Δ) = Σ_i cos(Δ ω_i)",
        N_("sinusoidal_positions(64, 32): the dot products of rows p and p + Δ"),
        lambda i: np.array([np.sum(np.cos(d * 10000.0 ** (-2.0 * np.arange(16) / 32))) for _, d in i["pairs"]]),
        lambda impl, i: _pe_dots(np.asarray(impl.sinusoidal_positions(64, 32)), i["pairs"]),
        lambda rng: {"pairs": [(int(p), int(d)) for p, d in zip(rng.integers(0, 32, 6), rng.integers(0, 32, 6), strict=True)]},
        tol=1e-10,
    ),
    Formula(
        "ch8-swa",
        Section(CH8, "阶段五", "现代长上下文变体深探——滑动窗口注意力（SWA）与推理 Infra 的颠覆"),
        "Attention_SWA(Q,K,V)_i = softmax(Q_i K_[i-W+1:i]^T / √d_k) V_[i-W+1:i]",
        N_("scaled_dot_product_attention(q, k, v, mask), mask blocking all but [i-2, i] (W = 3)"),
        lambda i: np.stack([softmax_rows(i["q"][..., r : r + 1, :] @ np.swapaxes(i["k"][..., max(0, r - 2) : r + 1, :], -1, -2) / math.sqrt(D)) @ i["v"][..., max(0, r - 2) : r + 1, :] for r in range(T)], axis=2)[..., 0, :],
        lambda impl, i: _sdpa(impl, i, ~np.tril(np.triu(np.ones((T, T), dtype=bool), -2))),
        _qkv,
    ),
    Formula(
        "ch8-receptive-field",
        Section(CH8, "阶段五", "现代长上下文变体深探——滑动窗口注意力（SWA）与推理 Infra 的颠覆"),
        "Receptive Field = L × W",
        N_("sliding_window_mask(T, 4) stacked 3 layers deep (L = 3, W = 4): the positions the last token reaches"),
        lambda i: np.array([3 * 4]),
        lambda impl, i: _reach(impl, 3, 4),
        lambda rng: {},
        tol=0.0,
        code_says="L (W - 1) + 1 = 10",
        says_side=lambda i: np.array([3 * (4 - 1) + 1]),
        reason=N_("each layer reaches W - 1 positions further back, as the chapter's own layer 2 "
                  "says ([i-2W+2, i]); L × W counts the current token once per layer"),
    ),
    # ---- Transformer 手撕与注意力机制 ----------------------------------------------------------
    Formula(
        "hands-on-one-hot",
        Section(HANDS_ON, "§1.2.1", "Token Embedding 的本质：查表"),
        "X_embed = X_onehot · W_E ∈ ℝ^(n × d_model)",
        N_("labctl's reference: learned_positions(ids, W_E), the table lookup W_E[ids] (contract v2)"),
        lambda i: np.eye(i["W_E"].shape[0])[i["ids"]] @ i["W_E"],
        lambda _impl, i: _v2("learned_positions")(i["ids"], i["W_E"]),
        lambda rng: {"ids": rng.integers(0, 50, 7), "W_E": rng.standard_normal((50, 8))},
        by_contract=False,
        tol=0.0,
    ),
    Formula(
        "hands-on-sinusoidal",
        Section(HANDS_ON, "§1.2.2", "绝对位置编码的矩阵形式"),
        "PE(pos, 2i) = sin(pos / 10000^(2i/d_model)),  PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model))",
        "sinusoidal_positions(16, 32)",
        lambda i: _pe_printed(16, 32),
        lambda impl, i: np.asarray(impl.sinusoidal_positions(16, 32)),
        lambda rng: {},
    ),
    Formula(
        "hands-on-rotation",
        Section(HANDS_ON, "§1.5.1", "二维旋转的直觉"),
        "R(mθ)·[x_1, x_2]^T = [x_1·cos(mθ) - x_2·sin(mθ), x_1·sin(mθ) + x_2·cos(mθ)]",
        N_("rope(x, positions) at d = 2 (θ = 10000^0 = 1)"),
        lambda i: _rope_pairs(i["x2"], i["m"]),
        lambda impl, i: np.asarray(impl.rope(i["x2"], i["m"])),
        lambda rng: {"x2": rng.standard_normal((5, 2)), "m": rng.integers(0, 100, 5)},
    ),
    Formula(
        "hands-on-rope-relative",
        Section(HANDS_ON, "§1.5.1", "二维旋转的直觉"),
        "(R(mθ)·q)^T · (R(nθ)·k) = q^T · R((n-m)θ) · k",
        N_("rope(q, [m]) · rope(k, [n]) at d = 2 (θ = 1 rad)"),
        _rope_identity_printed,
        _rope_identity,
        lambda rng: {"q2": rng.standard_normal((1, 2)), "k2": rng.standard_normal((1, 2)),
                     "mn": [(int(m), int(n)) for m, n in rng.integers(0, 200, (4, 2))]},
        tol=1e-10,
    ),
    Formula(
        "hands-on-rope-frequencies",
        Section(HANDS_ON, "§1.5.2", "高维推广"),
        "θ_i = 10000^(-2i/d_model)",
        N_("rope(x, positions) at d = 8: pair (2i, 2i+1) turned by m θ_i"),
        lambda i: _rope_pairs(i["x8"], i["m"]),
        lambda impl, i: np.asarray(impl.rope(i["x8"], i["m"])),
        lambda rng: {"x8": rng.standard_normal((5, 8)), "m": rng.integers(0, 100, 5)},
    ),
    Formula(
        "hands-on-alibi",
        Section(HANDS_ON, "§01.5", "位置编码再讲深一点：RoPE 的旋转矩阵推导"),
        "score - λ·|m-n|",
        N_("labctl's reference: alibi_bias(H, T), -m_h (p_i - j) (contract v2): the attention each gives under the causal mask (the alibi lab)"),
        _alibi_printed,
        _alibi_code,
        lambda rng: {"scores": rng.standard_normal((H, T, T))},
        by_contract=False,
    ),
    Formula(
        "hands-on-steps",
        Section(HANDS_ON, "§3.4", "第四步：Softmax 归一化"),
        "A[i][j] = exp(S_masked[i][j]) / Σ_k exp(S_masked[i][k])",
        N_("scaled_dot_product_attention(q, k, v, mask): the weights"),
        lambda i: softmax_rows(i["q"] @ np.swapaxes(i["k"], -1, -2) / math.sqrt(D) + np.where(causal_blocked(T), -np.inf, 0.0)),
        lambda impl, i: _causal_weights(impl, i),
        _qkv,
    ),
    Formula(
        "hands-on-full-formula",
        Section(HANDS_ON, "§3.6", "完整公式一览"),
        "Attention(Q, K, V) = softmax(Q · K^T / √d_k) · V",
        N_("scaled_dot_product_attention(q, k, v), mask=None: §3.3 calls the mask 可选"),
        lambda i: attention_printed(i["q"], i["k"], i["v"], None),
        lambda impl, i: _sdpa(impl, i, None),
        _qkv,
    ),
    Formula(
        "hands-on-causal-mask",
        Section(HANDS_ON, "§4.2", "Mask 在 softmax 前施加"),
        "mask = np.triu(np.ones((seq_len, seq_len), dtype=bool), k=1)",
        "causal_mask(T)",
        lambda i: causal_blocked(T).astype(np.float64),
        lambda impl, i: np.asarray(impl.causal_mask(T)).astype(np.float64),
        lambda rng: {},
        tol=0.0,
    ),
    Formula(
        "hands-on-minus-1e9",
        Section(HANDS_ON, "§4.2", "Mask 在 softmax 前施加"),
        "scores_masked = np.where(mask, -1e9, scores)",
        N_("scaled_dot_product_attention(q, k, v, mask), -inf where blocked: the weights after the softmax"),
        lambda i: softmax_rows(np.where(causal_blocked(T), -1e9, i["q"] @ np.swapaxes(i["k"], -1, -2) / math.sqrt(D))),
        lambda impl, i: _causal_weights(impl, i),
        _qkv,
    ),
    Formula(
        "hands-on-combined-mask",
        Section(HANDS_ON, "§4.3", "Padding Mask vs Causal Mask"),
        "combined_mask = causal_mask | padding_mask",
        N_("causal_mask(T) | padding_mask(lengths, T), as a decoder with padding combines them"),
        lambda i: (causal_blocked(T)[None, None] | (np.arange(T)[None, :] >= i["lengths"][:, None])[:, None, None, :]).astype(np.float64),
        lambda impl, i: _combined(impl, i["lengths"]),
        lambda rng: {"lengths": rng.integers(1, T + 1, B)},
        tol=0.0,
    ),
    Formula(
        "hands-on-heads",
        Section(HANDS_ON, "§5.2", "维度变换详解"),
        "d_k = d_model / h;  head_i = Attention(Q_i, K_i, V_i);  Output = Concat(head_1..head_h) · W_O",
        "multi_head_attention(x, wq, wk, wv, wo, n_heads, causal=False)",
        lambda i: heads_loop(i["x"], *i["w"], H, None),
        lambda impl, i: np.asarray(impl.multi_head_attention(i["x"], *i["w"], H, causal=False)),
        _mha,
        tol=1e-10,
    ),
    Formula(
        "hands-on-repeat",
        Section(HANDS_ON, "§05.5", "GQA / MQA：参数共享如何降低推理成本"),
        "K_expanded = K.repeat(n_groups, axis=0)",
        "repeat_kv(k, n_groups)",
        lambda i: np.stack([np.repeat(b, 3, axis=0) for b in i["k"]]),
        lambda impl, i: np.asarray(impl.repeat_kv(i["k"], 3)),
        lambda rng: {"k": rng.standard_normal((B, 2, T, D))},
        tol=0.0,
    ),
    Formula(
        "hands-on-layer-norm",
        Section(HANDS_ON, "§6.1", "Layer Normalization"),
        "LayerNorm(x)_i = γ_i · (x_i - μ) / √(σ² + ε) + β_i",
        "layer_norm(x, weight, bias, eps=1e-5)",
        lambda i: i["gamma"] * (i["x"] - i["x"].mean(-1, keepdims=True)) / np.sqrt(i["x"].var(-1, keepdims=True) + 1e-5) + i["gamma"] - 1.0,
        lambda impl, i: np.asarray(impl.layer_norm(i["x"], i["gamma"], i["gamma"] - 1.0)),
        _x,
    ),
    Formula(
        "hands-on-rms-norm",
        Section(HANDS_ON, "§6.2", "RMSNorm"),
        "RMS(x) = √( (1/d) Σ x_i² ),  RMSNorm(x)_i = γ_i · x_i / RMS(x)",
        "rms_norm(x, weight, eps=1e-6)",
        lambda i: rms_printed(i["x"], i["gamma"]),
        lambda impl, i: np.asarray(impl.rms_norm(i["x"], i["gamma"])),
        _x,
        code_says="γ_i · x_i / √( (1/d) Σ x_i² + ε ),  ε = 1e-6",
        says_side=lambda i: rms_eps(i["x"], i["gamma"]),
        reason=N_("the printed formula has no ε; the contract, Llama and the chapter's own §6.3 "
                  "code add ε = 1e-6 under the root, which moves an O(1) output by about "
                  "ε / (2 · mean(x²))"),
    ),
    Formula(
        "hands-on-pre-norm",
        Section(HANDS_ON, "§6.4", "Pre-Norm vs Post-Norm"),
        "Pre-Norm: x + Attention(Norm(x))",
        N_("transformer_block(x, params, n_heads): the attention, then the FFN"),
        _pre_printed,
        _block_pre,
        _block,
        tol=1e-10,
    ),
    Formula(
        "hands-on-post-norm",
        Section(HANDS_ON, "§6.4", "Pre-Norm vs Post-Norm"),
        "Post-Norm: x + Norm(Attention(x))",
        N_("the residual-ablation lab's post-norm block, _block_t('post-norm'): the attention, then the FFN"),
        _post_hands_on,
        lambda _impl, i: _post_lab(i),
        _block,
        by_contract=False,
        tol=1e-10,
        code_says=N_("Norm(x + Attention(x)), then Norm(h + FFN(h)): 第8章 阶段四's LN(x_l + F(x_l))"),
        says_side=_post_ch8,
        reason=N_("Post-Norm (Vaswani 2017) normalises the sum after the residual add, as 第8章 "
                  "阶段四 prints it; x + Norm(Attention(x)) keeps the residual stream "
                  "unnormalised and normalises the branch instead, another architecture"),
    ),
    Formula(
        "hands-on-relu-ffn",
        Section(HANDS_ON, "§6.5.1", "标准 FFN"),
        "FFN(x) = W_2 · σ(W_1 · x + b_1) + b_2",
        N_("relu_ffn(x, w1, b1, w2, b2), σ = ReLU; rows times W_1 (d_model × d_ff), as its shape says"),
        lambda i: np.maximum(0.0, i["x"] @ i["w1"] + i["b1"]) @ i["w2"] + i["b2"],
        lambda impl, i: np.asarray(impl.relu_ffn(i["x"], i["w1"], i["b1"], i["w2"], i["b2"])),
        _ffn,
    ),
    Formula(
        "hands-on-glu",
        Section(HANDS_ON, "§6.5.2", "GLU 家族"),
        "GLU(x) = (W_1 · x) ⊙ σ(W_gate · x),  σ = sigmoid",
        N_("labctl's reference: glu_ffn(x, w_gate, w_1, I) (contract v2; W_down = I leaves the gated units)"),
        lambda i: (i["x"] @ i["w1"]) / (1.0 + np.exp(-(i["x"] @ i["w_gate"]))),
        lambda _impl, i: _v2("glu_ffn")(i["x"], i["w_gate"], i["w1"], np.eye(F)),
        _ffn,
        by_contract=False,
    ),
    Formula(
        "hands-on-swiglu",
        Section(HANDS_ON, "§6.5.2", "GLU 家族"),
        "SwiGLU(x) = (W_1 · x) ⊙ SiLU(W_gate · x),  SiLU(z) = z · sigmoid(z)",
        N_("swiglu_ffn(x, w_gate, w_1, I) (W_down = I leaves the gated units)"),
        lambda i: (i["x"] @ i["w1"]) * silu(i["x"] @ i["w_gate"]),
        lambda impl, i: np.asarray(impl.swiglu_ffn(i["x"], i["w_gate"], i["w1"], np.eye(F))),
        _ffn,
    ),
    Formula(
        "hands-on-geglu",
        Section(HANDS_ON, "§6.5.2", "GLU 家族"),
        "GeGLU(x) = (W_1 · x) ⊙ GELU(W_gate · x),  GELU(z) ≈ z · Φ(z)",
        N_("labctl's reference: geglu_ffn(x, w_gate, w_1, I) (contract v2)"),
        lambda i: (i["x"] @ i["w1"]) * gelu_printed(i["x"] @ i["w_gate"]),
        lambda _impl, i: _v2("geglu_ffn")(i["x"], i["w_gate"], i["w1"], np.eye(F)),
        _ffn,
        by_contract=False,
    ),
    Formula(
        "hands-on-kv-append",
        Section(HANDS_ON, "§7.2", "核心洞察"),
        "K_cache = [K_1, K_2, ..., K_t, K_{t+1}]",
        N_("attention_decode(x_new, past_k, past_v, ...): the cache it returns, minus the one it got; only K_{t+1} is new"),
        _cache_appends_printed,
        _cache_appends,
        _mha,
    ),
    Formula(
        "hands-on-kv-bytes",
        Section(HANDS_ON, "§7.4", "显存开销计算"),
        "KV Cache 大小 = 2 × seq_len × n_kv_heads × d_k × sizeof(dtype)",
        N_("attention_decode's k_all and v_all of one layer, float32, 1 K/V head: their bytes per sequence"),
        lambda i: np.array([2 * T * 1 * D * 4]),
        _kv_bytes,
        _mha,
        tol=0.0,
    ),
)  # fmt: skip


def _v2(name: str):
    from labctl.reference import v2

    return getattr(v2, name)


# Printed formulas whose check is statistical, or needs a whole or trained model: the lab and
# the metrics that check them.
ELSEWHERE: tuple[tuple[Section, str, str, tuple[str, ...]], ...] = (
    (Section(CH8, "阶段二", "scaled dot-product attention 逐步算"),
     "Var(S) = d_k;  Var(q·k / √d_k) = 1", "scale-ablation",
     ("raw_score_var[d_k=64]", "scaled_score_var[d_k=64]")),
    (Section(HANDS_ON, "§3.2.2", "点积的方差推导"), "Var[s] = d_k × 1 = d_k", "scale-ablation",
     ("raw_score_var[d_k=256]", "raw_score_var[d_k=512]")),
    (Section(HANDS_ON, "§7.5.3", "Online Softmax 的核心算法"),
     "m_new = max(m, s_j);  d = d · exp(m - m_new) + exp(s_j - m_new)", "tiled-attention",
     ("online_softmax_chapter_max_error", "tiled_vs_naive_max_error[float64]")),
    (Section(HANDS_ON, "§06.8", "残差连接与深度稳定性"), "∂output/∂x = I + ∂SubLayer(x)/∂x",
     "residual-ablation", ("grad_ratio_pre_norm[depth=32]", "grad_ratio_no_residual[depth=32]")),
    (Section(HANDS_ON, "§11.2", '为什么 attention 不是"完美的全局检索"'), "Σ_j A[i][j] = 1",
     "causal-attention", ("row_sum_max_deviation",)),
    (Section(HANDS_ON, "§08", "完整最小 Transformer Decoder（纯 NumPy）"),
     "mini_decoder_forward(token_ids, model)", "handson-decoder",
     ("handson_forward_max_error",)),
)  # fmt: skip


@dataclass(frozen=True)
class Judged:
    """One formula on the implementations: the code side's values and its distance from the
    printed side, by implementation."""

    formula: Formula
    values: dict[str, np.ndarray]
    differences: dict[str, float]  # from the printed formula
    from_says: dict[str, float]  # from `code_says`, where the inventory writes it out

    def verdicts(self) -> dict[str, str]:
        return {
            name: self.formula.verdict(d, self.from_says.get(name, math.inf))
            for name, d in self.differences.items()
        }


def expected_verdict(formula: Formula) -> str:
    """What the inventory expects: agreement, unless it writes out what the code computes
    instead of the printed formula (the course prints another formula there)."""
    return "disagrees" if formula.code_says else "agrees"


def judge(
    impls: dict[str, Any], seed: int, formulas: tuple[Formula, ...] = FORMULAS
) -> list[Judged]:
    """Every formula on seeded inputs (its own stream of `seed`): printed side against code side,
    the code run on each implementation where the contract computes it, else once."""
    judged = []
    for index, formula in enumerate(formulas):
        inputs = formula.inputs(np.random.default_rng([seed, index]))
        printed = np.asarray(formula.printed_side(inputs), dtype=np.float64)
        own = None if formula.by_contract else formula.code_side(None, inputs)
        values = {
            name: np.asarray(formula.code_side(impl, inputs) if formula.by_contract else own,
                             dtype=np.float64)
            for name, impl in impls.items()
        }  # fmt: skip
        differences = {name: formula.difference(printed, v) for name, v in values.items()}
        says = None if formula.says_side is None else formula.says_side(inputs)
        from_says = (
            {} if says is None else {n: formula.difference(says, v) for n, v in values.items()}
        )
        judged.append(Judged(formula, values, differences, from_says))
    return judged
