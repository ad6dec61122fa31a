"""The course's printed hand calculations, one `Row` each, for the `worked-examples` lab.

A row holds what the chapter prints (as text and as numbers), the rounding it
is judged at (half a unit of the last printed digit unless stated), the value
worked out by plain arithmetic in this module, and, where a contract function
computes it, that computation, which the lab runs on every implementation.
`reason` is the one-line explanation shown when the recomputed value falls
outside the rounding; `approximation` marks a number the chapter itself calls
approximate (约, ≈ a round figure).

Numbers the chapters print that cannot be recomputed (random draws without a
seed, the widgets' hidden toy vectors, fixtures that are not given) are listed
in `UNCHECKED` instead.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from labctl.course import CH8, HANDS_ON, PARTS, Section
from labctl.i18n import N_
from labctl.labs.worked_examples_models import (
    LLAMA2_7B,
    LLAMA2_70B,
    LLAMA3_8B,
    MISTRAL_7B,
    TRANSFORMER_BASE,
)


@dataclass(frozen=True)
class Row:
    section: Section
    what: str
    printed: str
    claimed: tuple[float, ...]
    tol: float
    rounding: str
    arithmetic: Callable[[], np.ndarray]
    contract: Callable[[Any], np.ndarray] | None = None
    approximation: bool = False
    reason: str = ""
    fmt: str = "{:.4g}"
    config: str = ""  # the published configuration its numbers come from (worked_examples_models)

    def recompute(self, impl: Any | None) -> np.ndarray:
        """Through the contract on `impl` where a function applies, else the arithmetic."""
        source = self.contract(impl) if self.contract is not None and impl is not None else None
        value = self.arithmetic() if source is None else source
        return np.asarray(value, dtype=np.float64).ravel()

    def verdict(self, value: np.ndarray) -> str:
        claimed = np.asarray(self.claimed, dtype=np.float64)
        if value.shape == claimed.shape and np.all(np.abs(value - claimed) <= self.tol * 1.000001):
            return "agrees"
        return "approximation" if self.approximation else "disagrees"

    def show(self, value: np.ndarray) -> str:
        return ", ".join(self.fmt.format(v) for v in value)


# ---- the chapters' examples, as inputs ------------------------------------------------------

Q3 = np.array([[1.0, 0.0], [1.0, 1.0], [1.0, 2.0]])  # 手撕 §3.6: 我, 想, 退款; (T, D) = (3, 2)
K3 = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 2.0]])
V3 = np.array([[0.2, 0.1], [0.5, 0.3], [0.9, 0.8]])


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - np.max(x))
    return e / e.sum()


def _attention3() -> tuple[np.ndarray, np.ndarray]:
    """手撕 §3.6 written out: scores / sqrt(2), future blocked, row softmax, weights @ V."""
    scores = Q3 @ K3.T / math.sqrt(2)
    weights = np.zeros((3, 3))
    for i in range(3):
        weights[i, : i + 1] = _softmax(scores[i, : i + 1])
    return weights, weights @ V3


def _sdpa3(impl) -> tuple[np.ndarray, np.ndarray]:
    out, weights = impl.scaled_dot_product_attention(
        Q3[None, None], K3[None, None], V3[None, None], impl.causal_mask(3)
    )  # (1, 1, 3, 2), (1, 1, 3, 3)
    return weights[0, 0], out[0, 0]


def _minimal_example(impl) -> np.ndarray:
    """第8章 阶段二: q = [1, 0] against k1 = [1, 0], k2 = [0, 1], default scale 1/sqrt(2)."""
    q = np.array([1.0, 0.0]).reshape(1, 1, 1, 2)  # (B, H, Tq, D)
    keys = np.eye(2)[None, None]  # (B, H, Tk, D): k1, k2; also V = I, so out = weights
    _, weights = impl.scaled_dot_product_attention(q, keys, keys)
    return weights[0, 0, 0]


def _online_vs_standard(impl) -> np.ndarray:
    """手撕 §7.5.3's scores through tiled_attention (block 1: one key at a time) vs softmax."""
    scores = np.array([2.0, 1.0, 0.5, 3.0])
    q, k = np.ones((1, 1, 1, 1)), scores.reshape(1, 1, 4, 1)
    online = impl.tiled_attention(q, k, np.eye(4)[None, None], 1, False, 1.0)[0, 0, 0]
    return np.array([np.max(np.abs(online - impl.softmax(scores)))])


PE_SHAPE = (16, 32)  # the sinusoidal table of 第8章 阶段五


def _pe_dots(impl, delta: int) -> np.ndarray:
    pe = impl.sinusoidal_positions(*PE_SHAPE)
    return np.array([pe[p] @ pe[p + delta] for p in (0, 5, 10)])


def _pe_dots_closed(delta: int) -> np.ndarray:
    omega = 10000.0 ** (-2.0 * np.arange(16) / 32)
    return np.full(3, np.sum(np.cos(delta * omega)))


def _visible_per_position(impl, T: int) -> np.ndarray:
    return (~np.asarray(impl.causal_mask(T))).sum(axis=1)


def _queries_per_kv_head(impl) -> np.ndarray:
    heads = np.arange(8, dtype=np.float64).reshape(1, 8, 1, 1)  # (B, Hkv, T, D): value = head
    served = impl.repeat_kv(heads, 4)[0, :, 0, 0]  # (32,): the K/V head each query head reads
    return np.array([np.count_nonzero(served == 0)])  # query heads reading K/V head 0


def _reach(impl, layers: int, window: int) -> np.ndarray:
    """Positions the last token reaches through `layers` stacked sliding-window layers."""
    T = layers * window + 2
    sees = (~np.asarray(impl.sliding_window_mask(T, window))).astype(np.int64)  # (T, T)
    reach = np.linalg.matrix_power(sees, layers)
    return np.array([np.count_nonzero(reach[-1])])


def _diluted(impl, n: int) -> np.ndarray:
    """One key whose weight is 0.1 among 100 equal others keeps its score gap among n keys."""
    gap = math.log(0.1 * 99 / 0.9)
    scores = np.zeros(n)
    scores[0] = gap
    return np.array([impl.softmax(scores)[0]])


def _diluted_closed(n: int) -> np.ndarray:
    e = math.exp(math.log(0.1 * 99 / 0.9))
    return np.array([e / (e + n - 1)])


def _step(result: int, rows: int | slice) -> tuple[Callable[[], Any], Callable[[Any], Any]]:
    """手撕 §3.6's weights (result 0) or outputs (1) at `rows`: by hand, and through the contract."""
    return (lambda: _attention3()[result][rows]), (lambda impl: _sdpa3(impl)[result][rows])


_S3 = Q3 @ K3.T
# 手撕 §7.4: 2 x seq x kv_heads x d_k x fp16 x layers
_LLAMA_KV_BYTES = LLAMA2_70B.kv_cache_bytes(4096)
_D, _HIDDEN = LLAMA2_7B.d_model, LLAMA2_7B.ffn  # 第8章 阶段四: D = 4096, hidden 11008
_SWA_LAYERS, _SWA_WINDOW = MISTRAL_7B.layers, MISTRAL_7B.window or 0  # L = 32, W = 4096


# ---- the rows, section by section -----------------------------------------------------------
# A section's rows are data under one `_section` call, one tuple a row:
#     (what, printed, claimed, judged, fmt, arithmetic[, contract[, reason]])
# with `judged` = (tolerance, rounding). The few rows that take their numbers from a published
# configuration (or that the chapter calls approximate) are whole `Row`s.

_EXACT = (0.0, N_("exact"))
_COUNT = (0.0, N_("exact count"))
_DECIMALS_2 = (0.005, N_("2 decimals"))
_DECIMALS_4 = (0.00005, N_("4 decimals"))
_DECIMALS_6 = (5e-7, N_("6 decimals"))


def _row(section, what, printed, claimed, judged, fmt, arithmetic, contract=None, reason="") -> Row:
    tol, rounding = judged
    return Row(
        section, what, printed, claimed, tol, rounding, arithmetic, contract, reason=reason, fmt=fmt
    )


def _section(section: Section, *rows: tuple) -> tuple[Row, ...]:
    return tuple(_row(section, *row) for row in rows)


ROWS: tuple[Row, ...] = (
    # ---- Transformer 逐部件讲透 -------------------------------------------------------------
    *_section(Section(PARTS, "§6.4", "因果遮罩为什么必须存在"),
        (N_("keys visible to positions 0..3 under the causal mask"),
         "[0], [0,1], [0,1,2], [0,1,2,3]", (1, 2, 3, 4), _COUNT, "{:.0f}",
         lambda: np.arange(1, 5), lambda impl: _visible_per_position(impl, 4))),
    *_section(Section(PARTS, "§6.6", "MHA、MQA 和 GQA"),
        (N_("query heads sharing one K/V head with 32 query heads and 8 K/V heads"),
         "4", (4,), _COUNT, "{:.0f}", lambda: np.array([32 // 8]), _queries_per_kv_head)),
    *_section(Section(PARTS, "§6.12", "为什么 Attention 是 O(T²)"),
        (N_("8K to 32K tokens: growth of the length and of the [T, T] attention matrix"),
         "4, 16", (4, 16), _EXACT, "{:.0f}",
         lambda: np.array([32768 / 8192, 32768**2 / 8192**2]))),
    # ---- 第8章 · Attention 与 Transformer Block ------------------------------------------------
    *_section(Section(CH8, "阶段二", "scaled dot-product attention 逐步算"),
        (N_("q·k1 and q·k2 for q = [1, 0], k1 = [1, 0], k2 = [0, 1]"),
         "1, 0", (1, 0), _EXACT, "{:.0f}", lambda: np.array([1 * 1 + 0 * 0, 1 * 0 + 0 * 1])),
        (N_("sqrt(d_k) at d_k = 2 and the scaled scores"),
         "1.41; [0.71, 0]", (1.41, 0.71, 0.0), _DECIMALS_2, "{:.4g}",
         lambda: np.array([math.sqrt(2), 1 / math.sqrt(2), 0.0])),
        (N_("softmax([0.71, 0]), the weights of the minimal example"),
         "≈ [0.67, 0.33]", (0.67, 0.33), _DECIMALS_2, "{:.4g}",
         lambda: _softmax(np.array([1 / math.sqrt(2), 0.0])), _minimal_example),
        (N_("standard deviation of q·k at d_k = 64 (the scores reach ±8)"),
         "±8", (8,), (0.5, N_("integer")), "{:.4g}", lambda: np.array([math.sqrt(64)])),
        (N_("standard deviation of q·k at d_k = 4096, and e^64"),
         "64; e^64 ≈ 6.2×10^27", (64, 6.2e27), (0.05e27, N_("2 significant figures")), "{:.4g}",
         lambda: np.array([math.sqrt(4096), math.exp(64)]))),
    Row(Section(CH8, "阶段四", "组装 Transformer Block"),
        N_("SwiGLU hidden width ≈ 8/3·D at D = 4096 (the chapter takes 11008)"),
        "约 8/3·D; 11008", (11008,), 0.5, N_("integer; the chapter says 约"),
        lambda: np.array([8 / 3 * _D]), approximation=True,
        reason=N_("8/3 x 4096 = 10922.7; 11008 is that rounded up to a multiple of 256"),
        fmt="{:.1f}", config=LLAMA2_7B.name),
    Row(Section(CH8, "阶段四", "组装 Transformer Block"),
        N_("SwiGLU parameters at D = 4096, hidden 11008, over the 4·D ReLU FFN's "
           '("完全持平": exactly equal)'),
        "完全持平 (1)", (1.0,), 0.0, N_("exact, as the chapter says 完全"),
        lambda: np.array([3 * _D * _HIDDEN / (2 * _D * 4 * _D)]),
        reason=N_("3 x 4096 x 11008 = 135,266,304 vs 2 x 4096 x 16384 = 134,217,728: 0.78% "
                  "more; exact parity needs 8/3 x 4096 = 10922.7, not an integer"),
        fmt="{:.6f}", config=LLAMA2_7B.name),
    *_section(Section(CH8, "阶段五", "位置从哪里来"),
        (N_("PE(p)·PE(p+1) at d = 32 for p = 0, 5, 10"),
         "15.313649 (x3)", (15.313649,) * 3, _DECIMALS_6, "{:.8f}",
         lambda: _pe_dots_closed(1), lambda impl: _pe_dots(impl, 1)),
        (N_("PE(p)·PE(p+5) at d = 32 for p = 0, 5, 10"),
         "11.777383 (x3)", (11.777383,) * 3, _DECIMALS_6, "{:.8f}",
         lambda: _pe_dots_closed(5), lambda impl: _pe_dots(impl, 5))),
    *_section(Section(CH8, "阶段五", "现代长上下文变体深探——滑动窗口注意力（SWA）与推理 Infra 的颠覆"),
        (N_("positions token i reaches after 2 layers of window W = 4: the chapter's "
            "[i-2W+2, i] holds 2W-1"),
         "[i-2W+2, i]: 7", (7,), _COUNT, "{:.0f}",
         lambda: np.array([2 * (4 - 1) + 1]), lambda impl: _reach(impl, 2, 4))),
    Row(Section(CH8, "阶段五", "现代长上下文变体深探——滑动窗口注意力（SWA）与推理 Infra 的颠覆"),
        N_("receptive field of L = 32 layers of window W = 4096 (the chapter: L x W)"),
        "32 x 4096 = 131,072", (131072,), *_COUNT,
        lambda: np.array([_SWA_LAYERS * (_SWA_WINDOW - 1) + 1]),
        reason=N_("each layer reaches W - 1 positions further back (the chapter's own layer 2 "
                  "is [i-2W+2, i]): L(W-1)+1 = 131,041; the contract's sliding_window_mask "
                  "stacked 2 layers deep confirms 2W-1 above"),
        fmt="{:,.0f}", config=MISTRAL_7B.name),
    *_section(Section(CH8, "本章验收", "",
                      part="用 dot_product([1,2,3], [4,5,6]) = 32 解释 attention score 的几何含义"),
        (N_("dot_product([1, 2, 3], [4, 5, 6])"),
         "32", (32,), _EXACT, "{:.0f}", lambda: np.array([1 * 4 + 2 * 5 + 3 * 6]))),
    # ---- Transformer 手撕与注意力机制 ----------------------------------------------------------
    *_section(Section(HANDS_ON, "§3.6", "完整公式一览"),
        (N_("Step 1: S = Q Kᵀ for 我, 想, 退款"),
         "[[1,1,0],[1,2,2],[1,3,4]]", (1, 1, 0, 1, 2, 2, 1, 3, 4), _EXACT, "{:.0f}",
         lambda: np.array([[q @ k for k in K3] for q in Q3])),
        (N_("Step 2: S / sqrt(2)"),
         "[[0.71,0.71,0.00],[0.71,1.41,1.41],[0.71,2.12,2.83]]",
         (0.71, 0.71, 0.0, 0.71, 1.41, 1.41, 0.71, 2.12, 2.83), _DECIMALS_2, "{:.3f}",
         lambda: _S3 / math.sqrt(2)),
        (N_("Step 4: causal softmax, rows 我 and 想"),
         "[1.00, 0.00, 0.00], [0.33, 0.67, 0.00]", (1, 0, 0, 0.33, 0.67, 0), _DECIMALS_2,
         "{:.3f}", *_step(0, slice(2))),
        (N_("Step 4: causal softmax, row 退款 (also the diagram and 关键洞察's 4%, 26%, 70%)"),
         "[0.04, 0.26, 0.70]", (0.04, 0.26, 0.70), _DECIMALS_2, "{:.4f}", *_step(0, 2),
         N_("softmax(0.71, 2.12, 2.83) = (0.07, 0.31, 0.62): 退款 puts 62% on itself, "
            "31% on 想 and 7% on 我")),
        (N_("Step 5: output[0] and output[1] = A @ V"),
         "[0.20, 0.10], [0.40, 0.23]", (0.2, 0.1, 0.4, 0.23), _DECIMALS_2, "{:.4f}",
         *_step(1, slice(2))),
        (N_("Step 5: output[2] = A @ V"),
         "≈ [0.77, 0.64]", (0.77, 0.64), _DECIMALS_2, "{:.4f}", *_step(1, 2),
         N_("with the true weights (0.07, 0.31, 0.62) the output is [0.73, 0.60]; the "
            "printed value follows from the wrong weights of step 4"))),
    *_section(Section(HANDS_ON, "§03.2", "为什么要除以 √d_k — 方差分析的严格证明"),
        (N_("sqrt(512), the standard deviation of q·k at d_k = 512"),
         "≈ 22.6", (22.6,), (0.05, N_("1 decimal")), "{:.4f}", lambda: np.array([math.sqrt(512)])),
        (N_("the experiment's printed raw_var / d_k against its scaled_var (d_k = 2 and 512)"),
         "1.0050, 1.0007", (1.0050, 1.0007), _DECIMALS_4, "{:.5f}",
         lambda: np.array([2.01 / 2, 512.37 / 512])),
        (N_("softmax([50, 1, -30])"),
         "≈ [1.0000, 0.0000, 0.0000]", (1, 0, 0), _DECIMALS_4, "{:.3g}",
         lambda: _softmax(np.array([50.0, 1.0, -30.0])),
         lambda impl: impl.softmax(np.array([50.0, 1.0, -30.0])))),
    *_section(Section(HANDS_ON, "§4.1", "为什么是下三角矩阵"),
        (N_("visible keys per row of the 5 x 5 causal visibility matrix"),
         N_("1, 2, 3, 4, 5 ones"), (1, 2, 3, 4, 5), _COUNT, "{:.0f}",
         lambda: np.arange(1, 6), lambda impl: _visible_per_position(impl, 5))),
    Row(Section(HANDS_ON, "§5.3", "参数量精确计算"),
        N_("d_k = 512 / 8; one 512 x 512 matrix; W_Q + W_K + W_V + W_O"),
        "64; 262,144; 1,048,576", (64, 262144, 1048576), *_EXACT,
        lambda: np.array([TRANSFORMER_BASE.d_model // TRANSFORMER_BASE.heads,
                          TRANSFORMER_BASE.d_model**2, 4 * TRANSFORMER_BASE.d_model**2]),
        fmt="{:,.0f}", config=TRANSFORMER_BASE.name),
    *_section(Section(HANDS_ON, "§5.5.2", "三种注意力变体对比"),
        (N_("KV cache shrink with 32 query heads: MQA (1 K/V head), GQA (8)"),
         "32x, 4x", (32, 4), _EXACT, "{:.0f}", lambda: np.array([32 / 1, 32 / 8]))),
    *_section(Section(HANDS_ON, "§6.5.2", "GLU 家族"),
        (N_("GLU FFN at d_ff = 2/3 x 4 x d_model over the 4 x d_model FFN, in parameters"),
         "总参数量不变 (1)", (1.0,), (1e-12, N_("exact (d_ff not rounded to an integer)")),
         "{:.6f}", lambda: np.array([3 * (2 / 3 * 4) / (2 * 4)]))),
    Row(Section(HANDS_ON, "§7.4", "显存开销计算"),
        N_("KV cache of Llama 2 70B at 4096 tokens: 2 x 4096 x 8 x 128 x 2 B x 80 layers, in GB"),
        "~10.7 GB", (10.7,), 0.05, N_("1 decimal, GB = 1e9 B"),
        lambda: np.array([_LLAMA_KV_BYTES / 1e9]),
        reason=N_("the product is 1,342,177,280 B = 1.34 GB (1.25 GiB); 10.7 GB is what 64 K/V "
                  "heads (no GQA) would need"),
        fmt="{:.3f}", config=LLAMA2_70B.name),
    *_section(Section(HANDS_ON, "§7.5.1", "问题：标准 attention 的 IO 瓶颈"),
        (N_("elements of the n x n attention matrix at n = 8192"),
         "6700 万", (6.7e7,), (0.05e7, N_("2 significant figures")), "{:,.0f}",
         lambda: np.array([8192**2]))),
    *_section(Section(HANDS_ON, "§7.5.3", "Online Softmax 的核心算法"),
        (N_("online softmax (one key at a time) vs standard softmax on [2, 1, 0.5, 3]: "
            "largest difference"),
         "完全一致 (0)", (0.0,), (1e-12, N_("float64 rounding, 1e-12")), "{:.1e}",
         lambda: np.array([0.0]), _online_vs_standard)),
    Row(Section(HANDS_ON, "§9.1", "投影层定义"),
        N_("Llama (4096 wide, 32 heads, 8 K/V heads): head_dim, k_proj width, repeat_kv factor"),
        "128; 1024; 4", (128, 1024, 4), *_EXACT,
        lambda: np.array([LLAMA3_8B.head_dim, LLAMA3_8B.kv_heads * LLAMA3_8B.head_dim,
                          LLAMA3_8B.heads // LLAMA3_8B.kv_heads]),
        fmt="{:.0f}", config=LLAMA3_8B.name),
    *_section(Section(HANDS_ON, "§11.2", '为什么 attention 不是"完美的全局检索"'),
        (N_("a key with weight ~0.1 among 100 keys, at 10000 keys with the same scores"),
         "~0.001", (0.001,), (0.0005, N_("1 significant figure")), "{:.5f}",
         lambda: _diluted_closed(10000), lambda impl: _diluted(impl, 10000))),
    *_section(Section(HANDS_ON, "§13.4", "参考答案要点"),
        (N_("the softmax denominator e^2 + e^1 + e^0"),
         "12.08", (12.08,), _DECIMALS_2, "{:.4f}", lambda: np.array([math.e**2 + math.e + 1]),
         None, N_("e^2 + e^1 + e^0 = 7.39 + 2.72 + 1 = 11.11")),
        (N_("softmax([2, 1, 0])"),
         "≈ 0.61, 0.22, 0.17", (0.61, 0.22, 0.17), _DECIMALS_2, "{:.4f}",
         lambda: _softmax(np.array([2.0, 1.0, 0.0])),
         lambda impl: impl.softmax(np.array([2.0, 1.0, 0.0])),
         N_("softmax([2, 1, 0]) = (0.67, 0.24, 0.09); the printed 0.17 does not even "
            "follow from 12.08 (1 / 12.08 = 0.08)")),
        (N_("d_k = 256: variance of q·k, sqrt(d_k), variance after scaling"),
         "256; 16; 1", (256, 16, 1), _EXACT, "{:.0f}",
         lambda: np.array([256 * 1 * 1, math.sqrt(256), 256 / 256])),
        (N_("parameters of multi-head attention at d_model = 2048, h = 16, no bias"),
         "16,777,216", (16777216,), _EXACT, "{:,.0f}", lambda: np.array([4 * 2048 * 2048]))),
)  # fmt: skip

# Printed numbers that cannot be recomputed from what the chapters give.
UNCHECKED: tuple[str, ...] = (
    N_(
        "not checked: 第8章 阶段五: the softmax widget's 8.5%, 23.2%, 5.2%, 63.1% at temperature 1: "
        "its logits are not printed, and logits fitted to the percentages check nothing (any "
        "distribution is the softmax of its own logarithms); the temperature lab checks that "
        "they sum to 100%"
    ),
    N_(
        "not checked: 第8章 阶段五: the attention widget's 32.6%, 33.6%, 33.8% come from toy vectors that "
        "are not printed"
    ),
    N_(
        "not checked: 第8章 阶段六: the ablation values 10.799…, 0.281…, 1.732… come from a fixture that is "
        "not given"
    ),
    N_(
        "not checked: Transformer 手撕与注意力机制 §03.2: raw_var 2.01 and 512.37 are one unseeded random "
        "draw (only their ratio to d_k is checked)"
    ),
)
