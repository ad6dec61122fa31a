"""Whose fault a failure is: the function's own, or a function it called on that fixture.

A failing function's failure is sent to another contract function only when
the record of its calls (`labctl.verify.calls`) shows that function reached on
the fixtures that fail, and failing the same kind of check there, on the
inputs it actually received, against the reference run here: a raise the
reference does not make, a wrong dtype, a wrong shape, values off (which is
also how a mask that lets the future in, or a NaN, shows on its inputs).
Every failing check of the function must be explained so, else the failure is
its own, and is said in words: what goes wrong, and where the float64 or the
float32 rounding comes from when that is the fault. A function the failing
call never reached is never named.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from labctl import contract
from labctl.i18n import Msg, declared, joined
from labctl.verify import fixtures as fx
from labctl.verify import relation
from labctl.verify.bad_input import bad_cases
from labctl.verify.calls import FLOAT32_ROUNDING, Call, relative_error
from labctl.verify.check_base import CheckResult
from labctl.verify.compare import compare, elements, parity_tolerance, structure_problem
from labctl.verify.observe import FunctionRun, Outcome, RoomObservation

OTHER_KIND = "dtype-kind"
STUB = "stub"
# Checks whose failure a called function can explain, and the kinds of its own failure
# (on the inputs it received) that explain each.
EXPLAINS: dict[str, frozenset[str]] = {
    # A raise is explained by a called function's raise, or by its output of another dtype
    # kind than the contract's (a float mask that the caller then combines with `|`).
    "runs": frozenset({"runs", OTHER_KIND}),
    "shape": frozenset({"shape"}),
    "dtype": frozenset({"dtype"}),
    # A call that writes into an array it was given (right values, "pure" on its inputs)
    # changes what its caller then reads: the caller's values, and its own purity, break.
    "parity": frozenset({"parity", "shape", "pure"}),
    "finite": frozenset({"parity", "shape"}),
    "rows-sum": frozenset({"parity", "shape"}),
    "causal": frozenset({"parity", "shape", "pure"}),
    "pure": frozenset({"pure"}),
    # A bad input that meets, in a function it calls, a stub (RoPE left unwritten under an MHA
    # given an odd D), a raise on inputs the reference takes (an RMSNorm that exits before the
    # block's own check of C % n_heads), or the same bad input not refused there (the block
    # under the decoder): the callee's to write, not the caller's to check.
    "bad-input": frozenset({STUB, "runs", "bad-input"}),
}
# Checks no called function can explain, that a function's own failure says in words.
OWN_ONLY = ("memory",)
# The checks `said_own` has words for.
SAYS = frozenset(
    {
        "runs",
        "shape",
        "dtype",
        "parity",
        "finite",
        "rows-sum",
        "causal",
        "pure",
        "bad-input",
        "memory",
    }
)
# How a bad input's call ended when it is no failure: refused as asked, or never made.
_REFUSED = ("refused", "skipped")
# The kind of per-fixture failure each check is read from.
_SHOWN_AS = {"finite": "parity", "rows-sum": "parity"}

_SAID = {
    "shape": Msg("its output has the wrong shape"),
    "parity": Msg("its values differ from the reference"),
    "finite": Msg("its output holds NaN or inf"),
    "rows-sum": Msg("its attention weights do not sum to 1 over each row"),
    "causal": Msg(
        "the future leaks: an earlier output changes when a later token changes: apply the "
        "causal mask, so that each position sees only itself and the positions before it"
    ),
}


# Phrases that say a check failed and nothing more (beside a fault named, they add nothing).
GENERIC = tuple(_SAID.values())


def own_kinds(function: str, fixture: fx.Fixture, outcome: Outcome, probe: bool) -> set[str]:
    """What is wrong with one call of the function itself, compared with the reference."""
    if outcome.kind in ("exception", "not-implemented", "crash", "timeout"):
        return {"runs"}
    if outcome.kind != "value":
        return set()
    expected = fx.reference_output(fixture)
    if structure_problem(function, outcome.value, expected):
        return {"shape"}
    pairs = list(zip(elements(outcome.value), elements(expected), strict=True))
    kinds = {"dtype"} if any(x.dtype != r.dtype for x, r in pairs) else set()
    if not probe and not all(compare(x, r, parity_tolerance(r)).ok for x, r in pairs):
        kinds.add("parity")
    return kinds


def _traced(function: str, run: FunctionRun, check: str) -> list[tuple[fx.Fixture | None, Outcome]]:
    """The calls of `function` on which `check` fails, with their fixtures (None for a bad
    input's case)."""
    if check == "causal":
        return [(f, run.causal[t]) for t, f in fx.causal_variants(function, run.seed)]
    if check == "bad-input":
        return [(None, o) for o in run.bad.values() if o.bad_input_class() not in _REFUSED]
    if check == "pure":
        return [(f, o) for f, o in _calls(function, run) if o.ok and o.mutated]
    kind = _SHOWN_AS.get(check, check)
    found = []
    for probe, fixtures, outcomes in (
        (False, fx.fixtures(function, run.seed, run.contract), run.fixtures),
        (True, fx.probes(function, run.seed, run.contract), run.probes),
    ):
        for fixture in fixtures:
            outcome = outcomes.get(fixture.name)
            if outcome is not None and kind in own_kinds(function, fixture, outcome, probe):
                found.append((fixture, outcome))
    return found


def _calls(function: str, run: FunctionRun) -> list[tuple[fx.Fixture, Outcome]]:
    """Every call made of `function` with its fixture: fixtures, probes, causal variants."""
    found = [
        (f, run.causal[t]) for t, f in fx.causal_variants(function, run.seed) if t in run.causal
    ]
    for fixtures, outcomes in (
        (fx.fixtures(function, run.seed, run.contract), run.fixtures),
        (fx.probes(function, run.seed, run.contract), run.probes),
    ):
        found += [(f, outcomes[f.name]) for f in fixtures if f.name in outcomes]
    return found


def culprit(outcome: Outcome, kinds: frozenset[str], function: str) -> Call | None:
    """The first call `function` made itself that fails one of `kinds` on its inputs. A call
    of `function` itself (recursion) is no other function's failure: "softmax fails because
    softmax fails" said nothing of a softmax that calls itself until the stack runs out."""
    return next(
        (c for c in outcome.calls if c.depth == 1 and c.function != function and _fails(c, kinds)),
        None,
    )


def _fails(call: Call, kinds: frozenset[str]) -> bool:
    if STUB in kinds and call.raised == "NotImplementedError":
        return True
    judged = call.judged
    return judged.kind in kinds or (OTHER_KIND in kinds and judged.other_kind)


@dataclass(frozen=True)
class Explained:
    """A failing function's checks, split into those a called function explains and the rest."""

    by: tuple[Call, ...]  # the calls that explain, the first one first
    own: tuple[str, ...]  # the failing checks nothing it called explains


def explain(function: str, run: FunctionRun, failed: list[str]) -> Explained:
    by: list[Call] = []
    own: list[str] = []
    for check in failed:
        if check not in EXPLAINS:
            continue
        traced = _traced(function, run, check)
        found = [culprit(o, EXPLAINS[check], function) for _, o in traced]
        if check == "causal":
            found = [c for c in found if c is not None][:1]
        if found and all(c is not None for c in found):
            by.extend(c for c in found if c not in by)
        else:
            own.append(check)
    return Explained(tuple(by), tuple(own))


def blamed(seen: RoomObservation, results: list[CheckResult], function: str) -> Call | None:
    """The call a failing `function`'s every failure is sent to, or None (its own)."""
    run = seen.runs.get(function)
    if run is None:
        return None
    # Not run at all, as built from a function that hung: that function is the cause.
    hung = next((o.skipped_for for o in run.outcomes() if o.skipped_for), None)
    if hung is not None:
        return Call(hung, 1, (), {}, raised="timeout")
    failed = [r.name for r in results if r.function == function and r.failed]
    if not any(name in EXPLAINS for name in failed):
        return None
    found = explain(function, run, failed)
    return found.by[0] if found.by and not found.own else None


def blamed_too(seen: RoomObservation, results: list[CheckResult], function: str) -> list[Call]:
    """The other functions a failing `function`'s failures are sent to, besides `blamed`'s
    (one call each): where two of the functions it calls fail, both."""
    run = seen.runs.get(function)
    first = blamed(seen, results, function)
    if run is None or first is None or first.raised == "timeout":
        return []
    failed = [r.name for r in results if r.function == function and r.failed]
    others: list[Call] = []
    for check in failed:
        if check not in EXPLAINS:
            continue
        for _, outcome in _traced(function, run, check):
            for call in outcome.calls:
                known = call.function in (first.function, function) or any(
                    c.function == call.function for c in others
                )
                if call.depth == 1 and not known and _fails(call, EXPLAINS[check]):
                    others.append(call)
    return others


# --------------------------------------------------------------------------
# A function's own failure, said
# --------------------------------------------------------------------------


def _raised(function: str, run: FunctionRun) -> Msg:
    for _, outcome in _traced(function, run, "runs"):
        if culprit(outcome, EXPLAINS["runs"], function) is not None:
            continue
        if outcome.kind == "crash":
            at = Msg(" at {where}", where=outcome.where) if outcome.where else ""
            return Msg("it crashes{at} ({why})", at=at, why=outcome.message)
        if outcome.kind == "timeout":
            return Msg("it does not return in time")
        at = Msg(" at {where}", where=outcome.where) if outcome.where else ""
        return Msg("it raises {exc_type}{at}", exc_type=outcome.exc_type, at=at)
    return Msg("it raises")


def _float64_source(function: str, run: FunctionRun) -> Msg:
    """Where the float64 of a float32 call starts: an argument it passes on, or its own arrays."""
    names = {f.name: [p.name for p in f.params] for f in contract.functions(contract.LATEST)}
    for _, outcome in _traced(function, run, "dtype"):
        for call in outcome.calls:
            if call.depth != 1:
                continue
            given = [
                *zip(names.get(call.function, []), call.args, strict=False),
                *call.kwargs.items(),
            ]
            wide = next(
                (n for n, v in given if isinstance(v, np.ndarray) and v.dtype == np.float64), None
            )
            if wide is not None:
                return Msg(
                    " (first seen in the {argument} it passes to {callee})",
                    argument=wide,
                    callee=call.function,
                )
    return ""


def _other_dtype(function: str, run: FunctionRun) -> tuple[str, str] | None:
    """(returned, expected) of the first output whose dtype is wrong otherwise than float64
    for float32 (a float32 result of float64 inputs, float16, complex, a byte order of its
    own): None when every wrong dtype is that widening, which the phrases below explain."""
    for fixture, outcome in _traced(function, run, "dtype"):
        if fixture is None or not outcome.ok:
            continue
        for item, ref in zip(
            elements(outcome.value), elements(fx.reference_output(fixture)), strict=False
        ):
            dtype = getattr(item, "dtype", None)
            if dtype is None or dtype == ref.dtype:
                continue
            if not (dtype == np.float64 and ref.dtype == np.float32):
                return str(dtype), str(ref.dtype)
    return None


def _keeps_bool(function: str, run: FunctionRun) -> bool:
    """The contract's output is a bool mask where the function returned another dtype."""
    traced = _traced(function, run, "dtype")
    return bool(traced) and all(
        r.dtype == np.bool_ for r in elements(fx.reference_output(traced[0][0]))
    )


def said_own(function: str, run: FunctionRun, own: tuple[str, ...]) -> list[Msg]:
    """A phrase for each failing check of the function's own, in the order given."""
    phrases: list[Msg] = []
    # What it computes wrong first; a bad input it lets through after (as verify lists them).
    for check in sorted(own, key=lambda c: c == "bad-input"):
        if check == "runs" and _fails_only_where_heads_are_grouped(function, run):
            phrases.append(
                Msg(
                    "it fails wherever Hkv < H (GQA, MQA), and only there: k and v keep their "
                    "Hkv heads; call repeat_kv(k, H // Hkv) and repeat_kv(v, H // Hkv) before "
                    "q @ k.T"
                )
            )
        elif check == "runs" and _appends_on_another_axis(function, run):
            phrases.append(
                Msg(
                    "np.concatenate refuses its cache: the new keys and values are appended on "
                    "another axis than time; append along time "
                    "(np.concatenate([past_k, k_new], axis=2))"
                )
            )
        elif check == "runs":
            phrases.append(_raised(function, run))
        elif check == "dtype" and _keeps_bool(function, run):
            phrases.append(
                Msg(
                    "it returns a float mask where the contract keeps bool, True where a key "
                    "is blocked: build the mask from a comparison (the causal one is "
                    "np.arange(t_k)[None, :] > (t_k - t_q) + np.arange(t_q)[:, None]) or pass "
                    "dtype=bool to np.ones and np.triu"
                )
            )
        elif check == "dtype" and (other := _other_dtype(function, run)) is not None:
            phrases.append(
                Msg(
                    "it returns {returned} where the contract keeps {expected}: the output "
                    "keeps the input's dtype (float64 in, float64 out; float32 in, float32 "
                    "out); remove the cast or the constant of another dtype, or cast the "
                    "result to x's dtype",
                    returned=other[0],
                    expected=other[1],
                )
            )
        elif check == "dtype" and function in _TABLES:
            phrases.append(
                Msg(
                    "it returns float64 for float32 input{source}: its tables (the angles, cos "
                    "and sin) are float64, and so is every product with them; make the tables "
                    "in x's dtype, or cast the result to it",
                    source=_float64_source(function, run),
                )
            )
        elif check == "dtype" and function in _MASKED:
            phrases.append(
                Msg(
                    "it returns float64 for float32 input{source}: something it makes itself is "
                    "float64 (np.tri, np.zeros and np.ones unless given dtype=, np.sqrt of an "
                    "int), so make its masks, caches and constants in the input's dtype",
                    source=_float64_source(function, run),
                )
            )
        elif check == "dtype":
            phrases.append(
                Msg(
                    "it returns float64 for float32 input{source}: an array or constant it "
                    "makes itself is float64 (np.zeros, np.ones or np.array without dtype=), "
                    "and so is everything computed with it; make it in the input's dtype, or "
                    "cast the result to it",
                    source=_float64_source(function, run),
                )
            )
        elif check == "parity" and _fails_only_on_ragged_blocks(function, run):
            phrases.append(
                Msg(
                    "its values are wrong only where block_size does not divide the sequence "
                    "(or is longer than it): the last, shorter block is dropped or mishandled; "
                    "loop over range(0, T, block_size) and let the last block be shorter"
                )
            )
        elif check == "parity" and (related := _related(function, run)) is not None:
            phrases.append(related)
        elif check == "finite" and function in _TILED:
            phrases.append(
                Msg(
                    "its output holds NaN where the reference's does not: in an online softmax, "
                    "-inf - (-inf) is NaN while every score seen so far is blocked; shift by 0 "
                    "while the running max is -inf, and give a row with no visible key zeros"
                )
            )
        elif check == "bad-input":
            cases = [n for n, o in run.bad.items() if o.bad_input_class() not in _REFUSED]
            rules = {c.name: c.rule for c in bad_cases(function, run.seed, run.contract)}
            broken: list = []
            for name in cases:
                if name in rules and rules[name] not in broken:
                    broken.append(rules[name])
            phrases.append(
                Msg(
                    "it does not refuse bad input ({cases}): the contract asks it to raise "
                    "ValueError (or TypeError) for {conditions}",
                    cases=", ".join(cases),
                    conditions=joined([declared(r.condition) for r in broken]) or ", ".join(cases),
                )
            )
        elif check == "memory":
            phrases.append(_memory_said(run))
        elif check == "pure":
            edited = {n: None for _, o in _traced(function, run, "pure") for n in o.mutated}
            phrases.append(
                Msg(
                    "it writes into its input {inputs} in place (x -= ..., x /= ..., "
                    "x[...] = ... or out=x), so its caller's array changes: compute into a new "
                    "array (x = x - ...)",
                    inputs=", ".join(edited) or "x",
                )
            )
        elif check == "rows-sum" and function == "softmax" and _ignores_its_axis(run):
            phrases.append(
                Msg(
                    "its outputs do not sum to 1 along the axis it is given: take the max, the "
                    "sum of the exponentials and the division along axis, not a fixed axis"
                )
            )
        elif check == "rows-sum" and function == "softmax":
            phrases.append(Msg("its outputs do not sum to 1 along the axis it is given"))
        elif check in _SAID:
            phrases.append(_SAID[check])
    return phrases


def _memory_said(run: FunctionRun) -> Msg:
    """Why the measured call failed: it did not return, its output was not the reference's
    (so its memory counted for nothing), or its peak was full attention's."""
    measured = run.memory
    if measured is None or not measured.outcome.ok:
        problem = measured.outcome.describe() if measured is not None else Msg("not run")
        return Msg("the call its memory is measured by (T = 4096) {problem}", problem=problem)
    if measured.call.peak is None:
        return Msg(
            "the call its memory is measured by (T = 4096) returns an output that is not the "
            "reference's (an array never filled, rows never computed): compute every row of "
            "the output, whatever the length"
        )
    return Msg(
        "its peak memory is full attention's: it holds a (Tq, Tk) array; loop over key blocks "
        "of block_size with an online softmax, holding (Tq, block_size) scores at a time"
    )


def _heads(function: str, fixture: fx.Fixture) -> tuple[int, int] | None:
    """(H, Hkv) of a fixture of a function that attends, or None."""
    args, kwargs = fixture.args, fixture.kwargs
    if function in ("scaled_dot_product_attention", "tiled_attention"):
        return np.shape(args[0])[1], np.shape(args[1])[1]
    at = {"multi_head_attention": 5, "attention_decode": 7}.get(function, 2)
    if function not in (*_GROUPED, "multi_head_attention", "attention_decode"):
        return None
    H = args[at] if len(args) > at else kwargs.get("n_heads")
    Hkv = args[at + 1] if len(args) > at + 1 else kwargs.get("n_kv_heads")
    return (H, H if Hkv is None else Hkv) if H is not None else None


_GROUPED = ("transformer_block", "decoder_forward")


def _fails_only_where_heads_are_grouped(function: str, run: FunctionRun) -> bool:
    """Every call that raises has fewer key/value heads than query heads, a call with as
    many passes, and no call with several key/value heads per group returns (one key/value
    head broadcasts by itself): a repeat_kv forgotten, however the attention is written."""
    raising, whole_ok = 0, False
    for fixtures, outcomes in (
        (fx.fixtures(function, run.seed, run.contract), run.fixtures),
        (fx.probes(function, run.seed, run.contract), run.probes),
    ):
        for fixture in fixtures:
            outcome = outcomes.get(fixture.name)
            heads = _heads(function, fixture)
            if outcome is None or heads is None:
                continue
            grouped = heads[0] != heads[1]
            if outcome.kind == "exception":
                if not grouped or culprit(outcome, EXPLAINS["runs"], function) is not None:
                    return False
                raising += 1
            elif outcome.kind == "value" and not grouped:
                whole_ok = True
            elif outcome.kind == "value" and heads[1] > 1:
                return False  # grouped heads work here: the raise elsewhere is another bug's
            elif outcome.kind != "value":
                return False
    return raising > 0 and whole_ok


def _appends_on_another_axis(function: str, run: FunctionRun) -> bool:
    """attention_decode's raise is np.concatenate's, that the arrays' other axes differ."""
    if function != "attention_decode":
        return False
    raised = [o for o in run.outcomes() if o.kind == "exception"]
    return bool(raised) and all("concatenation axis" in str(o.message) for o in raised)


def _ignores_its_axis(run: FunctionRun) -> bool:
    """softmax's outputs do not sum to 1 along the axis it was given, on some fixture, and on
    each such fixture they do along another axis: it normalises over an axis of its own."""
    wrong = 0
    for fixture in fx.fixtures("softmax", run.seed, run.contract):
        outcome = run.fixtures.get(fixture.name)
        given = fixture.kwargs.get("axis", -1)
        reference = fx.reference_output(fixture)
        if outcome is None or not outcome.ok or not np.allclose(reference.sum(axis=given), 1.0):
            continue  # a slice with every score blocked sums to 0 in the reference
        value = np.asarray(outcome.value)
        if np.iscomplexobj(value):
            return False  # an imaginary part is its own error, not the axis
        value = value.astype(np.float64)
        if value.shape != reference.shape or np.allclose(value.sum(axis=given), 1.0):
            continue
        others = [a for a in range(value.ndim) if a != given % value.ndim]
        if not any(np.allclose(value.sum(axis=a), 1.0) for a in others):
            return False
        wrong += 1
    return wrong > 0


# Functions whose float64 comes from tables of positions (angles, cos and sin, slopes).
_TABLES = ("rope", "sinusoidal_positions", "alibi_bias", "alibi_slopes", "learned_positions")
# Functions that build masks or caches of their own, where a float64 one leaks.
_MASKED = (
    "scaled_dot_product_attention",
    "multi_head_attention",
    "attention_decode",
    "tiled_attention",
    "transformer_block",
    "decoder_forward",
)
# The functions that take a block_size (q, k, v, block_size, ...) and compute blockwise.
_TILED = ("tiled_attention",)


def _ragged(fixture: fx.Fixture) -> bool:
    """block_size does not divide Tq or Tk, or is longer than one of them."""
    q, k, block = fixture.args[0], fixture.args[1], fixture.args[3]
    return any(np.shape(x)[-2] % block for x in (q, k))


def _ragged_keys(fixture: fx.Fixture) -> bool:
    """block_size does not divide Tk: the last key block is shorter."""
    return bool(np.shape(fixture.args[1])[-2] % fixture.args[3])


def _related(function: str, run: FunctionRun) -> Msg | None:
    """What one relation between its wrong outputs and the reference's says (`relation`)."""
    traced = [(f, o) for f, o in _traced(function, run, "parity") if f is not None and o.ok]
    return relation.said((o.value, fx.reference_output(f)) for f, o in traced) if traced else None


def _fails_only_on_ragged_blocks(function: str, run: FunctionRun) -> bool:
    """Every fixture it fails parity on has a ragged last block, every fixture whose last key
    block is shorter fails (a last block dropped or mishandled spoils each of them: a causal
    mask aligned top-left failed only the one whose Tq < Tk), and for each failing one a
    fixture without, causal or not as it is, passes."""
    if function not in _TILED:
        return False
    traced = _traced(function, run, "parity")
    failing = {f.name for f, _ in traced}
    fixtures = fx.fixtures(function, run.seed, run.contract)
    # A NaN is said on its own (the online softmax's): the fixtures it spoils say nothing.
    finite = all(np.all(np.isfinite(x)) for _, o in traced for x in elements(o.value))
    return (
        finite
        and bool(failing)
        and all(_ragged(f) for f in fixtures if f.name in failing)
        and all(
            f.name in failing
            for f in fixtures
            if _ragged_keys(f) and run.fixtures.get(f.name, _UNRUN).kind == "value"
        )
        and all(
            any(
                not _ragged(whole)
                and whole.name not in failing
                and run.fixtures.get(whole.name, _UNRUN).kind == "value"
                and _causal(whole) == _causal(f)
                for whole in fixtures
            )
            for f in fixtures
            if f.name in failing
        )
    )


_UNRUN = Outcome("missing")


def _causal(fixture: fx.Fixture) -> bool:
    return fixture.kwargs.get("causal", True)


# --------------------------------------------------------------------------
# float32 rounding on a float64 path
# --------------------------------------------------------------------------


def float32_rounding(function: str, run: FunctionRun) -> tuple[float, str | None] | None:
    """When every fixture the function fails parity on is off by float32 rounding only:
    (the worst relative error, the first function it called whose output dropped to float32
    or to float32's precision, or None when its own code did). Otherwise None."""
    traced = _traced(function, run, "parity")
    if not traced:
        return None
    worst = 0.0
    for fixture, outcome in traced:
        error = relative_error(outcome.value, fx.reference_output(fixture))
        if not error <= FLOAT32_ROUNDING:
            return None
        worst = max(worst, error)
    for _, outcome in traced:
        for call in outcome.calls:
            if call.depth != 1:
                continue
            judged = call.judged
            if judged.kind in ("dtype", "parity") and judged.relative_error <= FLOAT32_ROUNDING:
                return worst, call.function
    return worst, None
