"""The behavioural checks (finite, pure, rows-sum, causal, bad-input), each on an observation
built here: no worker runs, so each test states exactly what a clean room did, and asserts
the verdict, the message a learner reads and the measures reported (issue 13's mutation
runs found these rules unguarded by the suite's fault runs alone)."""

from __future__ import annotations

import numpy as np
import pytest
from checktools import named, observed

from labctl import contract
from labctl.verify import checks
from labctl.verify import fixtures as fx
from labctl.verify.bad_input import bad_cases
from labctl.verify.check_base import num
from labctl.verify.compare import CAUSAL_TOLERANCE, ROW_SUM_TOLERANCE
from labctl.verify.observe import Outcome

PASS, FAIL, NOT_RUN = checks.PASS, checks.FAIL, checks.NOT_RUN

# Every reference output these tests read, computed once at import: under mutmut, each
# mutant's process forks from one that collected this module and so already holds them.
fx.warm_reference(contract.function_names())
for _t, _variant in fx.causal_variants("multi_head_attention"):
    fx.reference_output(_variant)


check_finite = named(checks.check_finite)
check_pure = named(checks.check_pure)
check_rows_sum = named(checks.check_rows_sum)
check_causal = named(checks.check_causal)
check_bad_input = named(checks.check_bad_input)


def _fixture(function: str, name: str) -> fx.Fixture:
    return next(f for f in fx.fixtures(function) if f.name == name)


def _copy(value):
    if isinstance(value, tuple):
        return tuple(np.array(v, copy=True) for v in value)
    return np.array(value, copy=True)


def _raised(fixture) -> Outcome:
    return Outcome("exception", message="boom", exc_type="RuntimeError")


# -- finite -----------------------------------------------------------------------------------


def test_finite_and_pure_apply_exactly_where_they_can_fail():
    def applying(name):
        return {
            f for f in contract.function_names() if name in {c.name for c in checks.applicable(f)}
        }

    every = set(contract.function_names())
    # A boolean mask cannot hold NaN; a function of integers only has no array to modify.
    assert applying("finite") == every - {"causal_mask", "sliding_window_mask", "padding_mask"}
    assert applying("pure") == every - {
        "causal_mask",
        "sliding_window_mask",
        "sinusoidal_positions",
    }
    assert applying("rows-sum") == {"softmax", "scaled_dot_product_attention"}


def test_finite_passes_a_room_and_counts_fixtures_and_probes():
    n = len(fx.fixtures("softmax")) + len(fx.probes("softmax"))
    result = check_finite(observed("softmax"), "softmax")
    assert (result.status, result.message) == (PASS, f"no NaN or inf in {n} outputs")


def test_finite_names_the_fixture_the_count_and_the_fixture_s_note():
    large = _fixture("softmax", "large-logits")
    assert large.note

    def overflowing(fixture):
        value = _copy(fx.reference_output(fixture))
        if fixture.name == large.name:
            value.flat[:2] = np.nan
            value.flat[2] = np.inf
        return value

    result = check_finite(observed("softmax", overflowing), "softmax")
    size = fx.reference_output(large).size
    assert (result.status, result.fixture) == (FAIL, "large-logits")
    assert result.message == f"fixture large-logits: NaN in 3 of {size} elements ({large.note})"


def test_finite_says_inf_when_there_is_no_nan_and_no_note_when_the_fixture_has_none():
    first = fx.fixtures("softmax")[0]
    assert not first.note

    def infinite(fixture):
        value = _copy(fx.reference_output(fixture))
        if fixture.name == first.name:
            value.flat[0] = -np.inf
        return value

    result = check_finite(observed("softmax", infinite), "softmax")
    size = fx.reference_output(first).size
    assert result.message == f"fixture {first.name}: inf in 1 of {size} elements"


def test_finite_reads_every_array_of_a_tuple_and_leaves_non_arrays_to_the_shape_check():
    function = "scaled_dot_product_attention"
    first = fx.fixtures(function)[0]

    def nan_weights(fixture):
        out, weights = _copy(fx.reference_output(fixture))
        if fixture.name == first.name:
            weights.flat[0] = np.nan
        return out, weights

    result = check_finite(observed(function, nan_weights), function)
    assert result.status == FAIL and result.message.startswith(f"fixture {first.name}: NaN in 1 ")
    # A list of floats is no array, an object array holds no floats: the shape and dtype
    # checks name them; finite does not crash on them.
    listed = check_finite(observed("softmax", lambda f: [float("nan")]), "softmax")
    assert listed.status == PASS
    objects = check_finite(
        observed("softmax", lambda f: np.array([None, np.nan], dtype=object)), "softmax"
    )
    assert objects.status == PASS


def test_finite_reads_float32_outputs_too():
    probe = fx.probes("softmax")[0]

    def nan_probe(fixture):
        value = _copy(fx.reference_output(fixture))
        if fixture.name == probe.name:
            assert value.dtype == np.float32
            value.flat[0] = np.nan
        return value

    result = check_finite(observed("softmax", nan_probe), "softmax")
    assert (result.status, result.fixture) == (FAIL, probe.name)


def test_finite_reads_on_past_a_value_that_is_not_an_array():
    first = fx.fixtures("softmax")[0].name
    mixed = observed("softmax", lambda f: [1.0, np.array([np.nan])] if f.name == first else 0)
    result = check_finite(mixed, "softmax")
    assert result.status == FAIL and result.message.startswith(f"fixture {first}: NaN in 1 of 1 ")


def test_finite_does_not_run_when_no_call_returned():
    result = check_finite(observed("softmax", _raised), "softmax")
    assert (result.status, result.message) == (NOT_RUN, "not run: no call returned")


# -- pure -------------------------------------------------------------------------------------


def test_pure_counts_every_call_that_returned_fixtures_probes_and_future_variants():
    function = "multi_head_attention"
    first = fx.fixtures(function)[0].name
    causal = {0: Outcome("value"), 1: Outcome("value"), 2: Outcome("timeout")}

    def first_fails(fixture):
        return _raised(fixture) if fixture.name == first else fx.reference_output(fixture)

    seen = observed(function, first_fails, causal=causal)
    n = len(fx.fixtures(function)) - 1 + len(fx.probes(function)) + 2
    result = check_pure(seen, function)
    assert (result.status, result.message) == (PASS, f"inputs unchanged by {n} calls")


@pytest.mark.parametrize("where", ["fixture", "probe", "causal"])
def test_pure_names_the_call_that_modified_its_inputs(where):
    function = "multi_head_attention"
    causal = {t: Outcome("value") for t in range(3)}
    seen = observed(function, causal=causal)
    run = seen.runs[function]
    if where == "fixture":
        name = fx.fixtures(function)[1].name
        run.fixtures[name].mutated = ("x", "w_q")
    elif where == "probe":
        name = fx.probes(function)[0].name
        run.probes[name].mutated = ("x", "w_q")
    else:
        name = "future-after-2"
        run.causal[2].mutated = ("x", "w_q")
    result = check_pure(seen, function)
    assert (result.status, result.fixture) == (FAIL, name)
    assert result.message == f"fixture {name}: modified its input x, w_q in place"


def test_pure_ignores_what_a_failed_call_reports_and_does_not_run_without_a_return():
    function = "layer_norm"

    def failed_after_writing(fixture):
        return Outcome("exception", exc_type="ValueError", mutated=("x",))

    result = check_pure(observed(function, failed_after_writing), function)
    assert (result.status, result.message) == (NOT_RUN, "not run: no call returned")


# -- rows-sum ---------------------------------------------------------------------------------


def test_rows_sum_passes_the_reference_and_counts_fixtures_without_probes():
    for function in ("softmax", "scaled_dot_product_attention"):
        result = check_rows_sum(observed(function), function)
        n = len(fx.fixtures(function))
        assert result.status == PASS
        assert result.message == f"rows sum to 1 within {num(result.max_error)} on {n} fixtures"
        assert result.max_error <= 1e-12  # float64 rounding of a sum of at most 9 terms
        assert (result.tolerance, result.margin) == (
            ROW_SUM_TOLERANCE,
            result.max_error / ROW_SUM_TOLERANCE,
        )


def test_rows_sum_fails_scaled_weights_and_names_the_first_of_equal_worst_fixtures():
    function = "softmax"
    names = [f.name for f in fx.fixtures(function)]

    def scaled(fixture):
        # Every live row sums to exactly 1.5: every fixture is off by exactly 0.5.
        reference = fx.reference_output(fixture)
        axis = fixture.kwargs.get("axis", -1)
        value = np.zeros_like(reference)
        moved = np.moveaxis(value, axis, -1)  # a view: slices along the softmax axis
        moved[..., 0] = np.where(np.moveaxis(reference, axis, -1).sum(axis=-1) > 0.5, 1.5, 0.0)
        return value

    result = check_rows_sum(observed(function, scaled), function)
    assert result.status == FAIL
    assert result.max_error == pytest.approx(0.5, abs=1e-12)
    assert result.margin == pytest.approx(0.5 / ROW_SUM_TOLERANCE)
    assert result.fixture == names[0]  # every fixture is off by 0.5: the first is named
    assert result.message == (
        f"fixture {names[0]}: a row's weights are off by 0.5 from summing to 1 "
        f"(0 for a fully blocked row), tolerance {ROW_SUM_TOLERANCE:g}"
    )


def test_rows_sum_wants_a_fully_blocked_softmax_slice_to_be_all_zero():
    blocked = _fixture("softmax", "blocked-slices")
    x = blocked.args[0]
    dead = np.all(np.isneginf(x), axis=-1)
    assert dead.any() and not dead.all()

    def uniform_when_blocked(fixture):
        value = _copy(fx.reference_output(fixture))
        if fixture.name == blocked.name:
            value[dead] = 1.0 / x.shape[-1]  # a finite fill: the blocked row sums to 1
        return value

    result = check_rows_sum(observed("softmax", uniform_when_blocked), "softmax")
    assert (result.status, result.fixture) == (FAIL, "blocked-slices")
    assert result.max_error == pytest.approx(1.0)


def test_rows_sum_reads_the_softmax_axis_the_fixture_asks_for():
    axis0 = _fixture("softmax", "axis-0")
    assert axis0.kwargs["axis"] == 0

    def last_axis_instead(fixture):
        if fixture.name != axis0.name:
            return fx.reference_output(fixture)
        x = fixture.args[0]
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)  # sums to 1 over the wrong axis

    result = check_rows_sum(observed("softmax", last_axis_instead), "softmax")
    assert (result.status, result.fixture) == (FAIL, "axis-0")


def test_rows_sum_wants_an_attention_row_fully_blocked_by_the_mask_to_be_all_zero():
    function = "scaled_dot_product_attention"
    blocked = _fixture(function, "blocked-row")

    def uniform_when_blocked(fixture):
        out, weights = _copy(fx.reference_output(fixture))
        if fixture.name == blocked.name:
            mask = np.broadcast_to(fixture.kwargs["mask"], weights.shape)
            dead = np.all(mask, axis=-1)
            assert dead.any()
            weights[dead] = 1.0 / weights.shape[-1]
        return out, weights

    result = check_rows_sum(observed(function, uniform_when_blocked), function)
    assert (result.status, result.fixture) == (FAIL, "blocked-row")
    assert result.max_error == pytest.approx(1.0)


def test_rows_sum_allows_exactly_its_tolerance():
    blocked = _fixture("softmax", "blocked-slices")
    dead = np.all(np.isneginf(blocked.args[0]), axis=-1)

    def off_by_the_tolerance(fixture):
        value = _copy(fx.reference_output(fixture))
        if fixture.name == blocked.name:
            value[dead] = 0.0
            value[dead, 0] = ROW_SUM_TOLERANCE  # a blocked row summing to exactly 1e-12
        return value

    result = check_rows_sum(observed("softmax", off_by_the_tolerance), "softmax")
    assert result.max_error == ROW_SUM_TOLERANCE and result.status == PASS


def test_rows_sum_judges_boolean_weights_instead_of_crashing():
    def ones(fixture):
        return np.ones_like(fx.reference_output(fixture), dtype=bool)

    result = check_rows_sum(observed("softmax", ones), "softmax")
    assert result.status == FAIL and result.max_error >= 1.0


def test_rows_sum_reads_a_mask_passed_positionally(monkeypatch):
    function = "scaled_dot_product_attention"
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 1, 3, 4)) for _ in range(3))
    mask = np.zeros((1, 1, 3, 3), dtype=bool)
    mask[0, 0, 1, :] = True  # query 1 sees no key
    positional = fx.Fixture(function, "positional-mask-test", (q, k, v, mask), {})
    monkeypatch.setattr(fx, "fixtures", lambda f, seed=5: (positional,))
    monkeypatch.setattr(fx, "probes", lambda f, seed=5: ())

    def uniform_when_blocked(fixture):
        out, weights = _copy(fx.reference_output(fixture))
        weights[0, 0, 1, :] = 1.0 / 3  # the blocked row sums to 1 instead of 0
        return out, weights

    result = check_rows_sum(observed(function, uniform_when_blocked), function)
    assert (result.status, result.fixture) == (FAIL, "positional-mask-test")
    assert result.max_error == pytest.approx(1.0)


def test_rows_sum_counts_nan_rows_as_infinitely_off():
    def nan_row(fixture):
        value = _copy(fx.reference_output(fixture))
        value[..., 0] = np.nan
        return value

    result = check_rows_sum(observed("softmax", nan_row), "softmax")
    assert result.status == FAIL and result.max_error == np.inf


def test_rows_sum_skips_wrong_structures_and_does_not_run_without_a_usable_one():
    first = fx.fixtures("softmax")[0]

    def first_misshaped(fixture):
        value = fx.reference_output(fixture)
        return value[..., :1] if fixture.name == first.name else value

    result = check_rows_sum(observed("softmax", first_misshaped), "softmax")
    assert result.status == PASS
    assert result.message.endswith(f" on {len(fx.fixtures('softmax')) - 1} fixtures")
    none = check_rows_sum(observed("softmax", lambda f: 0.5), "softmax")
    assert (none.status, none.message) == (NOT_RUN, "not run: no usable return value")


# -- causal -----------------------------------------------------------------------------------

_CAUSAL = "multi_head_attention"


def _with_variants(value_of, order=None, base_of=fx.reference_output):
    """An observation whose base fixture returned `base_of(fixture)` and whose variant t
    returned `value_of(t, variant)` (an Outcome or a value), inserted in `order`."""
    variants = dict(fx.causal_variants(_CAUSAL))
    causal = {}
    for t in order or sorted(variants):
        value = value_of(t, variants[t])
        causal[t] = value if isinstance(value, Outcome) else Outcome("value", value=value)
    return observed(_CAUSAL, base_of, causal=causal)


def _honest(t, variant):
    return fx.reference_output(variant)


def test_causal_passes_an_honest_room_and_counts_the_perturbations():
    seen = _with_variants(_honest)
    n = len(fx.causal_variants(_CAUSAL))
    result = check_causal(seen, _CAUSAL)
    assert result.status == PASS and result.max_error <= CAUSAL_TOLERANCE
    assert result.message == (
        f"prefix unchanged ({num(result.max_error)}) over {n} future perturbations"
    )
    assert result.tolerance == CAUSAL_TOLERANCE


def test_causal_judges_positions_up_to_t_only():
    base_value = fx.reference_output(fx.causal_base(_CAUSAL))

    def moved_at(offset, only=None):
        def value(t, variant):
            moved = np.array(base_value, copy=True)
            if only is None or t == only:
                moved[:, t + offset] += 1.0  # (B, C) at one position
            return moved

        return value

    # Position t + 1 is the first one whose input changed: it may move.
    allowed = check_causal(_with_variants(moved_at(1)), _CAUSAL)
    assert allowed.status == PASS and allowed.max_error == 0.0
    # Position t itself may not.
    leak = check_causal(_with_variants(moved_at(0, only=2)), _CAUSAL)
    assert leak.status == FAIL and leak.max_error == pytest.approx(1.0)
    assert leak.margin == pytest.approx(1.0 / CAUSAL_TOLERANCE)
    assert leak.message == (
        "changing the inputs after position 2 moved the outputs at positions <= 2 by 1 "
        f"(tolerance {CAUSAL_TOLERANCE:g}): the future leaks"
    )


def test_causal_allows_exactly_its_tolerance():
    shape = fx.reference_output(fx.causal_base(_CAUSAL)).shape
    moved = np.zeros(shape)
    moved[:, 0, 0] = CAUSAL_TOLERANCE  # exactly 1e-12 from the base's zeros

    result = checks.check_causal(
        _with_variants(lambda t, v: moved, base_of=lambda f: np.zeros(shape)), _CAUSAL
    )
    assert (result.status, result.max_error) == (PASS, CAUSAL_TOLERANCE)


def test_causal_names_the_first_t_among_equal_leaks_whatever_order_they_came_in():
    base_value = fx.reference_output(fx.causal_base(_CAUSAL))
    ts = sorted(dict(fx.causal_variants(_CAUSAL)))

    shifted_value = np.array(base_value, copy=True)
    shifted_value[:, 0] += 0.25  # the same array for every t: equal leaks

    def shifted(t, variant):
        return shifted_value

    leak = check_causal(_with_variants(shifted, order=list(reversed(ts))), _CAUSAL)
    assert leak.status == FAIL and leak.message.startswith(
        "changing the inputs after position 0 moved"
    )


def test_causal_is_not_run_where_a_nan_hides_whether_the_future_leaks():
    """A NaN reaches every position through a zero weight (0 x NaN is NaN): an rms_norm over
    mean(x) was told "the future leaks" (issue 38). finite fails such a room instead."""

    def nan_prefix(t, variant):
        value = np.array(fx.reference_output(variant), copy=True)
        value[:, 0] = np.nan
        return value

    said = check_causal(_with_variants(nan_prefix), _CAUSAL)
    assert said.status == NOT_RUN
    assert said.message == (
        "not run: its outputs hold NaN (see finite), which hides whether the future leaks"
    )


@pytest.mark.parametrize(
    ("outcome", "status", "message"),
    [
        (
            Outcome("exception", message="boom", exc_type="ValueError"),
            FAIL,
            "with the future after 1 changed, the call raised ValueError: boom",
        ),
        (
            Outcome("timeout"),
            FAIL,
            "with the future after 1 changed, the call did not return in time (stopped)",
        ),
        (Outcome("skipped", message="not run: an earlier call hung"), NOT_RUN, None),
    ],
)
def test_a_failing_future_variant_isnamed(outcome, status, message):
    def one_fails(t, variant):
        return outcome if t == 1 else fx.reference_output(variant)

    result = check_causal(_with_variants(one_fails), _CAUSAL)
    assert (result.status, result.message) == (status, message or "not run: an earlier call hung")


@pytest.mark.parametrize("returned", ["misshaped", "tuple"])
def test_a_future_variant_that_changes_the_output_s_shape_fails(returned):
    def reshaped(t, variant):
        value = fx.reference_output(variant)
        if t != 1:
            return value
        return value[:, :-1] if returned == "misshaped" else (value, value)

    result = check_causal(_with_variants(reshaped), _CAUSAL)
    assert (result.status, result.message) == (
        FAIL,
        "with the future after 1 changed, the output's shape changed",
    )


def test_causal_does_not_run_when_its_base_fixture_failed_or_is_misshaped():
    base = fx.causal_base(_CAUSAL)
    failed = f"not run: the base fixture {base.name} failed"
    cases = [
        (lambda f: _raised(f) if f.name == base.name else fx.reference_output(f), failed),
        (lambda f: (fx.reference_output(f),) if f.name == base.name else 0, failed),
        (
            lambda f: fx.reference_output(f)[:, :-1],
            "not run: the base output has the wrong shape",
        ),
    ]
    for base_of, says in cases:
        seen = _with_variants(_honest, base_of=base_of)
        result = check_causal(seen, _CAUSAL)
        assert (result.status, result.message) == (NOT_RUN, says)
    seen = _with_variants(_honest)
    del seen.runs[_CAUSAL].fixtures[base.name]
    result = check_causal(seen, _CAUSAL)
    assert (result.status, result.message) == (NOT_RUN, failed)


# -- bad-input --------------------------------------------------------------------------------

_BAD = "multi_head_attention"


def _bad_run(outcome_of):
    seen = observed(_BAD)
    for case in bad_cases(_BAD):
        seen.runs[_BAD].bad[case.name] = outcome_of(case.name)
    return seen


_REFUSED = Outcome("exception", message="no", exc_type="ValueError")


def test_bad_input_passes_when_every_case_is_refused_and_counts_them():
    result = check_bad_input(_bad_run(lambda name: _REFUSED), _BAD)
    n = len(bad_cases(_BAD))
    assert n > 1 and (result.status, result.message) == (PASS, f"{n} bad inputs refused")


def test_bad_input_does_not_run_without_cases():
    result = check_bad_input(observed(_BAD), _BAD)
    assert (result.status, result.message) == (NOT_RUN, "not run")


def _rule(index: int) -> str:
    """The contract's rule a case of _BAD tests, as a failure quotes it (issue 38)."""
    rule = bad_cases(_BAD)[index].rule
    return (
        f"the contract's rule: {rule.condition} must raise ValueError (or TypeError) naming "
        f"{rule.argument}"
    )


@pytest.mark.parametrize(
    ("outcome", "status", "says"),
    [
        (Outcome("value"), FAIL, "case {name}: returned a value; {rule}"),
        (Outcome("timeout"), FAIL, "case {name}: did not return in time (stopped); {rule}"),
        (
            Outcome("crash", message="killed by SIGSEGV"),
            FAIL,
            "case {name}: crashed: killed by SIGSEGV; {rule}",
        ),
        (
            Outcome("exception", message="no", exc_type="IndexError"),
            FAIL,
            "case {name}: raised IndexError; {rule}",
        ),
        (Outcome("skipped", message="not run: an earlier call hung"), NOT_RUN, None),
    ],
)
def test_bad_input_names_the_first_case_not_refused(outcome, status, says):
    names = [c.name for c in bad_cases(_BAD)]
    second = names[1]  # the first is refused: the check reads on past it
    result = check_bad_input(_bad_run(lambda name: outcome if name == second else _REFUSED), _BAD)
    assert result.status == status
    if says:
        said = says.format(name=second, rule=_rule(1))
        assert (result.message, result.fixture) == (said, second)
    else:
        assert result.message == "not run: an earlier call hung"


def test_bad_input_names_every_case_not_refused():
    """Issue 21: the first case alone was named, so fixing it revealed the next."""
    names = [c.name for c in bad_cases(_BAD)]
    not_refused = {names[1]: Outcome("value"), names[3]: Outcome("exception", exc_type="KeyError")}
    result = check_bad_input(_bad_run(lambda name: not_refused.get(name, _REFUSED)), _BAD)
    assert (result.status, result.fixture) == (FAIL, names[1])
    assert result.message == (
        f"2 of {len(names)} bad inputs not refused: "
        f"case {names[1]}: returned a value; {_rule(1)}; "
        f"case {names[3]}: raised KeyError; {_rule(3)}"
    )


def test_bad_input_reports_what_failed_before_the_calls_were_skipped():
    names = [c.name for c in bad_cases(_BAD)]
    skipped = Outcome("skipped", message="not run: an earlier call hung")

    def outcome_of(name):
        return Outcome("value") if name == names[0] else skipped if name == names[1] else _REFUSED

    result = check_bad_input(_bad_run(outcome_of), _BAD)
    assert (result.status, result.fixture) == (FAIL, names[0])
    assert result.message == f"case {names[0]}: returned a value; {_rule(0)}"
