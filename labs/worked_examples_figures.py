"""The chapters' printed formulas and figures, as rows the `worked-examples` lab judges.

A figure of attention weights is judged by whether a causal softmax can produce
it: each printed row against the nearest row a causal softmax gives (the
printed entries renormalised over the keys the row sees, through the contract's
`softmax` and `causal_mask`), at the figure's rounding. A formula is evaluated
as printed on the chapter's own example and judged against the numbers the
chapter's own walk-through prints (its code and the other chapters apply the
causal mask), or against the contract's function it names.
"""

from __future__ import annotations

import math

import numpy as np

from labctl.course import CH8, HANDS_ON, Section
from labctl.i18n import N_
from labctl.labs.worked_examples_rows import K3, Q3, V3, Row

# Printed weights, row by row; blank or -inf cells above the diagonal read as 0.
CH8_MASK_FIGURE = ((0.85, 0, 0), (0.40, 0.60, 0), (0.10, 0.75, 0.15))  # 阶段二, The cat sat
CH8_WIDGET_MATRIX = ((1.0, 0, 0), (0.5, 0.5, 0), (0.3, 0.3, 0.3))  # 阶段五, 1 decimal
HANDS_ON_A = ((1.00, 0, 0), (0.33, 0.67, 0), (0.04, 0.26, 0.70))  # §3.6 Step 4 and its diagram


def nearest_causal(printed) -> np.ndarray:
    """The printed rows renormalised over the keys each sees: the causal softmax closest to them."""
    w = np.asarray(printed, dtype=np.float64)
    visible = np.tril(np.ones_like(w, dtype=bool))
    kept = np.where(visible, w, 0.0)
    return kept / kept.sum(axis=-1, keepdims=True)


def causal_softmax_of(impl, printed) -> np.ndarray:
    """softmax(log w + causal mask) through the contract: w renormalised where a key is visible."""
    w = np.asarray(printed, dtype=np.float64)
    blocked = np.asarray(impl.causal_mask(len(w)))
    with np.errstate(divide="ignore"):
        logs = np.where(blocked, -np.inf, np.log(np.where(w > 0, w, 0.0)))
    return np.asarray(impl.softmax(logs, -1))


def _unmasked_output() -> np.ndarray:
    """手撕 §3.6's 完整公式 as printed, softmax(Q Kᵀ / √d_k) V, on its own 我, 想, 退款."""
    s = Q3 @ K3.T / math.sqrt(2)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True) @ V3)[:2]


def _masked_output() -> np.ndarray:
    """第8章 阶段二's softmax(Q Kᵀ / √d_k + M) V with M the causal mask, written out."""
    s = Q3 @ K3.T / math.sqrt(2) + np.triu(np.full((3, 3), -np.inf), 1)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True) @ V3)[:2]


def _masked_output_of(impl) -> np.ndarray:
    out, _ = impl.scaled_dot_product_attention(
        Q3[None, None], K3[None, None], V3[None, None], impl.causal_mask(3)
    )
    return np.asarray(out)[0, 0, :2]


def _rope_identity(impl) -> np.ndarray:
    """(R(mθ) q)ᵀ (R(nθ) k) - qᵀ R((n - m)θ) k for m, n in a few pairs, D = 2, θ = 1 rad."""
    q, k = np.array([[0.3, -1.2]]), np.array([[0.8, 0.5]])
    gaps = []
    for m, n in ((0, 3), (5, 2), (7, 7), (100, 37)):
        rotated = impl.rope(q, np.array([m])) @ impl.rope(k, np.array([n])).T
        a = (n - m) * 1.0  # θ_0 = 10000^0 = 1 at D = 2
        turn = np.array([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]])
        gaps.append(float(rotated[0, 0] - q[0] @ turn @ k[0]))
    return np.array(gaps)


def _pe_formula(impl) -> np.ndarray:
    """The table against PE(p, 2i) = sin(p ω_i), PE(p, 2i + 1) = cos(p ω_i), ω_i = 10000^(-2i/D)."""
    p, i = np.arange(16)[:, None], np.arange(16)[None, :]
    omega = 10000.0 ** (-2.0 * i / 32)
    formula = np.empty((16, 32))
    formula[:, 0::2], formula[:, 1::2] = np.sin(p * omega), np.cos(p * omega)
    return np.array([np.max(np.abs(np.asarray(impl.sinusoidal_positions(16, 32)) - formula))])


FIGURE_ROWS: tuple[Row, ...] = (
    Row(
        Section(CH8, "阶段二", "scaled dot-product attention 逐步算", part="因果遮罩 (-inf)"),
        N_(
            "figure: the causal-mask weights of The, cat, sat (0.85 / 0.40 0.60 / 0.10 0.75 0.15) "
            "against the causal softmax rows nearest to them"
        ),
        "0.85; 0.40, 0.60; 0.10, 0.75, 0.15",
        tuple(np.ravel(CH8_MASK_FIGURE)),
        0.005,
        N_("2 decimals"),
        lambda: nearest_causal(CH8_MASK_FIGURE),
        lambda impl: causal_softmax_of(impl, CH8_MASK_FIGURE),
        reason=N_(
            "The sees only itself, so a causal softmax gives it weight exactly 1 (the chapter's "
            "own 概率和为 1); 0.85 cannot be a weight of that row. Rows cat and sat sum to 1"
        ),
        fmt="{:.2f}",
    ),
    Row(
        Section(CH8, "阶段五", "位置从哪里来", part="完整权重矩阵（行=query，列=key）"),
        N_(
            "figure: the attention widget's weight matrix (1.0 / 0.5 0.5 / 0.3 0.3 0.3) against "
            "the causal softmax rows nearest to it"
        ),
        "1.0; 0.5, 0.5; 0.3, 0.3, 0.3",
        tuple(np.ravel(CH8_WIDGET_MATRIX)),
        0.05,
        N_("1 decimal"),
        lambda: nearest_causal(CH8_WIDGET_MATRIX),
        lambda impl: causal_softmax_of(impl, CH8_WIDGET_MATRIX),
        fmt="{:.2f}",
    ),
    Row(
        Section(HANDS_ON, "§3.6", "完整公式一览", part="注意力分数矩阵示意"),
        N_(
            "figure: Step 4's A and its diagram (1.00 / 0.33 0.67 / 0.04 0.26 0.70) against the "
            "causal softmax rows nearest to them (whether the values are right is the Step 4 "
            "rows' question)"
        ),
        "1.00; 0.33, 0.67; 0.04, 0.26, 0.70",
        tuple(np.ravel(HANDS_ON_A)),
        0.005,
        N_("2 decimals"),
        lambda: nearest_causal(HANDS_ON_A),
        lambda impl: causal_softmax_of(impl, HANDS_ON_A),
        fmt="{:.2f}",
    ),
    Row(
        Section(HANDS_ON, "§3.6", "完整公式一览"),
        N_(
            "formula: Attention(Q, K, V) = softmax(Q·Kᵀ / √d_k)·V as printed (no mask), on 我 and "
            "想, against the section's own outputs [0.20, 0.10], [0.40, 0.23]"
        ),
        "softmax(Q·K^T / √d_k)·V",
        (0.2, 0.1, 0.4, 0.23),
        0.005,
        N_("2 decimals"),
        _unmasked_output,
        reason=N_(
            "the formula leaves out the mask its own Step 3 applies and 第8章 阶段二's formula "
            "writes (+M): as printed it gives 我 [0.46, 0.32] and 想 [0.60, 0.46]; the causal "
            "form softmax(Q·Kᵀ / √d_k + M)·V gives the section's numbers"
        ),
        fmt="{:.2f}",
    ),
    Row(
        Section(CH8, "阶段二", "scaled dot-product attention 逐步算"),
        N_(
            "formula: softmax(Q Kᵀ / √d_k + M) V with M the causal mask, on 手撕 §3.6's 我 and 想, "
            "against that section's outputs [0.20, 0.10], [0.40, 0.23]"
        ),
        "softmax(QKᵀ/√d_k + M)V",
        (0.2, 0.1, 0.4, 0.23),
        0.005,
        N_("2 decimals"),
        _masked_output,
        _masked_output_of,
        fmt="{:.4f}",
    ),
    Row(
        Section(CH8, "阶段五", "位置从哪里来"),
        N_(
            "formula: PE(p, 2i) = sin(p ω_i), PE(p, 2i+1) = cos(p ω_i), ω_i = 10000^(-2i/D), "
            "against sinusoidal_positions(16, 32): largest difference"
        ),
        "PE(p,2i) = sin(p ω_i) …",
        (0.0,),
        1e-12,
        N_("float64 rounding, 1e-12"),
        lambda: np.array([0.0]),
        _pe_formula,
        fmt="{:.1e}",
    ),
    Row(
        Section(HANDS_ON, "§01.5", "位置编码再讲深一点：RoPE 的旋转矩阵推导"),
        N_(
            "formula: (R(mθ)·q)ᵀ · (R(nθ)·k) = qᵀ · R((n-m)θ) · k, through rope at D = 2: largest "
            "difference over four (m, n)"
        ),
        "q^T · R((n-m)θ) · k",
        (0.0, 0.0, 0.0, 0.0),
        1e-12,
        N_("float64 rounding, 1e-12"),
        lambda: np.zeros(4),
        _rope_identity,
        fmt="{:.1e}",
    ),
)
