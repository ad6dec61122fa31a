"""The checks that hold a clean room to the contract and the reference (loads, import-policy,
contract, runs, shape, dtype, parity), how every check skips, and how `evaluate` orders
them: each on an observation built here, no worker, asserting the verdict, the message a
learner reads and the measures reported (issue 13's mutation runs)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from checktools import named, observed

from labctl import contract
from labctl.i18n import Msg
from labctl.verify import checks, compare
from labctl.verify import fixtures as fx
from labctl.verify.check_base import num
from labctl.verify.observe import PACKAGE, FunctionRun, Located, Outcome, RoomObservation

PASS, FAIL, NOT_RUN = checks.PASS, checks.FAIL, checks.NOT_RUN

# Every reference output these tests read, computed once at import: under mutmut, each
# mutant's process forks from one that collected this module and so already holds them.
fx.warm_reference(contract.function_names())


check_loads = named(checks.check_loads)
check_import_policy = named(checks.check_import_policy)
check_contract = named(checks.check_contract)
check_runs = named(checks.check_runs)
check_shape = named(checks.check_shape)
check_dtype = named(checks.check_dtype)
check_parity = named(checks.check_parity)
check_finite = named(checks.check_finite)


def _names(function: str) -> list[str]:
    return [f.name for f in fx.fixtures(function)]


def _raised(fixture=None) -> Outcome:
    return Outcome("exception", message="boom", exc_type="RuntimeError")


def _only(name: str, changed, otherwise=fx.reference_output):
    """value_of: `changed(fixture)` for the fixture called `name`, `otherwise` for the rest."""
    return lambda f: changed(f) if f.name == name else otherwise(f)


def _off_by(delta: float, at: int = 0):
    def value(fixture):
        out = np.array(fx.reference_output(fixture), copy=True)
        out.flat[at] += delta
        return out

    return value


# -- how every output check skips (check_base) ------------------------------------------------


@pytest.mark.parametrize(
    ("status", "says"),
    [
        ("refused", "not run: refused by the import policy"),
        ("unloadable", "not run: the clean room does not load"),
    ],
)
def test_every_check_of_a_room_that_did_not_load_says_why(status, says):
    seen = RoomObservation(root=Path("room"), status=status)
    for check in checks.FUNCTION_CHECKS:
        result = check.evaluate(seen, "softmax")
        assert (result.status, result.message) == (NOT_RUN, says), check.name
        assert (result.function, result.name) == ("softmax", check.name)


def test_output_checks_say_why_a_function_was_not_run():
    bare = RoomObservation(root=Path("room"))
    stub = observed("softmax", lambda f: Outcome("not-implemented"))
    missing = observed(
        "softmax", _only(_names("softmax")[1], lambda f: Outcome("missing"), _raised)
    )
    for seen, says in [
        (bare, "not run"),
        (stub, "not run: not implemented"),
        (missing, "not run: the package does not expose it"),
    ]:
        for check in (check_shape, check_parity, check_finite):
            result = check(seen, "softmax")
            assert (result.status, result.message) == (NOT_RUN, says)


def test_numbers_are_shown_with_three_figures_or_in_exponent_form():
    assert [num(v) for v in (None, 0, 0.001, 0.5, 1234.5, 9999.0, 1e4, 0.000999, -0.25)] == [
        "—", "0", "0.001", "0.5", "1.23e+03", "1e+04", "1.0e+04", "1.0e-03", "-0.25",
    ]  # fmt: skip


# -- loads, import-policy, contract -----------------------------------------------------------


def test_loads_fails_with_the_load_error_and_counts_the_files_that_import():
    broken = RoomObservation(root=Path("room"), status="unloadable", message="syntax error in x")
    assert (
        check_loads(broken, PACKAGE).status,
        check_loads(broken, PACKAGE).message,
    ) == (
        FAIL,
        "syntax error in x",
    )
    refused = check_loads(RoomObservation(root=Path("room"), status="refused"), PACKAGE)
    assert (refused.status, refused.message) == (NOT_RUN, "not run: refused by the import policy")
    for n, files in [(1, "1 file"), (2, "2 files")]:
        fine = check_loads(RoomObservation(root=Path("room"), files_scanned=n), PACKAGE)
        assert (fine.status, fine.message) == (PASS, f"{files} import in a worker process")


def test_import_policy_names_each_function_s_violations_and_gathers_them_for_the_package():
    torch = Located("room/a.py:3", "import torch", "softmax")
    spawn = Located("room/b.py:9", "import subprocess", "rope")
    again = Located("room/a.py:5", "import torch.nn", "softmax")
    seen = RoomObservation(root=Path("room"), status="refused", violations=[torch, spawn, again])
    mine = check_import_policy(seen, "softmax")
    assert (mine.status, mine.message) == (
        FAIL,
        "breaks the import policy: room/a.py:3: import torch; room/a.py:5: import torch.nn",
    )
    clean = check_import_policy(seen, "layer_norm")
    assert (clean.status, clean.message) == (PASS, "no forbidden import")
    package = check_import_policy(seen, PACKAGE)
    assert (package.status, package.message) == (
        FAIL,
        "violations in rope, softmax: room/a.py:3: import torch; room/b.py:9: "
        "import subprocess; room/a.py:5: import torch.nn",
    )
    seen.message = "refused: 3 violations"
    assert check_import_policy(seen, PACKAGE).message == (
        "violations in rope, softmax: refused: 3 violations"
    )
    for n, files in [(1, "1 file"), (2, "2 files")]:
        clean = check_import_policy(RoomObservation(root=Path("room"), files_scanned=n), PACKAGE)
        assert (clean.status, clean.message) == (
            PASS,
            f"none found by the static scan of {files} or the runtime guard",
        )
    unloadable = RoomObservation(root=Path("room"), status="unloadable")
    result = check_import_policy(unloadable, PACKAGE)
    assert (result.status, result.message) == (PASS, "static scan clean")


def test_contract_fails_on_the_function_s_own_deviations_only():
    deviations = [
        contract.Deviation("rms_norm", "eps defaults to 1e-06, contract v1 says 1e-05"),
        contract.Deviation("rms_norm", "parameter 'w' is named 'weight' in contract v1"),
        contract.Deviation("softmax", "missing"),
    ]
    seen = RoomObservation(root=Path("room"), deviations=deviations)
    result = check_contract(seen, "rms_norm")
    assert (result.status, result.message) == (
        FAIL,
        "eps defaults to 1e-06, contract v1 says 1e-05; "
        "parameter 'w' is named 'weight' in contract v1",
    )
    fine = check_contract(seen, "layer_norm")
    assert (fine.status, fine.message) == (PASS, "signature matches")


# -- runs -------------------------------------------------------------------------------------


def test_runs_counts_every_call_and_reports_the_slowest():
    seen = observed("softmax")
    calls = [*seen.runs["softmax"].fixtures.values(), *seen.runs["softmax"].probes.values()]
    for i, outcome in enumerate(calls):
        outcome.elapsed_s = 0.05 * i
    result = check_runs(seen, "softmax")
    slowest = 0.05 * (len(calls) - 1) * 1e3
    assert (result.status, result.message) == (
        PASS,
        f"{len(calls)} calls returned (slowest {slowest:.1f} ms)",
    )
    empty = RoomObservation(root=Path("room"), runs={"softmax": FunctionRun("softmax")})
    assert check_runs(empty, "softmax").message == "0 calls returned (slowest 0.0 ms)"


def test_runs_does_not_run_without_a_loaded_room_or_a_run():
    assert check_runs(RoomObservation(root=Path("room")), "softmax").message == "not run"
    refused = RoomObservation(root=Path("room"), status="refused")
    assert check_runs(refused, "softmax").message == "not run: refused by the import policy"
    stub = observed("softmax", lambda f: Outcome("not-implemented"))
    result = check_runs(stub, "softmax")
    assert (result.status, result.message) == (FAIL, "not implemented (raises NotImplementedError)")


def test_runs_names_the_first_real_failure_before_a_skipped_call_and_counts_the_rest():
    names = _names("softmax")
    skipped = Outcome("skipped", message="not run: an earlier call hung")

    def outcomes(fixture):
        if fixture.name == names[0]:
            return skipped
        if fixture.name in names[1:3]:
            return Outcome("exception", message=f"bad {fixture.name}", exc_type="ValueError")
        return fx.reference_output(fixture)

    result = check_runs(observed("softmax", outcomes), "softmax")
    assert (result.status, result.message) == (
        FAIL,
        f"fixture {names[1]}: raised ValueError: bad {names[1]}; 2 more calls failed or skipped",
    )
    one = check_runs(observed("softmax", _only(names[2], _raised)), "softmax")
    assert one.message == f"fixture {names[2]}: raised RuntimeError: boom"
    two = observed("softmax", _only(names[0], lambda f: skipped, _only(names[3], _raised)))
    assert check_runs(two, "softmax").message == (
        f"fixture {names[3]}: raised RuntimeError: boom; 1 more call failed or skipped"
    )
    only_skipped = observed("softmax", lambda f: skipped, probes=False)
    assert check_runs(only_skipped, "softmax").message.startswith(
        f"fixture {names[0]}: not run: an earlier call hung; "
    )


# -- shape and dtype --------------------------------------------------------------------------


def test_shape_counts_the_return_values_and_names_the_first_misshaped_one():
    n = len(fx.fixtures("softmax")) + len(fx.probes("softmax"))
    fine = check_shape(observed("softmax"), "softmax")
    assert (fine.status, fine.message) == (PASS, f"{n} return values have the contract's shapes")
    first = fx.fixtures("softmax")[0]
    shape = fx.reference_output(first).shape
    bad = check_shape(
        observed("softmax", _only(first.name, lambda f: np.zeros((shape[0], 1)))), "softmax"
    )
    assert (bad.status, bad.fixture) == (FAIL, first.name)
    assert bad.message == (
        f"fixture {first.name}: returned shape ({shape[0]}, 1) where the contract says "
        f"the same shape as x, {shape}"
    )
    none = check_shape(observed("softmax", _raised), "softmax")
    assert (none.status, none.message) == (NOT_RUN, "not run: no call returned")


def test_dtype_passes_the_reference_and_says_how_many_probes_kept_float32():
    fine = check_dtype(observed("softmax"), "softmax")
    assert (fine.status, fine.message) == (
        PASS,
        f"dtypes as the reference's, float32 kept on {len(fx.fixtures('softmax'))} probes",
    )
    mask = check_dtype(observed("causal_mask"), "causal_mask")
    assert (mask.status, mask.message) == (PASS, "dtypes as the reference's")


def test_dtype_names_an_upcast_probe_and_an_integer_mask():
    probe = fx.probes("softmax")[0]
    upcast = _only(probe.name, lambda f: fx.reference_output(f).astype(np.float64))
    result = check_dtype(observed("softmax", upcast), "softmax")
    assert (result.status, result.fixture) == (FAIL, probe.name)
    assert result.message == (
        f"fixture {probe.name}: returned float64 for float32 inputs where the contract "
        "keeps float32"
    )
    first = fx.fixtures("causal_mask")[0]
    ints = _only(first.name, lambda f: fx.reference_output(f).astype(np.int64))
    result = check_dtype(observed("causal_mask", ints), "causal_mask")
    assert result.message == (
        f"fixture {first.name}: returned int64 for its inputs where the contract keeps bool"
    )


def test_dtype_names_the_first_upcast_and_counts_the_others():
    """Only the first fixture was named: a function upcasting on several gave no count."""
    probes = fx.probes("softmax")
    assert len(probes) > 2
    upcast = check_dtype(
        observed("softmax", lambda f: fx.reference_output(f).astype(np.float64)), "softmax"
    )
    assert (upcast.status, upcast.fixture) == (FAIL, probes[0].name)
    assert upcast.message.endswith(f"; {len(probes) - 1} more fixtures return another dtype")
    two = {p.name for p in probes[:2]}

    def upcast_two(fixture):
        out = fx.reference_output(fixture)
        return out.astype(np.float64) if fixture.name in two else out

    one_more = check_dtype(observed("softmax", upcast_two), "softmax")
    assert one_more.message.endswith("; 1 more fixture returns another dtype")


def test_dtype_names_which_array_of_a_tuple_changed_dtype():
    function = "scaled_dot_product_attention"
    probe = fx.probes(function)[0]

    def weights_upcast(fixture):
        out, weights = fx.reference_output(fixture)
        return out, weights.astype(np.float64)

    result = check_dtype(observed(function, _only(probe.name, weights_upcast)), function)
    assert result.message == (
        f"fixture {probe.name}: returned float64 (weights) for float32 inputs where the "
        "contract keeps float32"
    )


def test_dtype_skips_misshaped_values_and_does_not_run_without_a_usable_one():
    first = fx.fixtures("softmax")[0]
    misshaped_and_upcast = _only(first.name, lambda f: np.zeros((1, 1), dtype=np.float16))
    result = check_dtype(observed("softmax", misshaped_and_upcast), "softmax")
    assert result.status == PASS  # the shape check names that value
    none = check_dtype(observed("softmax", lambda f: np.zeros(1)), "softmax")
    assert (none.status, none.message) == (NOT_RUN, "not run: no usable return value")


# -- parity -----------------------------------------------------------------------------------


def test_parity_passes_the_reference_and_notes_the_fixtures_that_failed_to_run():
    n = len(fx.fixtures("softmax")) + len(fx.probes("softmax"))  # the float32 probes too
    fine = check_parity(observed("softmax"), "softmax")
    assert (fine.status, fine.message) == (
        PASS,
        f"{n} fixtures within tolerance v1, max abs error 0 (0 × the tolerance)",
    )
    assert (fine.max_error, fine.margin, fine.mismatch_fraction) == (0.0, 0.0, 0.0)
    assert fine.fixture == _names("softmax")[0]  # all tied at 0: the first
    first = _names("softmax")[0]
    one_failed = check_parity(observed("softmax", _only(first, _raised)), "softmax")
    assert one_failed.message == (
        f"{n - 1} fixtures within tolerance v1, max abs error 0 (0 × the tolerance) "
        "(1 not compared: the call failed)"
    )
    none = check_parity(observed("softmax", _raised), "softmax")
    assert (none.status, none.message) == (NOT_RUN, "not run: no fixture returned")


def test_parity_holds_the_float32_probes_to_float32s_bound():
    """A float32 path was checked for its dtype alone: one that returned zeros passed. Its
    values are compared at float32's bound (1e-2 relative), not float64's."""
    probe = fx.probes("softmax")[0]
    near = check_parity(observed("softmax", _only(probe.name, _off_by(5e-3))), "softmax")
    assert near.status == PASS
    zeros = _only(probe.name, lambda f: np.zeros_like(fx.reference_output(f)))
    result = check_parity(observed("softmax", zeros), "softmax")
    assert (result.status, result.fixture) == (FAIL, probe.name)
    assert result.tolerance == compare.FLOAT32_PARITY_RELATIVE
    assert result.message.startswith(f"fixture {probe.name}: max abs error ")
    assert compare.parity_tolerance(fx.reference_output(fx.fixtures("softmax")[0])) == 1e-10


def test_parity_reports_the_worst_fixture_and_counts_the_others_that_differ():
    names = _names("softmax")
    fixtures = {f.name: f for f in fx.fixtures("softmax")}
    small, large = names[1], names[3]

    def off(fixture):
        if fixture.name == large:
            return fx.reference_output(fixture) + 1e-3  # every element outside
        return _off_by(1e-6 if fixture.name == small else 0.0)(fixture)

    result = check_parity(observed("softmax", off), "softmax")
    worst = compare.compare_value(
        "softmax", off(fixtures[large]), fx.reference_output(fixtures[large])
    )
    assert (result.status, result.fixture) == (FAIL, large)
    assert (result.max_error, result.tolerance, result.margin) == (
        worst.max_error,
        worst.tolerance,
        worst.margin,
    )
    assert result.mismatch_fraction == worst.mismatch_fraction
    assert result.message == (
        f"fixture {_shown(fixtures[large])}: max abs error {num(worst.max_error)} > tolerance "
        f"{num(worst.tolerance)} ({num(worst.margin)} × the tolerance), "
        f"{100 * worst.mismatch_fraction:.0f}% of elements outside; 1 more fixture differs"
    )
    assert "), 100% of elements outside; " in result.message
    three = _only(
        names[1], _off_by(1e-3), _only(names[3], _off_by(1e-3), _only(names[4], _off_by(1e-3)))
    )
    assert check_parity(observed("softmax", three), "softmax").message.endswith(
        "; 2 more fixtures differ"
    )
    all_off = check_parity(observed("softmax", _off_by(1e-3)), "softmax")
    assert all_off.message.endswith(f"; {len(names) - 1} more fixtures differ")
    alone = check_parity(observed("softmax", _only(small, _off_by(1e-6))), "softmax")
    assert alone.message.endswith("% of elements outside") and alone.fixture == small


def test_parity_reports_the_largest_error_and_the_worst_margin_each_from_its_fixture():
    # swiglu_ffn's "3-d" reference is scaled (tolerance ~3.4e-10), "2-d-odd" is not (1e-10):
    # 2 tolerances off on the first is the larger error, 3 on the second the worse margin.
    function = "swiglu_ffn"
    by_name = {f.name: f for f in fx.fixtures(function)}
    tolerance = {
        name: compare.parity_tolerance(fx.reference_output(f)) for name, f in by_name.items()
    }
    assert tolerance["3-d"] > 3 * tolerance["2-d-odd"]

    def off(fixture):
        factor = {"3-d": 2.0, "2-d-odd": 3.0}.get(fixture.name, 0.0)
        return _off_by(factor * tolerance.get(fixture.name, 0.0))(fixture)

    result = check_parity(observed(function, off), function)
    assert (result.status, result.fixture) == (FAIL, "2-d-odd")
    assert result.max_error == pytest.approx(2 * tolerance["3-d"], rel=1e-3)
    assert result.margin == pytest.approx(3.0, rel=1e-3)
    assert result.tolerance == tolerance["2-d-odd"]
    assert result.message.startswith("fixture 2-d-odd: max abs error 3.0e-10 > tolerance ")
    assert result.message.endswith("; 1 more fixture differs")


def _shown(fixture) -> str:
    """A fixture as a parity failure names it: with its note, which often says the bug."""
    return f"{fixture.name} ({fixture.note})" if fixture.note else fixture.name


def test_a_parity_failure_quotes_the_note_of_the_fixture_it_names():
    """scale=0.0 failed as 'values differ' alone; the note says what the fixture holds."""
    zero = next(f for f in fx.fixtures("scaled_dot_product_attention") if f.name == "scale-zero")

    def shifted(fixture):
        out, weights = fx.reference_output(fixture)
        return out + (1.0 if fixture.name.endswith("-float32") else 1e-3), weights

    result = check_parity(
        observed("scaled_dot_product_attention", _only(zero.name, shifted)),
        "scaled_dot_product_attention",
    )
    assert result.message.startswith(
        "fixture scale-zero (scale=0.0: uniform weights over the visible keys, not the default "
        "1/sqrt(D)): max abs error "
    )
    # A float32 probe has no note of its own worth quoting: it is named alone.
    probe = f"{zero.name}-float32"
    result = check_parity(
        observed("scaled_dot_product_attention", _only(probe, shifted)),
        "scaled_dot_product_attention",
    )
    assert result.message.startswith(f"fixture {probe}: max abs error ")


def test_parity_of_a_mask_counts_differing_entries():
    first = fx.fixtures("causal_mask")[0]
    reference = fx.reference_output(first)

    def flipped(fixture):
        out = np.array(reference, copy=True)
        out.flat[: 3 * reference.size // 5] ^= True
        return out

    result = check_parity(observed("causal_mask", _only(first.name, flipped)), "causal_mask")
    percent = 100 * (3 * reference.size // 5) / reference.size
    assert result.message == (
        f"fixture {_shown(first)}: {percent:.0f}% of the entries differ from the reference "
        "(masks are compared exactly)"
    )


def test_parity_names_a_value_it_could_not_compare():
    names = _names("softmax")
    misshaped = _only(names[2], lambda f: np.zeros(1))
    result = check_parity(observed("softmax", misshaped), "softmax")
    assert result.status == FAIL and result.message.startswith(
        f"fixture {names[2]}: not compared: returned shape (1,) where the contract says"
    )
    assert not result.message.endswith("differs")
    two = _only(names[2], lambda f: np.zeros(1), _only(names[4], lambda f: np.zeros(2)))
    assert check_parity(observed("softmax", two), "softmax").message.endswith(
        "; 1 more fixture differs"
    )
    none = check_parity(observed("softmax", lambda f: np.zeros(1)), "softmax")
    calls = len(names) + len(fx.probes("softmax"))  # every fixture, and again in float32
    assert none.status == FAIL and none.message.endswith(f"; {calls - 1} more fixtures differ")
    assert (none.max_error, none.tolerance, none.margin, none.mismatch_fraction) == (None,) * 4
    assert none.fixture is None
    # A value off the tolerance is named before one that could not be compared.
    both = _only(names[2], lambda f: np.zeros(1), _only(names[4], _off_by(1e-3)))
    result = check_parity(observed("softmax", both), "softmax")
    shown = _shown(next(f for f in fx.fixtures("softmax") if f.name == names[4]))
    assert result.message.startswith(f"fixture {shown}: max abs error ")
    assert result.message.endswith("; 1 more fixture differs")


# -- evaluate ---------------------------------------------------------------------------------


def test_evaluate_runs_the_package_checks_then_each_function_s_in_contract_order():
    seen = observed("softmax")
    results = checks.evaluate(seen, ("softmax", "causal_mask"))
    pairs = [(r.function, r.name) for r in results]
    assert pairs[:2] == [(PACKAGE, "loads"), (PACKAGE, "import-policy")]
    assert pairs[2:] == [
        *[("softmax", c.name) for c in checks.applicable("softmax")],
        *[("causal_mask", c.name) for c in checks.applicable("causal_mask")],
    ]
    every = checks.evaluate(seen)
    assert [r.function for r in every if r.name == "contract"] == list(contract.function_names())


def test_evaluate_adds_a_function_s_load_error_and_import_violations_to_its_rows():
    error = Located("room/a.py:7", "syntax error", "rope")
    violation = Located("room/a.py:3", "import torch", "softmax")
    seen = RoomObservation(
        root=Path("room"),
        status="unloadable",
        message="x",
        load_error=error,
        violations=[violation],
    )
    pairs = [(r.function, r.name) for r in checks.evaluate(seen, ("softmax", "rope"))]
    assert pairs[:4] == [
        (PACKAGE, "loads"),
        (PACKAGE, "import-policy"),
        ("rope", "loads"),
        ("softmax", "import-policy"),
    ]
    assert ("rope", "import-policy") not in pairs
    at_package = Located("room/a.py:1", "syntax error", PACKAGE)
    seen.load_error = at_package
    assert [r.function for r in checks.evaluate(seen, ("softmax",))][:3] == [
        PACKAGE,
        PACKAGE,
        "softmax",
    ]


def test_failing_functions_are_listed_once_in_contract_order():
    rows = [
        checks.CheckResult("rope", "parity", FAIL, "x"),
        checks.CheckResult("softmax", "runs", FAIL, "x"),
        checks.CheckResult("softmax", "parity", FAIL, "x"),
        checks.CheckResult("layer_norm", "parity", PASS, "x"),
        checks.CheckResult("rms_norm", "parity", NOT_RUN, "x"),
    ]
    assert checks.failing_functions(rows) == ["softmax", "rope"]


def test_a_result_as_json_keeps_only_the_measures_it_has():
    shown = Msg("{n} fixtures", n=2)
    result = checks.CheckResult("softmax", "parity", PASS, shown)
    assert (result.message, result.shown) == ("2 fixtures", shown)  # English kept, Msg shown
    full = checks.CheckResult(
        "softmax", "parity", checks.FAIL, "off", max_error=2.0, tolerance=1.0, margin=2.0,
        mismatch_fraction=0.5, fixture="f",
    )  # fmt: skip
    assert full.to_json() == {
        "function": "softmax", "name": "parity", "passed": False, "status": "fail",
        "max_error": 2.0, "message": "off", "tolerance": 1.0, "margin": 2.0,
        "mismatch_fraction": 0.5, "fixture": "f",
    }  # fmt: skip
    bare = checks.CheckResult("softmax", "runs", checks.PASS, "ok").to_json()
    assert bare == {
        "function": "softmax", "name": "runs", "passed": True, "status": "pass",
        "max_error": None, "message": "ok",
    }  # fmt: skip
