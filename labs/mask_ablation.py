"""Mask ablation: what leaks without the causal mask, and how does the loss give it away?

The course (逐部件讲透 §6.4) says pretraining feeds the whole target at once, so
without a mask position t sees t+1, "which is exactly the answer it should
predict, and the training loss falls falsely fast". 逐部件讲透 §6.13 asks for that
deliberate failure: remove the causal mask and watch the loss get suspiciously
good. 第8章's fault table (故障注入与预期信号) names two mask bugs and their
signals: adding 0 instead of -inf (future weights nonzero, the future leaks)
and the triangle written the wrong way round (the current token dominated by
its future). The course template's metric `no_mask_future_prefix_influence`
(> 1e-5) is the leak itself: perturb the future, and the prefix moves.

Here each implementation's `scaled_dot_product_attention` runs with four masks:
its own `causal_mask`, no mask, the "adds 0" bug (a mask that blocks nothing)
and the reversed triangle; every future key and value after t is perturbed and
the outputs at positions <= t are compared. Then a tiny causal language model
(one pre-norm block of the contract's design, PyTorch, float64, CPU) is trained
on i.i.d. uniform random tokens, once with each implementation's causal_mask
and once without a mask. Nothing in i.i.d. tokens is predictable, so no honest
model can beat ln V on held-out data; without the mask the next token is in the
input, and the loss falls far below ln V: the "too good" loss is the leak.
"""

from __future__ import annotations

import math

import numpy as np
from pydantic import Field, model_validator

from labctl.course import CH8, HANDS_ON, PARTS, Section
from labctl.i18n import N_, Msg, implementation
from labctl.lab import (
    HeatmapFigure,
    Lab,
    LabContext,
    LabOutput,
    LabParams,
    Metric,
    Note,
    TableFigure,
    larger,
    within_memory,
)
from labctl.memo import remember

MASKS = ("causal_mask", "no mask", "adds 0", "reversed")


class Params(LabParams):
    # attention probes, as the causal-attention lab: q, k, v of shape (B, H, T, D)
    B: int = Field(2, ge=1, le=64, description="batch size")
    H: int = Field(4, ge=1, le=64, description="heads")
    T: int = Field(8, ge=2, le=512, description="sequence length of the mask probe")
    D: int = Field(16, ge=1, le=1024, description="head width")
    perturbation: float = Field(
        1.0, gt=0, le=1e6, description="scale of the noise added to future keys and values"
    )
    # the tiny language model
    vocab: int = Field(16, ge=2, le=1024, description="vocabulary size V")
    context: int = Field(8, ge=2, le=128, description="tokens in, predicting the next ones")
    width: int = Field(32, ge=2, le=256, description="model width; heads must divide it")
    heads: int = Field(2, ge=1, le=16, description="heads of the LM")
    ffn: int = Field(64, ge=1, le=1024, description="SwiGLU hidden width")
    steps: int = Field(80, ge=1, le=5000, description="Adam steps")
    batch: int = Field(32, ge=1, le=512, description="sequences per step")
    lr: float = Field(0.01, gt=0, le=1.0, description="Adam learning rate")
    heldout: int = Field(256, ge=1, le=4096, description="held-out sequences")
    tail: int = Field(
        20, ge=1, le=5000, description="the training loss is the mean of the last `tail` steps"
    )

    @model_validator(mode="after")
    def _shapes_agree(self) -> Params:
        if self.width % self.heads:
            raise ValueError(
                Msg(
                    "heads = {heads} must divide width = {width}",
                    heads=self.heads,
                    width=self.width,
                )
            )
        if self.tail > self.steps:
            raise ValueError(
                Msg(
                    "tail = {tail} must not exceed steps = {steps}",
                    tail=self.tail,
                    steps=self.steps,
                )
            )
        # the probe holds q, k, v, their noise and copies, and both rooms' outputs and weights
        # under four masks (15 of B x H x T x D, 11 of B x H x T x T with a softmax's temporaries)
        within_memory(
            "B x H x T x (11T + 15D)", self.B * self.H * self.T * (11 * self.T + 15 * self.D)
        )
        # the language model draws every step's tokens up front, and its widest pass (a
        # training batch, or the held-out set) keeps logits, SwiGLU hidden and attention
        # weights about three times over for backward and the cross-entropy
        within_memory(
            "steps x batch x (context + 1) + 3 x max(batch, heldout) x context x "
            "(vocab + ffn + heads x context)",
            self.steps * self.batch * (self.context + 1)
            + 3
            * max(self.batch, self.heldout)
            * self.context
            * (self.vocab + self.ffn + self.heads * self.context),
        )
        return self


METRICS = (
    Metric(
        "masked_future_prefix_influence", "abs", "==0",
        N_("largest change of scaled_dot_product_attention outputs at positions <= t, with the "
        "implementation's own causal_mask, when every key and value after t is perturbed, over "
        "all t"),
        why=N_("exp(-inf) = 0 (and exp(-1e9) = 0 in float64 too), so masked keys add exact zeros "
        "and the prefix cannot move by a single bit; any change is a leak"),
        reproduce_abs=0.0, reproduce_rel=0.0,
    ),
    Metric(
        "no_mask_future_prefix_influence", "abs", ">1e-5",
        N_("the course template's metric: the same change with mask=None; every position reads the "
        "future, so the prefix must move"),
        why=N_("a unit perturbation of future keys and values moves O(1) outputs by ~0.1 to 1; an "
        "attention that blocks the future even without a mask gives exactly 0"),
    ),
    Metric(
        "mask_adds_zero_prefix_influence", "abs", ">1e-5",
        N_("the first mask bug of 第8章 · Attention 与 Transformer Block 阶段五's fault table (故障注入与预期信号) shown leaking: blocked scores get + 0 instead of -inf (here a mask "
        "that blocks nothing); the same change of the prefix"),
        why=N_("adding 0 blocks nothing, so the future leaks as without a mask (~0.1 to 1); "
        "exactly 0 means the implementation blocks keys a mask does not ask for"),
    ),
    Metric(
        "mask_reversed_future_share", "probability", ">0.5",
        N_("the second mask bug of 第8章 · Attention 与 Transformer Block 阶段五's fault table (故障注入与预期信号) shown leaking: with the triangle reversed (the past blocked, the "
        "future visible), the mean weight a query puts on its future, over queries that have one"),
        why=N_("query i then sees keys i..T-1, all but one in its future: on random scores the "
        "share is ≈0.75 for T=8 (the course: the current token is dominated by the future); a "
        "correct mask gives 0"),
    ),
    Metric(
        "masked_heldout_loss_over_lnV", "ratio", ">=0.97",
        N_("held-out cross-entropy of the tiny LM trained with the implementation's causal_mask, "
        "over ln V: on i.i.d. uniform tokens nothing is predictable"),
        why=N_("no model beats ln V on fresh uniform tokens (measured ≈1.005: a near-uniform "
        "prediction); a leaking mask lets the model read its target and drives this towards "
        "1/T ≈ 0.13 (T=8); 0.97 leaves room for the sampling error of 2048 held-out tokens"),
        reproduce_abs=0.01, reproduce_rel=0.0,
    ),
    Metric(
        "unmasked_train_loss_over_lnV", "ratio", "<=0.5",
        N_("training cross-entropy (mean of the last steps, on fresh batches) of the same LM "
        "trained without a mask, over ln V: the 'too good' loss"),
        impls=("reference",),
        why=N_("without the mask position t reads token t+1, its target, at every position but "
        "the last, so the loss falls to ≈ ln V / T (ratio ≈0.13 for T=8); an ablation that "
        "still masks stays at ≈1"),
        reproduce_abs=0.01, reproduce_rel=0.0,
    ),
    Metric(
        "mask_leak_loss_gap", "nats", ">1",
        N_("masked held-out loss minus unmasked training loss: how much too good the leaking "
        "model looks"),
        impls=("reference",),
        why=N_("the gap is at most ln V (1 - 1/T) ≈ 2.4 nats for V=16, T=8, and measured ≈2.4; "
        "more than 1 nat cannot come from fitting noise"),
        reproduce_abs=0.03, reproduce_rel=0.0,
    ),
    Metric(
        "mask_ablation_weights_max_error", "abs", "<=1e-10",
        N_("float64 clean room vs reference: weights and outputs under all four masks"),
        impls=("both",),
        why=N_("two float64 implementations of one formula differ by rounding only (~1e-15)"),
    ),
)  # fmt: skip


# ---- attention probes ---------------------------------------------------------------------


def _masks(impl, T: int) -> dict[str, np.ndarray | None]:
    return {
        "causal_mask": impl.causal_mask(T),  # (T, T), True above the diagonal
        "no mask": None,
        "adds 0": np.zeros((T, T), dtype=bool),  # + 0 where -inf belongs: nothing blocked
        "reversed": np.tril(np.ones((T, T), dtype=bool), k=-1),  # the past blocked instead
    }


def _probe(impl, q, k, v, noise_k, noise_v, mask) -> tuple[float, float, float, tuple]:
    """(future weight max, mean future share, prefix influence, (out, weights))."""
    T = q.shape[2]
    out, weights = impl.scaled_dot_product_attention(q, k, v, mask)
    future = np.triu(np.ones((T, T), dtype=bool), k=1)  # (T, T)
    future_max = float(np.max(weights[..., future]))
    share = np.sum(np.where(future, weights, 0.0), axis=-1)[..., :-1]  # (B, H, T-1)
    influence = 0.0
    for t in range(T - 1):
        k2, v2 = k.copy(), v.copy()
        k2[:, :, t + 1 :] += noise_k[:, :, t + 1 :]
        v2[:, :, t + 1 :] += noise_v[:, :, t + 1 :]
        moved, _ = impl.scaled_dot_product_attention(q, k2, v2, mask)
        influence = larger(
            influence, float(np.max(np.abs(moved[:, :, : t + 1] - out[:, :, : t + 1])))
        )
    return future_max, float(np.mean(share)), influence, (out, weights)


# ---- the tiny language model --------------------------------------------------------------


def _lm_data(rng: np.random.Generator, p: Params):
    """Initial weights (shared by every run), training batches and held-out sequences."""
    V, T, C, F = p.vocab, p.context, p.width, p.ffn

    def w(fan_in: int, *shape: int) -> np.ndarray:
        return rng.standard_normal(shape) / math.sqrt(fan_in)

    # Embeddings of standard deviation 1/√C: through the tied head the first logits have
    # unit size, so training starts near ln V and finds the leak in tens of steps; with
    # unit embeddings it starts at ≈2.5 ln V and the leak appears after 100 to 250 steps.
    init = {
        "embed": w(C, V, C),  # (V, C), tied with the output head
        "pos": w(C, T, C),  # (T, C), learned positions (GPT-2's route, 第8章 阶段五)
        "norm1": np.ones(C),
        "wq": w(C, C, C),
        "wk": w(C, C, C),
        "wv": w(C, C, C),
        "wo": w(C, C, C),
        "norm2": np.ones(C),
        "w_gate": w(C, C, F),
        "w_up": w(C, C, F),
        "w_down": w(F, F, C),
        "final_norm": np.ones(C),
    }
    batches = rng.integers(0, V, size=(p.steps, p.batch, T + 1))  # fresh tokens every step
    heldout = rng.integers(0, V, size=(p.heldout, T + 1))
    return init, batches, heldout


def _lm_logits(P, ids, blocked, n_heads: int):
    """One pre-norm block (contract 18), final RMSNorm, tied head (contract 19): (B, T, V)."""
    import torch
    import torch.nn.functional as F

    def rms(x, weight):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * weight

    B, T = ids.shape
    C = P["embed"].shape[1]
    x = P["embed"][ids] + P["pos"][:T]  # (B, T, C)
    h = rms(x, P["norm1"])
    q, k, v = (
        (h @ P[name]).view(B, T, n_heads, C // n_heads).transpose(1, 2)  # (B, H, T, D)
        for name in ("wq", "wk", "wv")
    )
    scores = q @ k.transpose(-2, -1) / math.sqrt(C // n_heads)  # (B, H, T, T)
    if blocked is not None:
        scores = scores.masked_fill(blocked, float("-inf"))  # True = blocked, as the contract
    attended = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, T, C)
    x = x + attended @ P["wo"]
    h = rms(x, P["norm2"])
    x = x + (F.silu(h @ P["w_gate"]) * (h @ P["w_up"])) @ P["w_down"]
    return rms(x, P["final_norm"]) @ P["embed"].T


class _Adam:
    """Adam (Kingma & Ba, the defaults β1 = 0.9, β2 = 0.999, ε = 1e-8), written out.

    `torch.optim.Adam` imports torch's compiler on its first step (~1.6 s, more than the
    training itself); the update is four lines.
    """

    def __init__(self, params, lr: float, betas=(0.9, 0.999), eps: float = 1e-8):
        import torch

        self.params, self.lr, self.betas, self.eps, self.t = params, lr, betas, eps, 0
        self.m = [torch.zeros_like(q) for q in params]
        self.v = [torch.zeros_like(q) for q in params]

    def step(self) -> None:
        import torch

        b1, b2 = self.betas
        self.t += 1
        with torch.no_grad():
            for q, m, v in zip(self.params, self.m, self.v, strict=True):
                m.mul_(b1).add_(q.grad, alpha=1 - b1)
                v.mul_(b2).addcmul_(q.grad, q.grad, value=1 - b2)
                m_hat = m / (1 - b1**self.t)
                v_hat = v / (1 - b2**self.t)
                q.sub_(self.lr * m_hat / (v_hat.sqrt() + self.eps))
                q.grad = None


def _train_lm(init, batches, heldout, blocked_mask, p: Params) -> tuple[float, float, list]:
    """(training loss: mean of the last `tail` steps; held-out loss; every step's loss), in nats."""
    import torch
    import torch.nn.functional as F

    P = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in init.items()}
    blocked = None if blocked_mask is None else torch.from_numpy(np.array(blocked_mask, bool))
    optimizer = _Adam(list(P.values()), p.lr)

    def loss_of(tokens):
        ids = torch.from_numpy(tokens)
        logits = _lm_logits(P, ids[:, :-1], blocked, p.heads)  # inputs: tokens 0..T-1
        return F.cross_entropy(logits.reshape(-1, p.vocab), ids[:, 1:].reshape(-1))  # targets 1..T

    losses = []
    for tokens in batches:
        loss = loss_of(tokens)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    with torch.no_grad():
        held = float(loss_of(heldout))
    return float(np.mean(losses[-p.tail :])), held, losses


def _language_models(ctx: LabContext, rng: np.random.Generator):
    """Train the LM with each implementation's causal_mask (once per distinct mask) and without."""

    p: Params = ctx.params
    init, batches, heldout = _lm_data(rng, p)
    masks = {name: np.asarray(impl.causal_mask(p.context)) for name, impl in ctx.impls.items()}
    for name, mask in masks.items():
        if mask.shape != (p.context, p.context) or mask.dtype != np.bool_:
            raise ValueError(
                f"{name} causal_mask({p.context}) returned {mask.dtype} {mask.shape}, "
                f"expected bool ({p.context}, {p.context})"
            )
    # On the CPU with the one thread the runner pins, every op here is deterministic;
    # torch.use_deterministic_algorithms would add nothing but the import of torch's
    # compiler (~1.8 s) to flip a switch that only CUDA kernels read.
    runs: dict[bytes, tuple[float, float, list]] = {}
    masked = {}

    def train(mask):
        # The same data and mask give the same run, bit for bit: one run per distinct mask,
        # and in a grading worker one per batch (`labctl.memo`), whoever's mask it is.
        parts = ("mask-ablation language model", init, batches, heldout, mask, p.model_dump())
        return remember(parts, lambda: _train_lm(init, batches, heldout, mask, p))

    for name, mask in masks.items():
        key = mask.tobytes()
        if key not in runs:
            runs[key] = train(mask)
        masked[name] = runs[key]
    unmasked = train(None) if "reference" in ctx.impls else None
    return masked, unmasked, masks


# ---- the lab ------------------------------------------------------------------------------


def run(ctx: LabContext) -> LabOutput:
    p: Params = ctx.params
    rng = np.random.default_rng(ctx.seed)
    shape = (p.B, p.H, p.T, p.D)
    q, k, v = (rng.standard_normal(shape) for _ in range(3))  # (B, H, T, D) each
    noise_k, noise_v = (rng.standard_normal(shape) * p.perturbation for _ in range(2))
    output = LabOutput()
    probes: dict[str, dict[str, tuple]] = {}
    for name, impl in ctx.impls.items():
        probes[name] = {
            label: _probe(impl, q, k, v, noise_k, noise_v, mask)
            for label, mask in _masks(impl, p.T).items()
        }
        output.add("masked_future_prefix_influence", name, probes[name]["causal_mask"][2])
        output.add("no_mask_future_prefix_influence", name, probes[name]["no mask"][2])
        output.add("mask_adds_zero_prefix_influence", name, probes[name]["adds 0"][2])
        output.add("mask_reversed_future_share", name, probes[name]["reversed"][1])
    if ctx.both:
        error = max(
            float(np.max(np.abs(a - b)))
            for label in MASKS
            for a, b in zip(
                probes["reference"][label][3], probes["clean-room"][label][3], strict=True
            )
        )
        output.add("mask_ablation_weights_max_error", "both", error)

    masked, unmasked, masks = _language_models(ctx, rng)
    ln_v = math.log(p.vocab)
    for name, (_, held, _) in masked.items():
        output.add("masked_heldout_loss_over_lnV", name, held / ln_v)
    if unmasked is not None:
        output.add("unmasked_train_loss_over_lnV", "reference", unmasked[0] / ln_v)
        output.add("mask_leak_loss_gap", "reference", masked["reference"][1] - unmasked[0])

    output.figures += _figures(p, probes, masked, unmasked, masks)
    return output


def _figures(p: Params, probes, masked, unmasked, masks) -> list:
    names = list(probes)
    shown_as = {
        "causal_mask": "causal_mask(T)",
        "no mask": N_("no mask (None)"),
        "adds 0": N_("adds 0 (第8章 bug)"),
        "reversed": N_("reversed (第8章 bug)"),
    }
    figures: list = [
        TableFigure(
            title=Msg(
                "scaled_dot_product_attention under four masks (T={T}); every key and value "
                "after t perturbed by N(0, {sd:g})",
                T=p.T,
                sd=p.perturbation,
            ),
            columns=(
                N_("mask"),
                *(Msg("max future weight ({impl})", impl=implementation(n)) for n in names),
                *(Msg("future share ({impl})", impl=implementation(n)) for n in names),
                *(Msg("prefix moved by ({impl})", impl=implementation(n)) for n in names),
            ),
            rows=tuple(
                (
                    shown_as[label],
                    *(probes[n][label][0] for n in names),
                    *(probes[n][label][1] for n in names),
                    *(probes[n][label][2] for n in names),
                )
                for label in MASKS
            ),
        ),
    ]
    positions = tuple(str(t) for t in range(p.T))
    for name in names:
        figures.append(
            HeatmapFigure(
                title=Msg(
                    "weights with the reversed triangle, batch 0, head 0 ({impl}): the future "
                    "dominates, the past is gone",
                    impl=implementation(name),
                ),
                name="reversed-mask-b0-h0",
                matrix=tuple(
                    tuple(float(x) for x in row) for row in probes[name]["reversed"][3][1][0, 0]
                ),
                impl=name,
                row_ticks=positions,
                col_ticks=positions,
            )
        )
    ln_v = math.log(p.vocab)
    same = len({m.tobytes() for m in masks.values()}) == 1
    lm_rows = []
    curves = []
    for name, (train, held, losses) in masked.items():
        label = "causal_mask" if same else Msg("{column} ({impl})", column="causal_mask", impl=name)
        lm_rows.append((label, train, held))
        curves.append((label, losses))
        if same:
            break
    if unmasked is not None:
        lm_rows.append(("no mask", *unmasked[:2]))
        curves.append(("no mask", unmasked[2]))
    figures.append(
        TableFigure(
            title=Msg(
                "tiny LM on i.i.d. uniform tokens (V={V}, T={T}, {steps} Adam steps); "
                "ln V = {ln_v:.4f} nats",
                V=p.vocab,
                T=p.context,
                steps=p.steps,
                ln_v=ln_v,
            ),
            columns=(
                N_("trained with"),
                N_("train loss"),
                N_("held-out loss"),
                N_("train / ln V"),
                N_("held-out / ln V"),
            ),
            rows=tuple(
                (label, f"{tr:.4f}", f"{ho:.4f}", f"{tr / ln_v:.3f}", f"{ho / ln_v:.3f}")
                for label, tr, ho in lm_rows
            ),
        )
    )
    figures.append(_figure_loss_curves(curves, p.steps))
    figures.append(
        Note(
            N_(
                "'adds 0' is the course's additive mask with 0 where -inf belongs; through the "
                "contract's boolean mask it is a mask that blocks nothing, so it leaks exactly as "
                "no mask does. The reversed triangle blocks the past and shows each query its "
                "future. 'future share' is the mean weight a query puts on keys after it; 'prefix "
                "moved by' is the largest change of an output at a position <= t when only keys "
                "and values after t change: it must be exactly 0."
            )
        )
    )
    if unmasked is not None and "reference" in masked:
        train, held, _ = masked["reference"]
        gap = held - unmasked[0]
        figures.append(
            Note(
                Msg(
                    "Every batch is fresh uniform noise, so the masked model cannot memorise: its losses "
                    "stay at ln V ({train:.3f} training, {held:.3f} held-out). Without the mask the "
                    "training loss falls to {unmasked_train:.3f} nats ({unmasked_ratio:.3f} ln V), "
                    "{gap:.2f} nats below, and its held-out loss ({unmasked_held:.3f}) is just as low: it "
                    "is not learning the data, it is reading the answer. Its floor is ln V / T: only the "
                    "last of the {context} positions has a target that is not in its input.",
                    train=train,
                    held=held,
                    unmasked_train=unmasked[0],
                    unmasked_ratio=unmasked[0] / ln_v,
                    gap=gap,
                    unmasked_held=unmasked[1],
                    context=p.context,
                )
            )
        )
    if not same:
        reference, room = masks.get("reference"), masks.get("clean-room")
        differ = int(np.sum(reference != room)) if reference is not None else 0
        figures.append(
            Note(
                Msg(
                    "The two implementations' causal_mask({context}) differ in {differ} of {pairs} "
                    "entries; each row of masked_heldout_loss_over_lnV is the LM trained with that "
                    "implementation's own mask.",
                    context=p.context,
                    differ=differ,
                    pairs=p.context * p.context,
                ),
                flag=True,
            )
        )
    elif len(masks) > 1:
        figures.append(
            Note(
                N_(
                    "Both implementations' causal_mask are identical, so one masked run serves both "
                    "rows of masked_heldout_loss_over_lnV."
                )
            )
        )
    return figures


def _figure_loss_curves(curves: list[tuple[str | Msg, list]], steps: int) -> TableFigure:
    """The training loss of each run, averaged over windows of steps so the table stays short."""
    window = max(1, steps // 12)
    ends = range(window, steps + 1, window)
    return TableFigure(
        title=Msg("training loss by step, mean over each window of {n} steps (nats)", n=window),
        columns=(N_("step"), *(label for label, _ in curves)),
        rows=tuple(
            (end, *(float(np.mean(losses[end - window : end])) for _, losses in curves))
            for end in ends
        ),
    )


LAB = Lab(
    id="mask-ablation",
    title=N_("Mask ablation: the leak, the two mask bugs, and the too-good loss"),
    question=N_(
        "Without a correct causal mask does the future leak into the prefix, and does "
        "a language model's loss then fall below what i.i.d. noise allows?"
    ),
    sections=(
        Section(PARTS, "§6.4", "因果遮罩为什么必须存在"),
        Section(
            PARTS, "§6.13", "动手：用断言验证注意力，而不是只看热力图", part="去掉 causal mask"
        ),
        Section(
            CH8,
            "阶段五",
            "现代长上下文变体深探——滑动窗口注意力（SWA）与推理 Infra 的颠覆",
            part="故障注入与预期信号",
        ),
        Section(CH8, "阶段六", "动手实验", part="去 mask 后 10.799…"),
        Section(HANDS_ON, "§04", "Causal Mask：为什么生成模型不能偷看未来"),
        Section(HANDS_ON, "§4.2", "Mask 在 softmax 前施加"),
    ),
    params=Params,
    metrics=METRICS,
    run=run,
)
