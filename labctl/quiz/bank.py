"""The questions, section by section, each with the computation that answers it.

A checkable question's `solve` computes its answer when it is graded, with the
PyTorch reference (`labctl.reference`, as the labs drive it) and the labs' own
helpers; nothing here is a typed answer. `why` says where the answer comes from,
in the course's terms; where a chapter prints a different answer, it says so. A
prose question has no `solve`: `contains` lists what a right answer must say and
`lab` names the lab that demonstrates it.

Imports of torch and of the labs happen inside the solvers: listing the questions
imports nothing heavy.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from labctl.course import CH8, HANDS_ON, PARTS, Section
from labctl.i18n import N_, Msg

KINDS = ("number", "numbers", "shape", "shapes", "choice", "prose")

# The self-checks (`--section`), each a section of the course; a question's section is its group's.
GROUPS = {
    "parts-6.13": Section(PARTS, "§6.13", "动手：用断言验证注意力，而不是只看热力图"),
    "ch8-checklist": Section(CH8, "本章验收", "", part="自查清单全部能答"),
    "ch8-closed-book": Section(CH8, "本章验收", "", part="不看资料，完成这五道闭卷解释题"),
    "hands-on-13.1": Section(HANDS_ON, "§13.1", "手算题"),
    "hands-on-13.3": Section(HANDS_ON, "§13.3", "口头复述题"),
    "hands-on-13.5": Section(HANDS_ON, "§13.5", "自测标准"),
}


@dataclass(frozen=True)
class Question:
    """One question. `group` is the self-check it belongs to (`--section`); `tolerance` is
    the absolute slack per number (half a unit of the rounding asked for; 0 for counts)."""

    id: str
    group: str
    asks: str | Msg
    kind: str
    solve: Callable[[], Any] | None = None
    hint: str | Msg = ""
    why: str | Msg = ""
    tolerance: float = 0.0
    choices: tuple[tuple[str, str | Msg], ...] = ()
    contains: tuple[str | Msg, ...] = ()
    lab: str = ""

    def __post_init__(self) -> None:
        if self.group not in GROUPS:
            raise ValueError(f"question {self.id}: unknown group {self.group!r}")
        if self.kind not in KINDS:
            raise ValueError(f"question {self.id}: unknown kind {self.kind!r}")
        if (self.kind == "prose") != (self.solve is None):
            raise ValueError(f"question {self.id}: a prose question, and only one, has no solve")
        if self.kind == "choice" and not self.choices:
            raise ValueError(f"question {self.id}: a choice question needs choices")

    @property
    def section(self) -> Section:
        return GROUPS[self.group]

    @property
    def graded(self) -> bool:
        return self.kind != "prose"


# ---- solvers: the reference and the labs' own code ---------------------------------------


def _reference():
    from labctl import reference

    return reference


def _qkv(B: int, H: int, T: int, D: int, seed: int = 0) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal((B, H, T, D)) for _ in range(3))  # (B, H, T, D) each


def _causal_weights(B=2, H=4, T=8, D=16) -> np.ndarray:
    ref = _reference()
    q, k, v = _qkv(B, H, T, D)
    return np.asarray(ref.scaled_dot_product_attention(q, k, v, ref.causal_mask(T))[1])


def scores_shape() -> tuple[int, ...]:
    return tuple(_causal_weights().shape)


def row_sum() -> float:
    """The largest row sum's distance from 1 is rounding: the sum itself, every row."""
    sums = _causal_weights().sum(axis=-1)
    return float(sums.flat[int(np.argmax(np.abs(sums - 1)))])


def unscaled_top_weight_trend() -> str:
    """Mean largest softmax weight of unscaled scores (scale 1) at D = 16 and D = 256."""
    ref = _reference()
    tops = []
    for D in (16, 256):
        q, k, v = _qkv(1, 4, 16, D, seed=1)
        weights = np.asarray(ref.scaled_dot_product_attention(q, k, v, None, 1.0)[1])
        tops.append(float(np.mean(weights.max(axis=-1))))
    return (
        "rises" if tops[1] > tops[0] + 0.05 else ("falls" if tops[1] < tops[0] - 0.05 else "same")
    )


SHAPE_FAULTS = ("split", "transpose", "mask", "concat")
WRONG_SCORES = (2, 8, 4, 4)


def _scores_with(fault: str | None, B=2, H=4, T=8, D=16) -> tuple[int, ...] | None:
    """The scores' shape when one step is written wrong: after the mask where it broadcasts,
    else as the matmul made them; None where the matmul itself raises."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((B, T, H * D))  # (B, T, C)
    heads = x.reshape(B, T, H, D)  # view(B, T, H, D)
    q = heads if fault == "split" else heads.transpose(0, 2, 1, 3)  # (B, H, T, D)
    try:
        scores = q @ (q if fault == "transpose" else np.swapaxes(q, -1, -2))
    except ValueError:
        return None
    mask = np.triu(np.ones((T, 1) if fault == "mask" else (T, T), dtype=bool), k=1)
    with contextlib.suppress(ValueError):  # a mask that does not broadcast: the matmul's shape
        scores = np.where(mask, -np.inf, scores)
    return tuple(scores.shape)  # a concat fault comes after the scores: they stay right


def located_fault() -> str:
    """The step whose fault gives scores of shape WRONG_SCORES."""
    found = [f for f in SHAPE_FAULTS if _scores_with(f) == WRONG_SCORES]
    return found[0] if len(found) == 1 else "?"


def query_axis() -> int:
    """The score axis the softmax runs across is the key axis; the other T axis is the query."""
    weights = _causal_weights()
    key_axes = [a for a in (2, 3) if np.allclose(weights.sum(axis=a), 1.0, rtol=0, atol=1e-12)]
    return ({2, 3} - set(key_axes)).pop() if len(key_axes) == 1 else -1


def reach(layers: int, window: int) -> int:
    """Positions the last token reaches through stacked windowed layers, from the reference's
    sliding_window_mask (worked-examples' computation)."""
    ref = _reference()
    T = layers * window + 2
    sees = (~np.asarray(ref.sliding_window_mask(T, window))).astype(np.int64)  # (T, T)
    return int(np.count_nonzero(np.linalg.matrix_power(sees, layers)[-1]))


def reach_large(layers: int, window: int) -> int:
    """L(W-1)+1, which the masks confirm at every small L and W before it is used."""
    for L in (1, 2, 3):
        for W in (1, 2, 4, 5):
            if reach(L, W) != L * (W - 1) + 1:
                raise RuntimeError("the receptive field is not L(W-1)+1 at a small size")
    return layers * (window - 1) + 1


def split_chain() -> tuple[tuple[int, ...], ...]:
    """(B, T, D) = (2, 8, 64), H = 4: after view, after transpose, the scores, after concat."""
    ref = _reference()
    B, T, C, H = 2, 8, 64, 4
    x = np.random.default_rng(0).standard_normal((B, T, C))
    viewed = x.reshape(B, T, H, C // H)
    q = np.asarray(ref.split_heads(x, H))  # (B, H, T, d_head)
    out, weights = ref.scaled_dot_product_attention(q, q, q, ref.causal_mask(T))
    merged = np.asarray(ref.merge_heads(np.asarray(out)))
    return viewed.shape, q.shape, np.asarray(weights).shape, merged.shape


def dot_product() -> float:
    return float(np.dot([1.0, 2.0, 3.0], [4.0, 5.0, 6.0]))


def score_sd(d_k: int) -> float:
    """sqrt(Var(q·k)) = sqrt(Σ Var(q_i) Var(k_i)) for unit-variance q, k (手撕 §03.2)."""
    return math.sqrt(sum(1.0 * 1.0 for _ in range(d_k)))


def unscaled_gradient() -> str:
    """The scale-ablation lab's gradient measure, ‖diag(p) - p pᵀ‖_F averaged over rows of 16
    keys, without the scale over with it, at d_k = 64 (the reference's weights)."""
    from labctl.labs.scale_ablation import _sharpness

    ref = _reference()
    q, k, v = _qkv(64, 1, 16, 64, seed=2)
    scaled = _sharpness(np.asarray(ref.scaled_dot_product_attention(q, k, v)[1]))[2]
    raw = _sharpness(np.asarray(ref.scaled_dot_product_attention(q, k, v, None, 1.0)[1]))[2]
    shrink = raw / scaled
    return "shrinks" if shrink <= 0.8 else ("grows" if shrink >= 1.25 else "unchanged")


def softmax_210() -> list[float]:
    return [float(x) for x in _reference().softmax(np.array([2.0, 1.0, 0.0]))]


def largest_of_210() -> str:
    return str(int(np.argmax(softmax_210())) + 1)


def masked_takes_part() -> str:
    """Weight a query before position 3 puts on it under the causal mask (1-based 3 = index 2)."""
    weights = _causal_weights(1, 1, 3, 4)
    return "no" if float(np.max(weights[0, 0, :2, 2])) == 0.0 else "yes"


def variance_256() -> list[float]:
    return [score_sd(256) ** 2, (score_sd(256) / math.sqrt(256)) ** 2]


def attention_params(C: int, H: int, Hkv: int) -> int:
    from labctl.labs.gqa import _figure_attention_params

    return _figure_attention_params(C, H, Hkv)


def llama_cache_bytes() -> int:
    from labctl.labs.gqa import _llama_cache_bytes

    return _llama_cache_bytes(_reference())[0]


# ---- the questions ------------------------------------------------------------------------

_SHAPE = N_("a shape, e.g. (1, 2, 3)")
_INT = N_("a whole number")

QUESTIONS: tuple[Question, ...] = (
    # 逐部件讲透 §6.13: the kept assertions, the two deliberate failures, the acceptance
    Question("scores-shape", "parts-6.13",
        N_("Q, K, V have shape [B, H, T, D] = [2, 4, 8, 16]. What is scores.shape, the shape "
           "the first kept assertion checks?"),
        "shape", scores_shape, hint=_SHAPE,
        why=N_("scores[b, h, i, j] is query i against key j: (batch, heads, sequence, "
               "sequence); computed by the reference's scaled_dot_product_attention"),
        lab="causal-attention"),
    Question("row-sum", "parts-6.13",
        N_("What does weights.sum(dim=-1) equal for every query, as the second kept assertion "
           "says?"),
        "number", row_sum, hint=N_("a number"), tolerance=1e-6,
        why=N_("softmax over the keys makes each row a distribution: its weights sum to 1 "
               "(the worst row of the reference's weights, to rounding)"),
        lab="causal-attention"),
    Question("no-scale-top-weight", "parts-6.13",
        N_("Remove the division by sqrt(D). As the head width D grows from 16 to 256, does "
           "the softmax's largest weight rise, fall or stay the same?"),
        "choice", unscaled_top_weight_trend,
        choices=(("rises", N_("rises")), ("falls", N_("falls")), ("same", N_("stays the same"))),
        why=N_("unscaled scores have standard deviation sqrt(D): the largest one takes more of "
               "the softmax as D grows, towards one-hot (measured with the reference at D = 16 "
               "and 256, scale 1)"),
        lab="scale-ablation"),
    Question("no-mask-loss", "parts-6.13",
        N_("Remove the causal mask and train: what happens to the training loss, and why is "
           "it not good news?"),
        "prose",
        contains=(
            N_("the loss falls abnormally fast and low (below what the data allows, ln V on "
               "random tokens)"),
            N_("position t reads t+1, the very token it must predict: the label leaks in"),
            N_("the model learns nothing it can use at generation time, when the future is "
               "not there"),
        ),
        lab="mask-ablation"),
    Question("locate-shape-fault", "parts-6.13",
        Msg("B = 2, H = 4, T = 8, D = 16: scores came out with shape {wrong} instead of "
            "(2, 4, 8, 8). Which step went wrong: the head split, the matrix transpose, the "
            "mask broadcast or the output concat?", wrong=WRONG_SCORES),
        "choice", located_fault,
        choices=(("split", N_("head split")), ("transpose", N_("matrix transpose")),
                 ("mask", N_("mask broadcast")), ("concat", N_("output concat"))),
        why=N_("each step written wrong in turn: only the split without transpose(1, 2) "
               "leaves the heads on axis 2, so the scores pair heads instead of positions"),
        lab="multi-head"),
    # 第8章 本章验收: 自查清单
    Question("query-axis", "ch8-checklist",
        N_("score has shape (B, H, T, T). Which axis, counting from 0, is the query axis?"),
        "number", query_axis, hint=_INT,
        why=N_("softmax runs across the keys, so the key axis is the one whose weights sum "
               "to 1 (axis 3, found on the reference's weights); the other T axis, 2, is the "
               "query: 第8章 阶段二's table says the third axis is the query"),
        lab="causal-attention"),
    Question("future-invisible", "ch8-checklist",
        N_("Move the query along the sentence: why is every token after it invisible to it?"),
        "prose",
        contains=(
            N_("the mask sets the scores of keys j > i to -inf before the softmax"),
            N_("exp(-inf) = 0: their weights are exactly zero, not small"),
            N_("so changing a future token cannot move the query's output"),
        ),
        lab="causal-attention"),
    Question("residual-and-mask", "ch8-checklist",
        N_("What problem does the residual connection solve, and what does the mask solve?"),
        "prose",
        contains=(
            N_("residual: a direct path, x + sublayer(x), so information and the gradient "
               "pass through deep stacks (the identity term)"),
            N_("mask: a position cannot read the tokens after it, so training cannot cheat "
               "with the answer"),
        ),
        lab="residual-ablation"),
    Question("swa-reach-small", "ch8-checklist",
        N_("A sliding window of W = 4 keys (the current token included), stacked L = 2 "
           "layers: how many positions can the last token reach?"),
        "number", lambda: reach(2, 4), hint=_INT,
        why=N_("each layer reaches W - 1 positions further back: L(W - 1) + 1 = 7, counted "
               "by composing the reference's sliding_window_mask twice (the chapter's own "
               "[i-2W+2, i])"),
        lab="sliding-window"),
    # 第8章 本章验收: 闭卷题
    Question("split-chain", "ch8-closed-book",
        N_("From (B, T, D) = (2, 8, 64) with H = 4: the shape after view(B, T, H, d_head), "
           "after transpose(1, 2), of the scores, and after the concat. Give four shapes "
           "separated by ';'."),
        "shapes", split_chain, hint=N_("shapes separated by ';', e.g. (1, 2); (3, 4)"),
        why=N_("d_head = D / H = 16; the transpose moves H before T so matmul runs per head; "
               "computed with the reference's split_heads, attention and merge_heads"),
        lab="multi-head"),
    Question("why-transpose", "ch8-closed-book",
        N_("Why must transpose(1, 2) come before the matmul, and what does 1/sqrt(d_k) do?"),
        "prose",
        contains=(
            N_("matmul works on the last two axes only; moving H into the batch prefix lets "
               "every head do its own [T, d_k] @ [d_k, T]"),
            N_("1/sqrt(d_k) brings the scores' variance from d_k back to 1, so the softmax "
               "does not saturate"),
        ),
        lab="multi-head"),
    Question("necessary-not-sufficient", "ch8-closed-book",
        N_("What do the causal mask, the residual, the normalization and the FFN each solve, "
           "and why is 'a future perturbation does not change the prefix' necessary but not "
           "sufficient evidence of a right implementation?"),
        "prose",
        contains=(
            N_("mask: no reading of the future; residual: a direct path for information and "
               "gradient; normalization: a stable scale of each position's activations; FFN: "
               "per-token processing"),
            N_("not sufficient: a wrong scale, a mixed-up head split or an attention that "
               "ignores the past also leave the prefix unchanged; parity with a reference is "
               "needed too"),
        ),
        lab="mask-ablation"),
    Question("dot-product", "ch8-closed-book",
        N_("What is dot_product([1, 2, 3], [4, 5, 6])?"),
        "number", dot_product, hint=_INT,
        why=N_("1·4 + 2·5 + 3·6 = 32: the larger the dot product, the more the two vectors "
               "point the same way, and the higher the attention score"),
        lab="worked-examples"),
    Question("dk64-typical", "ch8-closed-book",
        N_("At d_k = 64, about how large (one standard deviation) is the dot product of two "
           "random vectors with unit-variance entries?"),
        "number", lambda: score_sd(64), hint=N_("a number, to the nearest whole number"),
        tolerance=0.5,
        why=N_("Var(q·k) = Σ Var(q_i) Var(k_i) = d_k, so the scores reach about "
               "±sqrt(64) = ±8 (第8章 阶段二)"),
        lab="scale-ablation"),
    Question("dk64-gradient", "ch8-closed-book",
        N_("Without the scaling, at d_k = 64, what happens to the softmax's gradient: does it "
           "shrink towards zero, grow, or stay unchanged?"),
        "choice", unscaled_gradient,
        choices=(("shrinks", N_("shrinks towards zero")), ("grows", N_("grows")),
                 ("unchanged", N_("stays unchanged"))),
        why=N_("scores of spread 8 push the softmax towards one-hot, where p_i(δ_ij - p_j) is "
               "near 0: the scale-ablation lab's measure ‖diag(p) - p pᵀ‖_F, computed here on "
               "the reference's weights with and without the scale, falls, and keeps falling "
               "as d_k grows (the vanishing gradient)"),
        lab="scale-ablation"),
    Question("swa-reach-large", "ch8-closed-book",
        N_("L = 32 layers of sliding windows of W = 4096 keys: how many positions can the "
           "last token reach?"),
        "number", lambda: reach_large(32, 4096), hint=_INT,
        why=N_("L(W - 1) + 1 = 131,041, the formula the reference's masks confirm at small "
               "sizes; the chapter's L x W = 131,072 counts the current token once per layer"),
        lab="sliding-window"),
    Question("swa-rdma", "ch8-closed-book",
        N_("Why does a sliding window cap the KV cache a prefill worker sends to a decode "
           "worker at O(W) instead of O(S)?"),
        "prose",
        contains=(
            N_("a query never reads keys more than W - 1 positions back, so older K/V rows "
               "can be dropped"),
            N_("each layer keeps at most W rows of K and V whatever the length S, so that is "
               "all there is to send"),
        ),
        lab="sliding-window"),
    # 手撕 §13.1 手算题
    Question("softmax-2-1-0", "hands-on-13.1",
        N_("A query's scores against 3 keys are [2, 1, 0]. Their softmax weights, to two "
           "decimals?"),
        "numbers", softmax_210, hint=N_("three numbers separated by commas"), tolerance=0.005,
        why=N_("e^2, e^1, e^0 over their sum 11.11 (the reference's softmax); §13.4 prints "
               "0.61, 0.22, 0.17 from a wrong sum, 12.08"),
        lab="worked-examples"),
    Question("softmax-largest", "hands-on-13.1",
        N_("Of those three keys, which one gets the largest weight (1, 2 or 3)?"),
        "choice", largest_of_210, choices=(("1", "1"), ("2", "2"), ("3", "3")),
        why=N_("softmax keeps the order of the scores: the highest score, 2, the first key"),
        lab="worked-examples"),
    Question("masked-takes-part", "hands-on-13.1",
        N_("If the third position is masked by the causal mask, does it still take part in "
           "this round of attention (yes or no)?"),
        "choice", masked_takes_part, choices=(("yes", N_("yes")), ("no", N_("no"))),
        why=N_("its score is set to -inf before the softmax and exp(-inf) = 0: the earlier "
               "queries put exactly zero weight on it (the reference's weights)"),
        lab="causal-attention"),
    Question("multi-turn", "hands-on-13.1",
        N_("Why do the later turns of a conversation sway the current output more?"),
        "prose",
        contains=(
            N_("they are closer: a smaller relative distance for RoPE (and less ALiBi "
               "penalty)"),
            N_("under the causal mask later tokens have read all the earlier ones"),
            N_("in generation the newest tokens are the very context of the next step"),
        ),
        lab="alibi"),
    Question("dk256-variance", "hands-on-13.1",
        N_("At d_k = 256, the variance of the dot products of Q·Kᵀ, and the variance after "
           "dividing by sqrt(d_k)?"),
        "numbers", variance_256, hint=N_("two numbers separated by commas"), tolerance=1e-9,
        why=N_("Var(q·k) = d_k = 256 for unit-variance entries; dividing by sqrt(256) = 16 "
               "divides the variance by 256: 1"),
        lab="scale-ablation"),
    Question("mha-params", "hands-on-13.1",
        N_("A multi-head attention layer with d_model = 2048 and h = 16 heads, no bias: how "
           "many parameters in all?"),
        "number", lambda: attention_params(2048, 16, 16), hint=_INT,
        why=N_("W_Q, W_K, W_V and W_O are each 2048 x 2048 whatever h is: 4 x 2048² = "
               "16,777,216 (counted from the contract's weight shapes by the gqa lab)"),
        lab="gqa"),
    # 手撕 §13.3 口头复述题
    Question("retell", "hands-on-13.3",
        N_("In five minutes, without notes: from a token to the next token, every step."),
        "prose",
        contains=(
            N_("token → embedding + position → Q/K/V projections → scaled dot product → "
               "causal mask → softmax → weighted sum of V → heads concatenated → FFN → "
               "residual + norm → logits → the next token"),
            N_("the shape at each step, (B, T, C) to (B, H, T, D) and back, and (B, T, V) at "
               "the logits"),
        ),
        lab="handson-decoder"),
    # 手撕 §13.5 自测标准
    Question("gqa-params", "hands-on-13.5",
        N_("Attention parameters of a Llama layer of §9.1: d_model = 4096, 32 query heads, "
           "8 K/V heads of width 128, no bias?"),
        "number", lambda: attention_params(4096, 32, 8), hint=_INT,
        why=N_("W_Q and W_O are 4096 x 4096, W_K and W_V 4096 x 1024 (8 heads x 128): "
               "41,943,040, counted from the contract's weight shapes by the gqa lab"),
        lab="gqa"),
    Question("kv-cache-bytes", "hands-on-13.5",
        N_("The KV cache of Llama 2 70B (80 layers, 8 K/V heads of width 128) at 4,096 tokens "
           "in fp16: how many bytes?"),
        "number", llama_cache_bytes, hint=_INT,
        why=N_("2 (K and V) x 4096 x 8 x 128 x 2 bytes x 80 = 1,342,177,280 B, 1.34 GB, "
               "measured from the cache the reference's attention_decode returns; §7.4 "
               "prints 10.7 GB, what 64 K/V heads (no GQA) would need"),
        lab="gqa"),
    Question("kv-cache-why", "hands-on-13.5",
        N_("Why does a KV cache speed up decoding, and why is Q not cached?"),
        "prose",
        contains=(
            N_("the K and V of earlier tokens do not change, so each step computes only the "
               "new token's and reads the rest"),
            N_("only the newest query is needed at each step; earlier queries are never used "
               "again"),
        ),
        lab="kv-cache"),
)  # fmt: skip


def by_id(question_id: str) -> Question | None:
    return next((q for q in QUESTIONS if q.id == question_id), None)
