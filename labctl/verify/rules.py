"""The contract's rules a learner must see: what each function refuses, and its edges.

One source for what is shown and what is graded. Each `Rule` is a line of the
contract's "Bad input" section (v1's, and the list v2 adds), in the learner's
words and naming the argument; every case `labctl verify` grades
(`labctl.verify.bad_input`) carries the rule it tests, and `labctl contract
show` and the `clean-room init` stubs list a function's rules from those very
cases (`labctl.verify.bad_input.rules_of`), so a rule is shown exactly when it is graded. A case not
refused is reported with its rule quoted.

`EDGES` says what the contract's formulas give where a reader may doubt
whether an input is valid: t_q > t_k. v1's `True where j > t_k - t_q + i`
already defines a `(t_q, t_k)` mask whose first `t_q - t_k` rows (query
positions p < 0) are blocked everywhere, and its conventions give such a row
all-zero weights and output: so t_q > t_k is valid input, never refused,
wherever a function takes both lengths. The fixtures check it
(`labctl.verify.fixtures_primitives`: masks with t_q > t_k).
"""

from __future__ import annotations

from dataclasses import dataclass

from labctl.i18n import N_, Msg, declared

# What the contract's Bad input section asks a function to raise (the check takes either).
EXCEPTIONS = ("ValueError", "TypeError")


@dataclass(frozen=True)
class Rule:
    """One line of the contract's Bad input section: the input (`condition`, a message) and
    the argument the raised message should name."""

    condition: str
    argument: str

    def said(self) -> Msg:
        return Msg(
            "{condition}: raise ValueError (or TypeError) naming {argument}",
            condition=declared(self.condition),
            argument=self.argument,
        )


# -- contract v1, "Bad input" ------------------------------------------------------------

C_NOT_DIVISIBLE = Rule(
    N_("C % n_heads != 0 (the model width C does not split into n_heads heads)"), "n_heads"
)
HEADS_NOT_GROUPED = Rule(
    N_("n_heads % n_kv_heads != 0 (the query heads do not split into key/value groups)"),
    "n_kv_heads",
)
QK_HEADS_NOT_GROUPED = Rule(
    N_("q's H heads are not a multiple of k's Hkv heads (H % Hkv != 0)"), "k"
)
ODD_D_ROPE = Rule(N_("an odd head width D = x.shape[-1] (RoPE rotates pairs)"), "x")
ODD_D_MHA_ROPE = Rule(
    N_("rope_theta given with an odd head width D = C // n_heads (RoPE rotates pairs)"),
    "rope_theta",
)
BLOCK_SIZE = Rule(N_("block_size < 1"), "block_size")
WINDOW = Rule(N_("window < 1 (the window counts the current token)"), "window")
BATCH_MISMATCH = Rule(N_("q, k and v of different batch sizes B"), "k")
HEAD_WIDTH_MISMATCH = Rule(N_("k's head width D differs from q's"), "k")

# -- contract v2, "Bad input" (everything v1 lists, and these) ---------------------------

TEMPERATURE = Rule(N_("temperature <= 0"), "temperature")
SCALING = Rule(N_('scaling other than None, "linear" or "ntk"'), "scaling")
FACTOR = Rule(N_("factor < 1"), "factor")
NTK_NARROW = Rule(N_('scaling="ntk" with a head width D < 4, where D / (D - 2) is undefined'), "x")
ROPE_POSITIONS = Rule(
    N_("positions of neither shape (T,) nor (B, T) with B matching x"), "positions"
)
POSITIONS = Rule(N_("positions of the wrong shape (not (T,) or (B, T))"), "positions")
# attention_decode's positions are the new tokens' own, one per row of x
DECODE_POSITIONS = Rule(N_("positions of the wrong shape (not (Tn,) or (B, Tn))"), "positions")
POSITIONAL = Rule(
    N_('positional other than "sinusoidal", "rope", "none", "learned" or "alibi"'),
    "positional",
)
LEARNED_NO_TABLE = Rule(N_('positional="learned" without params["pos_embed"]'), "params")
LEARNED_TOO_LONG = Rule(
    N_('positional="learned" with T longer than the Tmax rows of pos_embed'), "token_ids"
)
LM_HEAD = Rule(N_('params["lm_head"] not of shape (C, V)'), "lm_head")
ALIBI_HEADS = Rule(N_("n_heads < 1"), "n_heads")
LEARNED_RANGE = Rule(N_("a position < 0 or >= Tmax (outside the table)"), "positions")
APPROXIMATE = Rule(N_('approximate other than "none" or "tanh"'), "approximate")
W_UP = Rule(N_("w_up not of w_gate's shape (C, F)"), "w_up")
W_DOWN = Rule(N_("w_down not of shape (F, C)"), "w_down")
NEGATIVE_WEIGHT = Rule(N_("a negative weight"), "weights")
AXIS = Rule(N_("axis out of range for weights"), "axis")


# -- t_q > t_k: what the formulas give ---------------------------------------------------

_MASK_EDGE = N_(
    "t_q > t_k is valid, never refused: query row i sits at p = t_k - t_q + i, so the first "
    "t_q - t_k rows (p < 0) see no key and are True (blocked) everywhere; the shape stays "
    "(t_q, t_k)"
)
EDGES: dict[str, str] = {
    "causal_mask": _MASK_EDGE,
    "sliding_window_mask": _MASK_EDGE,
    "scaled_dot_product_attention": N_(
        "Tq > Tk is valid: a query row whose keys the mask blocks everywhere (the first "
        "Tq - Tk rows of causal_mask(Tq, Tk)) gets all-zero weights and an all-zero output, "
        "never NaN"
    ),
    "tiled_attention": N_(
        "Tq > Tk is valid: with causal=True the first Tq - Tk queries see no key and get an "
        "all-zero output, never NaN"
    ),
    "multi_head_attention": N_(
        "queries and keys are the same T tokens (Tq = Tk), so t_q > t_k cannot occur"
    ),
    "attention_decode": N_(
        "the Tn new tokens attend the cache and themselves (Tk = Tp + Tn >= Tn), so Tq > Tk "
        "cannot occur"
    ),
    "alibi_bias": N_(
        "t_q > t_k is valid, never refused: p_i = t_k - t_q + i is negative for the first "
        "t_q - t_k rows, and the formula gives their entries as for any other row; the shape "
        "stays (H, t_q, t_k)"
    ),
}


def edge_of(function: str, contract: int = 1) -> str | None:
    """What t_q > t_k means for `function`, where it takes both lengths (None elsewhere)."""
    if function == "alibi_bias" and contract < 2:
        return None
    return EDGES.get(function)
