"""The chapters' printed formulas and figures, as rows the `worked-examples` lab judges.

A figure of attention weights is judged by whether a causal softmax can produce
it: each printed row against the nearest row a causal softmax gives (the
printed entries renormalised over the keys the row sees, through the contract's
`softmax` and `causal_mask`), at the figure's rounding. 第8章's causal formula is
evaluated on 手撕 §3.6's own example and judged against the numbers that section's
walk-through prints; every printed formula is also set against the code that
implements it (`worked_examples_formulas`).
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


def unmasked_output() -> np.ndarray:
    """手撕 §3.6's 完整公式 as printed, softmax(Q Kᵀ / √d_k) V, on its own 我, 想, 退款."""
    s = Q3 @ K3.T / math.sqrt(2)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True) @ V3)[:2]


def masked_output() -> np.ndarray:
    """第8章 阶段二's softmax(Q Kᵀ / √d_k + M) V with M the causal mask, written out."""
    s = Q3 @ K3.T / math.sqrt(2) + np.triu(np.full((3, 3), -np.inf), 1)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True) @ V3)[:2]


def _masked_output_of(impl) -> np.ndarray:
    out, _ = impl.scaled_dot_product_attention(
        Q3[None, None], K3[None, None], V3[None, None], impl.causal_mask(3)
    )
    return np.asarray(out)[0, 0, :2]


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
        Section(CH8, "阶段二", "scaled dot-product attention 逐步算"),
        N_(
            "formula: softmax(Q Kᵀ / √d_k + M) V with M the causal mask, on 手撕 §3.6's 我 and 想, "
            "against that section's outputs [0.20, 0.10], [0.40, 0.23]"
        ),
        "softmax(QKᵀ/√d_k + M)V",
        (0.2, 0.1, 0.4, 0.23),
        0.005,
        N_("2 decimals"),
        masked_output,
        _masked_output_of,
        fmt="{:.4f}",
    ),
)
