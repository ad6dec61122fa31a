"""An evidence record's metric claims against the tolerance table (`labctl.evidence.claims`)
and how a validation report names and orders what it found (`labctl.evidence.findings`):
each rule on a record built here, no repository and no lab run, asserting the exact
problem or warning a learner reads (issue 13's mutation runs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from labctl.evidence import claims, findings, modules
from labctl.evidence.findings import Report

# Rows of the live table: causal-attention's, and a timing metric of kv-cache.
FUTURE = "future_weight_max"  # ==0, probability, reference and clean-room
SDPA = "sdpa_allclose_ratio"  # <=1 (v4), ratio, clean-room only
RETIRED = "sdpa_max_error"  # <=1e-5 in v1 and v2, <=1e-6 in v3; v4 measures SDPA as SDPA above
TIMING = "decode_time_ratio[T=64]"  # >1, ratio-of-times, timing


def row(name=FUTURE, **fields) -> dict:
    return {"name": name, "expected": "==0", "actual": 0.0, **fields}


def checked(*rows, module: modules.Module | None = None, tolerances: str | None = None) -> Report:
    data = {"metrics": list(rows)}
    if tolerances is not None:
        data["labctl"] = {"tolerances": tolerances}
    report = Report(path=Path("e.yaml"), data=data, module=module)
    claims.check_metrics(data, report)
    return report


def said(problems) -> list[str]:
    return [str(p) for p in problems]


def test_a_claim_as_the_table_has_it_raises_nothing():
    report = checked(
        row(impl="clean-room", unit="probability", timing=False, passed=True),
        row(impl="reference"),
    )
    assert (report.problems, report.warnings) == ([], [])


def test_a_claim_on_an_implementation_the_table_does_not_measure_is_refused():
    report = checked(row(SDPA, expected="<=1", impl="reference"))
    assert said(report.problems) == [
        "metrics[0] (sdpa_allclose_ratio, reference): impl sdpa_allclose_ratio is measured on "
        "clean-room, not reference"
    ]


def test_a_reference_only_claim_is_a_warning_unless_the_record_claims_the_metric_again():
    alone = checked(row(impl="reference"))
    assert alone.problems == []
    assert said(alone.warnings) == [
        "metrics[0] (future_weight_max, reference): impl is 'reference' only: it says nothing "
        "about a clean room"
    ]
    assert checked(row(impl="reference"), row(impl="clean-room")).warnings == []
    # A metric measured on the reference only would not be warned about: none is, but a
    # clean-room-only one claimed on the reference is refused above, never warned.


def test_a_required_metric_claimed_on_the_reference_only_is_refused():
    """A learner relabelled a clean-room row 'reference': accepted with a warning, though the
    module requires that metric of the learner's room."""
    module = modules.Module(id="t", title="t", section="t", required=(FUTURE,))
    report = checked(row(impl="reference"), module=module)
    assert said(report.problems) == [
        "metrics[0] (future_weight_max, reference): impl is 'reference' only: module t requires "
        "future_weight_max of your clean room; claim it with impl 'clean-room'"
    ]
    assert checked(row(impl="clean-room"), module=module).problems == []


def test_an_expected_that_is_not_the_table_s_is_refused_and_another_spelling_is_not():
    report = checked(row(expected="<=0.1"))
    assert said(report.problems) == [
        "metrics[0] (future_weight_max, clean-room): expected '<=0.1' is not the v4 tolerance "
        "of future_weight_max ('==0')"
    ]
    assert checked(row(expected="== 0.0")).problems == []
    unreadable = checked(row(expected="about zero"))
    assert said(unreadable.problems)[0].endswith(
        "expected 'about zero' is not the v4 tolerance of future_weight_max ('==0')"
    )


def test_timing_and_unit_must_be_the_table_s():
    report = checked(row(timing=True, unit="abs"))
    assert said(report.problems) == [
        "metrics[0] (future_weight_max, clean-room): timing future_weight_max is not a "
        "timing metric",
        "metrics[0] (future_weight_max, clean-room): unit future_weight_max is measured in "
        "'probability', not 'abs'",
    ]
    timing = checked(row(TIMING, expected=">1", actual=2.0, timing=False))
    assert said(timing.problems) == [
        "metrics[0] (decode_time_ratio[T=64], clean-room): timing decode_time_ratio[T=64] is "
        "a timing metric"
    ]


def test_an_actual_outside_its_tolerance_is_refused_unless_the_metric_is_timing():
    report = checked(row(actual=0.5))
    assert said(report.problems) == [
        "metrics[0] (future_weight_max, clean-room): actual 0.5 does not satisfy ==0"
    ]
    slow = checked(row(TIMING, expected=">1", actual=0.5, passed=True))
    assert slow.problems == []
    assert said(slow.warnings) == [
        "metrics[0] (decode_time_ratio[T=64], clean-room): actual 0.5 does not satisfy >1 "
        "(timing: informative only)"
    ]


@pytest.mark.parametrize("actual", [float("inf"), float("-inf"), float("nan")])
def test_an_actual_that_is_not_finite_is_refused(actual):
    report = checked(row(actual=actual))
    assert [(p.field, p.reason) for p in report.problems] == [
        ("metrics[0].actual", "must be a finite number")
    ]


def test_the_passed_flag_must_say_what_the_actual_does():
    claims_false = checked(row(actual=0.0, passed=False))
    assert said(claims_false.problems) == [
        "metrics[0] (future_weight_max, clean-room): passed says False, but 0.0 satisfies ==0"
    ]
    claims_true = checked(row(actual=0.5, passed=True))
    assert said(claims_true.problems)[-1] == (
        "metrics[0] (future_weight_max, clean-room): passed says True, but 0.5 does not satisfy ==0"
    )
    # A timing metric's flag decides nothing: either way is accepted.
    assert checked(row(TIMING, expected=">1", actual=2.0, passed=False)).problems == []


def test_an_unknown_metric_is_a_warning_and_is_judged_by_its_own_expected():
    report = checked(row("my_metric", expected="<=1", actual=2.0))
    assert said(report.warnings) == [
        "metrics[0] (my_metric): name 'my_metric' is not in the tolerance table v4; no lab "
        "measures it, so it cannot be re-measured"
    ]
    assert said(report.problems) == ["metrics[0] (my_metric): actual 2.0 does not satisfy <=1"]
    assert checked(row("my_metric", expected="whatever", actual=2.0)).problems == []


def test_a_claim_made_twice_on_one_implementation_is_refused():
    report = checked(row(), row(actual=0.0, impl="clean-room"), row(impl="reference"))
    assert said(report.problems) == [
        "metrics[1] (future_weight_max, clean-room): name 'future_weight_max' (clean-room) is "
        "claimed twice (first at metrics[0])"
    ]
    unknown = checked(row("mine", expected="<=1"), row("mine", expected="<=1"))
    assert said(unknown.problems) == [
        "metrics[1] (mine): name 'mine' is claimed twice (first at metrics[0])"
    ]
    assert checked(row("mine", impl="reference"), row("mine", impl="clean-room")).problems == []


def test_rows_that_are_not_claims_are_left_to_the_schema():
    report = checked("text", {"expected": "==0"}, {"name": 3}, row(actual=1.0))
    assert [p.field for p in report.problems] == ["metrics[3].actual"]
    data = {"metrics": {"name": FUTURE}}
    report = Report(path=Path("e.yaml"), data=data)
    claims.check_metrics(data, report)
    assert report.problems == []


def test_a_field_already_refused_is_not_judged_again():
    data = {"metrics": [row(impl="nowhere", expected="<=9", actual=7.0)]}
    report = Report(path=Path("e.yaml"), data=data)
    for field in ("impl", "expected", "actual"):
        report.refuse(f"metrics[0].{field}", "schema says no")
    claims.check_metrics(data, report)
    assert [p.reason for p in report.problems] == ["schema says no"] * 3
    named = Report(path=Path("e.yaml"), data=data)
    named.refuse("metrics[0].name", "schema says no")
    claims.check_metrics(data, named)
    assert [p.reason for p in named.problems] == ["schema says no"]


def test_every_required_metric_must_be_claimed_unless_the_list_itself_is_refused():
    module = modules.Module(id="m1", title="t", section="tests", required=(FUTURE, SDPA))
    report = checked(row(), module=module)
    assert said(report.problems) == [
        "metrics: required metric 'sdpa_allclose_ratio' missing (module m1)"
    ]
    data = {"metrics": [row()]}
    refused = Report(path=Path("e.yaml"), data=data, module=module)
    refused.refuse("metrics", "must be a list")
    claims.check_metrics(data, refused)
    assert said(refused.problems) == ["metrics: must be a list"]


# -- the report -------------------------------------------------------------------------------


def test_a_problem_inside_a_claim_names_its_metric_and_implementation():
    data = {"metrics": [row(impl="reference"), row(), {"name": 3}, row("mine"), "x"]}
    report = Report(path=Path("e.yaml"), data=data)
    for field in (
        "metrics[0].actual",
        "metrics[1]",
        "metrics[2].name",
        "metrics[3].impl",
        "metrics[4]",
        "metrics[9].actual",
        "seed",
    ):
        report.refuse(field, "r")
    assert [(p.metric, p.impl) for p in report.problems] == [
        (FUTURE, "reference"),
        (FUTURE, "clean-room"),  # no impl: the clean room's row
        (None, None),
        ("mine", None),
        (None, None),
        (None, None),
        (None, None),
    ]
    report.warn("metrics[0].impl", "w")
    assert (report.warnings[0].metric, report.warnings[0].impl) == (FUTURE, "reference")
    assert Report(path=Path("e"), data=["metrics"])._claim("metrics[0]") == (None, None)


def test_a_refused_field_flags_itself_and_the_fields_around_it_but_a_warning_does_not():
    report = Report(path=Path("e.yaml"))
    report.warn("seed", "w")
    assert not report.flagged("seed") and report.valid
    report.refuse("metrics[2].actual", "r")
    assert [report.flagged(f) for f in ("metrics", "metrics[2]", "metrics[2].actual")] == [True] * 3
    assert not report.flagged("metrics[1]") and not report.valid


def test_problems_are_listed_once_in_the_record_s_field_order():
    report = Report(path=Path("e.yaml"))
    for field in ("zzz", "metrics[10].actual", "seed", "metrics[2]", "file", "seed", "schema"):
        report.refuse(field, "r")
    report.warn("known_failures", "w")
    report.warn("module", "w")
    report.tidy()
    assert [p.field for p in report.problems] == [
        "file",
        "schema",
        "seed",
        "metrics[2]",
        "metrics[10].actual",
        "zzz",
    ]
    assert [p.field for p in report.warnings] == ["module", "known_failures"]
    assert findings.FIELD_ORDER[:4] == ("file", "(document)", "schema", "module")


def test_field_paths_and_their_ancestors():
    assert findings.field_path(("metrics", 2, "actual")) == "metrics[2].actual"
    assert findings.field_path((0, "a")) == "[0].a"
    assert findings.field_path(()) == "(document)"
    assert findings.ancestors("metrics[2].actual") == ["metrics", "metrics[2]", "metrics[2].actual"]
    assert findings.ancestors("seed") == ["seed"]
    assert findings.ancestors("[0].a") == ["[0]", "[0].a"]


def test_numbers_courses_and_claimed_rows():
    assert [findings.is_number(v) for v in (1, 1.5, True, "1", None)] == [
        True,
        True,
        False,
        False,
        False,
    ]
    assert findings.course_module(modules.MODULES[-1].id) is modules.MODULES[-1]
    assert findings.course_module("no-such-module") is None
    from labctl import registry

    table = registry.metric_table()
    future, sdpa = table[FUTURE][1], table[SDPA][1]
    both = table["reference_output_max_error"][1]
    assert findings.claim_impl(future, "reference") == "reference"
    assert findings.claim_impl(future, None) == "clean-room"
    assert findings.claim_impl(future, "both") == "clean-room"  # not one of its rows
    assert findings.claim_impl(sdpa, "reference") == "clean-room"
    assert findings.claim_impl(both, None) == "both"


def test_a_known_metric_s_actual_is_judged_by_the_table_not_by_the_claim():
    report = checked(row(expected="<=1", actual=0.5))
    assert said(report.problems) == [
        "metrics[0] (future_weight_max, clean-room): expected '<=1' is not the v4 tolerance of "
        "future_weight_max ('==0')",
        "metrics[0] (future_weight_max, clean-room): actual 0.5 does not satisfy ==0",
    ]


def test_a_claim_on_no_row_of_a_two_row_metric_names_both_rows():
    report = checked(row(impl="both"))
    assert said(report.problems)[0].endswith(
        "impl future_weight_max is measured on reference, clean-room, not both"
    )


def test_an_unknown_metric_without_a_text_impl_is_one_claim_however_the_impl_is_written():
    report = checked(row("mine", expected="<=1", impl=5), row("mine", expected="<=1"))
    assert said(report.problems) == [
        "metrics[1] (mine): name 'mine' is claimed twice (first at metrics[0])"
    ]


def test_a_problem_about_a_whole_list_comes_before_those_about_its_items():
    report = Report(path=Path("e.yaml"))
    report.refuse("metrics[0].actual", "r")
    report.refuse("metrics", "r")
    report.tidy()
    assert [p.field for p in report.problems] == ["metrics", "metrics[0].actual"]


def test_ancestors_cut_at_dots_and_brackets_only_and_from_the_second_character():
    assert findings.ancestors("a[0]") == ["a", "a[0]"]
    assert findings.ancestors("aXb.c") == ["aXb", "aXb.c"]


def test_a_problem_one_past_the_last_claim_names_no_claim():
    data = {"metrics": [row()]}
    report = Report(path=Path("e.yaml"), data=data)
    report.refuse("metrics[1].actual", "r")
    assert (report.problems[0].metric, report.problems[0].impl) == (None, None)


def test_a_record_is_judged_under_the_tolerance_table_it_names():
    """v3 tightened sdpa_max_error to the chapter's 1e-6; a record made under v2 keeps 1e-5.
    v4 retired it (the chapter's allclose is sdpa_allclose_ratio): a record of v1 to v3 is
    still judged as its table declared it; under v4 no lab measures it."""
    claim = row(RETIRED, expected="<=1e-5", actual=5e-6, impl="clean-room", passed=True)
    assert checked(dict(claim), tolerances="v2").problems == []
    now = said(checked(dict(claim), tolerances="v3").problems)
    assert now == [
        "metrics[0] (sdpa_max_error, clean-room): expected '<=1e-5' is not the v3 tolerance of "
        "sdpa_max_error ('<=1e-6')",
        "metrics[0] (sdpa_max_error, clean-room): actual 5e-06 does not satisfy <=1e-6",
        "metrics[0] (sdpa_max_error, clean-room): passed says True, but 5e-06 does not satisfy "
        "<=1e-6",
    ]
    live = checked(dict(claim), tolerances="v4")
    assert live.problems == []
    assert said(live.warnings) == [
        "metrics[0] (sdpa_max_error, clean-room): name 'sdpa_max_error' is not in the tolerance "
        "table v4; no lab measures it, so it cannot be re-measured"
    ]
    # a version labctl never had is judged under the live table, not trusted
    unknown = checked(dict(claim), tolerances="v9")
    assert (unknown.problems, said(unknown.warnings)) == ([], said(live.warnings))
