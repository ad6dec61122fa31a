"""How a lab's measurements become a verdict (`labctl.runner`): judge, run_lab and its fallback
to the reference alone, the option checks, and the JSON a run reports. A toy lab and plain
in-process implementations: no worker, no torch (issue 13's mutation runs)."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from labctl.course import PARTS, Section
from labctl.errors import CallError, LabctlError, UsageError
from labctl.evidence.models import CleanRoomInfo, files_digest
from labctl.i18n import Msg
from labctl.lab import Implementation, Lab, LabOutput, LabParams, Metric, Note, TableFigure
from labctl.runner import (
    MAX_SEED,
    MAX_TIMEOUT_S,
    LabResult,
    MetricResult,
    RunReport,
    check_options,
    isolation_of,
    judge,
    run_lab,
)


class Params(LabParams):
    n: int = 3


METRICS = (
    Metric("exact", "abs", "==0", "an exact zero"),
    Metric("compared", "abs", "<=1e-10", "a comparison", impls=("both",)),
    Metric("speed", "ratio-of-times", ">1", "a timing", impls=("reference",), timing=True),
)


def toy(run) -> Lab:
    return Lab("toy", "Toy", "?", (Section(PARTS, "§6.13", "h"),), Params, METRICS, run)


def impls(*names: str, isolation: str = "process") -> dict[str, Implementation]:
    found = {}
    for name in names:
        impl = Implementation(name, SimpleNamespace())
        impl.isolation = isolation
        found[name] = impl
    return found


def measured(**values):
    """A lab run that reports `values` ({"exact_reference": 0.0, ...}) on every call."""

    def run(ctx):
        output = LabOutput()
        for key, actual in values.items():
            name, impl = key.rsplit("_", 1)
            output.add(name, {"room": "clean-room"}.get(impl, impl), actual)
        output.figures.append(Note("n"))
        return output

    return run


def test_judge_attaches_each_metric_s_tolerance_unit_and_verdict():
    output = LabOutput()
    output.add("exact", "reference", 0.0, note="seen")
    output.add("exact", "clean-room", 1e-300)
    output.add("speed", "reference", 2.0)
    results = judge(toy(None), output, {"reference", "clean-room"})
    assert results == [
        MetricResult("exact", "reference", 0.0, "==0", True, "abs", False, "seen"),
        MetricResult("exact", "clean-room", 1e-300, "==0", False, "abs", False),
        MetricResult("speed", "reference", 2.0, ">1", True, "ratio-of-times", True),
    ]


def test_judge_adds_every_declared_row_left_unmeasured_as_a_failure():
    output = LabOutput()
    output.add("exact", "reference", 0.0)
    results = judge(toy(None), output, {"reference", "clean-room", "both"})
    missing = [(m.name, m.impl) for m in results if m.note == "not measured"]
    assert missing == [("exact", "clean-room"), ("compared", "both"), ("speed", "reference")]
    for m in results[1:]:
        assert math.isnan(m.actual) and not m.passed
        assert (m.expected, m.unit, m.timing) == {
            "exact": ("==0", "abs", False),
            "compared": ("<=1e-10", "abs", False),
            "speed": (">1", "ratio-of-times", True),
        }[m.name]
    # Rows the run does not have are not asked for.
    only = judge(toy(None), output, {"reference"})
    assert [(m.name, m.impl) for m in only] == [("exact", "reference"), ("speed", "reference")]


def test_judge_refuses_a_metric_the_lab_does_not_declare():
    output = LabOutput()
    output.add("made_up", "reference", 0.0)
    with pytest.raises(
        LabctlError, match=r"^lab toy reported a metric it does not declare: made_up$"
    ):
        judge(toy(None), output, {"reference"})


def test_run_lab_judges_every_row_of_the_implementations_it_has():
    both = impls("reference", "clean-room")
    result = run_lab(
        toy(measured(exact_reference=0.0, exact_room=0.0, compared_both=0.0, speed_reference=0.5)),
        5,
        both,
    )
    assert result.error is None and result.passed  # the failing timing row decides nothing
    assert [(m.name, m.impl, m.passed) for m in result.metrics] == [
        ("exact", "reference", True),
        ("exact", "clean-room", True),
        ("compared", "both", True),
        ("speed", "reference", False),
    ]
    assert result.failures() == []
    assert [type(f) for f in result.figures] == [Note]
    assert result.params == Params() and 0 < result.wall_time_s < 60
    assert result.lab.id == "toy"
    # One implementation: no comparison row is asked for.
    alone = run_lab(toy(measured(exact_reference=0.0, speed_reference=2.0)), 5, impls("reference"))
    assert alone.passed and [m.impl for m in alone.metrics] == ["reference", "reference"]


def test_a_failing_row_fails_the_lab_and_is_listed():
    run = measured(exact_reference=0.25, exact_room=0.0, compared_both=0.0, speed_reference=2.0)
    result = run_lab(toy(run), 5, impls("reference", "clean-room"))
    assert not result.passed
    assert result.failures() == ["exact (reference): 0.25 does not satisfy ==0"]


def test_the_seed_and_params_reach_the_lab():
    seen = {}

    def run(ctx):
        seen.update(seed=ctx.seed, n=ctx.params.n, impls=sorted(ctx.impls))
        return LabOutput()

    run_lab(toy(run), 7, impls("reference"), Params(n=9))
    assert seen == {"seed": 7, "n": 9, "impls": ["reference"]}


def test_a_failing_clean_room_keeps_the_reference_s_numbers():
    seen = []

    def run(ctx):
        seen.append((sorted(ctx.impls), ctx.seed, ctx.params.n))
        if "clean-room" in ctx.impls:
            raise CallError("softmax", "exception", "boom", exc_type="ValueError")
        output = LabOutput()
        output.add("exact", "reference", 0.0)
        output.figures.append(Note("from the reference"))
        return output

    result = run_lab(toy(run), 7, impls("reference", "clean-room"), Params(n=9))
    assert seen == [(["clean-room", "reference"], 7, 9), (["reference"], 7, 9)]
    assert result.error == "clean room failed: softmax: raised ValueError: boom"
    assert [(m.name, m.impl, m.passed) for m in result.metrics] == [
        ("exact", "reference", True),
        ("exact", "clean-room", False),
        ("compared", "both", False),
        ("speed", "reference", False),
    ]
    assert [str(f.text) for f in result.figures] == ["from the reference"]
    assert not result.passed
    assert result.failures() == [
        "clean room failed: softmax: raised ValueError: boom",
        "exact (clean-room): nan does not satisfy ==0 (not measured)",
        "compared (both): nan does not satisfy <=1e-10 (not measured)",
    ]


def test_when_the_reference_alone_fails_too_both_failures_are_shown():
    def run(ctx):
        if "clean-room" in ctx.impls:
            raise CallError("softmax", "timeout", "stopped")
        raise RuntimeError("no torch")

    result = run_lab(toy(run), 5, impls("reference", "clean-room"))
    assert result.error == (
        "clean room failed: softmax: stopped; the reference alone failed too: no torch"
    )
    assert result.metrics == []


def test_a_clean_room_alone_that_fails_is_not_run_again():
    calls = []

    def run(ctx):
        calls.append(sorted(ctx.impls))
        raise CallError("softmax", "crash", "killed")

    result = run_lab(toy(run), 5, impls("clean-room"))
    assert calls == [["clean-room"]] and result.error == "clean room failed: softmax: killed"
    calls.clear()
    result = run_lab(toy(run), 5, impls("reference"))
    assert calls == [["reference"]] and result.error == "clean room failed: softmax: killed"


def test_lab_errors_and_crashes_are_named_and_debug_lets_a_crash_through(monkeypatch):
    def refused(ctx):
        raise LabctlError("refused by the lab")

    assert run_lab(toy(refused), 5, impls("reference")).error == "refused by the lab"

    def crash(ctx):
        raise KeyError("k")

    monkeypatch.delenv("LABCTL_DEBUG", raising=False)
    assert run_lab(toy(crash), 5, impls("reference")).error == "lab crashed: KeyError: 'k'"
    monkeypatch.setenv("LABCTL_DEBUG", "1")
    with pytest.raises(KeyError):
        run_lab(toy(crash), 5, impls("reference"))


def test_results_as_json():
    metric = MetricResult("exact", "reference", 0.5, "==0", False, "abs", False)
    assert metric.to_json() == {
        "name": "exact", "impl": "reference", "actual": 0.5, "expected": "==0",
        "passed": False, "unit": "abs", "timing": False,
    }  # fmt: skip
    noted = MetricResult("exact", "reference", 0.5, "==0", False, "abs", False, "why")
    assert noted.to_json()["note"] == "why"
    table = TableFigure(Msg("T {x}", x=1), ["a", Msg("b")], [[Msg("m"), 1.5, None]])
    lab = LabResult(
        toy(None), [metric], [table, Note("n", flag=True)], None, 1.23456, [Path("r/a.json")],
        Params(n=4),
    )  # fmt: skip
    data = lab.to_json(lambda p: f"<{p}>")
    assert data == {
        "id": "toy", "title": "Toy", "sections": [str(lab.lab.sections[0])], "passed": False,
        "error": None, "wall_time_s": 1.235, "params": {"n": 4}, "params_default": False,
        "params_changed": ["n"], "metrics": [metric.to_json()],
        "notes": [{"text": "n", "flag": True}],
        "tables": [{"title": "T 1", "columns": ["a", "b"], "rows": [["m", 1.5, None]]}],
        "records": ["<r/a.json>"],
    }  # fmt: skip
    plain = LabResult(toy(None), params=Params()).to_json(str)
    assert (plain["params_default"], plain["params_changed"]) == (True, [])
    assert LabResult(toy(None)).to_json(str)["params"] is None
    room = CleanRoomInfo(path="room", sha256=files_digest({}), own=False, files={})
    report = RunReport([lab], 5, "both", room, 2.4567, "sandbox")
    assert report.to_json(str) == {
        "passed": False, "seed": 5, "impl": "both",
        "clean_room": {"path": "room", "sha256": files_digest({}), "own": False, "contract": 1},
        "isolation": "sandbox", "tolerances": report.to_json(str)["tolerances"],
        "wall_time_s": 2.457, "labs": [lab.to_json(str)],
    }  # fmt: skip
    assert RunReport([], 5, "both", None, 0.0).passed


def test_isolation_is_the_clean_room_s():
    assert isolation_of(impls("reference", "clean-room", isolation="sandbox")) == "sandbox"
    assert isolation_of(impls("reference")) is None


_TIMEOUT = "--timeout must be a number of seconds above 0 and at most 3600, got "


@pytest.mark.parametrize(
    ("seed", "impl", "timeout", "says"),
    [
        (-1, "both", 60.0, f"--seed must be an integer from 0 to {MAX_SEED}, got -1"),
        (
            MAX_SEED + 1,
            "both",
            60.0,
            f"--seed must be an integer from 0 to {MAX_SEED}, got {MAX_SEED + 1}",
        ),
        (5, "torch", 60.0, "--impl must be one of reference, clean-room, both, got 'torch'"),
        (5, "both", 0.0, _TIMEOUT + "0.0"),
        (5, "both", MAX_TIMEOUT_S + 1, _TIMEOUT + "3601.0"),
        (5, "both", math.nan, _TIMEOUT + "nan"),
        (5, "both", math.inf, _TIMEOUT + "inf"),
    ],
)
def test_bad_options_are_usage_errors(tmp_path, seed, impl, timeout, says):
    with pytest.raises(UsageError) as refused:
        check_options(seed, impl, timeout, tmp_path)
    assert str(refused.value) == says


def test_options_at_their_bounds_are_accepted(tmp_path):
    for seed in (0, MAX_SEED):
        check_options(seed, "both", MAX_TIMEOUT_S, tmp_path / "new" / "deeper")
    for impl in ("reference", "clean-room"):
        check_options(5, impl, 0.001, tmp_path)


def test_an_out_dir_under_a_file_or_a_dangling_link_is_refused(tmp_path):
    afile = tmp_path / "f"
    afile.write_text("x")
    with pytest.raises(UsageError, match=f"^--out {afile}/x: {afile} is not a directory$"):
        check_options(5, "both", 60.0, afile / "x")
    link = tmp_path / "l"
    link.symlink_to(tmp_path / "gone")
    with pytest.raises(UsageError, match=f"^--out {link}: a dangling symbolic link$"):
        check_options(5, "both", 60.0, link)


def test_an_out_dir_on_a_filesystem_that_takes_no_files_is_refused():
    # /proc exists on every Linux and takes no new files, even from root.
    out = Path("/proc/labctl-test-out")
    with pytest.raises(UsageError) as refused:
        check_options(5, "both", 60.0, out)
    assert str(refused.value) == f"--out {out}: /proc is not writable"


def test_run_labs_checks_runs_records_and_reports(tmp_path, monkeypatch):
    from labctl import registry, runner

    run = measured(exact_reference=0.0, speed_reference=2.0)
    monkeypatch.setattr(registry, "resolve", lambda ids: [toy(run)] if ids == ["toy"] else [])
    monkeypatch.chdir(tmp_path)
    seen = []
    report = runner.run_labs(
        ["toy"],
        seed=11,
        impl="reference",
        out=tmp_path / "runs",
        progress=lambda lab, i, n: seen.append((lab.id, i, n)),
        settings=["toy.n=4"],
    )
    assert seen == [("toy", 0, 1)]
    assert (report.seed, report.impl, report.clean_room, report.isolation) == (
        11,
        "reference",
        None,
        None,
    )
    assert report.passed and 0 < report.wall_time_s < 60
    (lab,) = report.labs
    assert lab.params == Params(n=4) and [m.impl for m in lab.metrics] == ["reference"] * 2
    records = sorted(p.name for p in (tmp_path / "runs" / "toy").iterdir())
    assert any(name.endswith(".json") for name in records)
    assert [p.name for p in lab.records] and all(p.exists() for p in lab.records)
    with pytest.raises(UsageError):
        runner.run_labs(["toy"], seed=-1, impl="reference", out=tmp_path / "runs")


def test_the_default_clean_room_is_the_working_directory_s_package_else_the_project_s(
    tmp_path, monkeypatch
):
    from labctl import runner

    monkeypatch.chdir(tmp_path)
    project = runner.default_clean_room()
    assert project.name == "clean_room" and (project / "__init__.py").is_file()
    import labctl.clean_room

    assert project.resolve() == Path(labctl.clean_room.__file__).resolve().parent
    (tmp_path / "clean_room").mkdir()
    # a folder without __init__.py is a room half made, refused: not passed over for labctl's
    with pytest.raises(UsageError, match=r"\./clean_room is here but is not a package"):
        runner.default_clean_room()
    (tmp_path / "clean_room" / "__init__.py").write_text("")
    assert runner.default_clean_room() == Path("clean_room")


def test_run_labs_with_both_implementations_records_the_clean_room_and_its_isolation(
    tmp_path, monkeypatch
):
    import json

    from labctl import registry, runner
    from labctl.evidence.records import shown_path

    seen = []

    def run(ctx):
        seen.append((ctx.seed, sorted(ctx.impls)))
        return measured(
            exact_reference=0.0, exact_room=0.0, compared_both=0.0, speed_reference=2.0
        )(ctx)

    monkeypatch.setattr(registry, "resolve", lambda ids: [toy(run)])
    monkeypatch.chdir(tmp_path)
    report = runner.run_labs(["toy"], seed=3, out=tmp_path / "runs")  # impl both, isolation auto
    assert seen == [(3, ["clean-room", "reference"])]
    assert report.impl == "both" and report.isolation in ("sandbox", "process")
    # No ./clean_room: labctl's own ran, and the report and the record say so.
    assert report.clean_room.path == shown_path(runner.default_clean_room())
    assert report.clean_room.own is True
    assert report.to_json(str)["clean_room"] == report.clean_room.model_dump(
        include={"path", "sha256", "own", "contract"}
    )
    assert report.passed
    (lab,) = report.labs
    record = json.loads(next(p for p in lab.records if p.suffix == ".json").read_text())
    assert record["seed"] == 3
    assert (record["labctl"]["impl"], record["labctl"]["isolation"]) == ("both", report.isolation)
    assert record["labctl"]["clean_room"] == report.clean_room.model_dump()


def test_run_labs_runs_the_clean_room_it_is_given_under_the_isolation_asked_for(
    tmp_path, monkeypatch
):
    import numpy as np
    from labtools import faulty_room

    from labctl import registry, runner

    def run(ctx):
        # softmax-no-max overflows at |x| ~ 1e3: the project's room does not.
        weights = ctx.impls["clean-room"].softmax(np.array([1000.0, 0.0]))
        output = LabOutput()
        output.add("exact", "clean-room", float(not np.all(np.isfinite(weights))))
        return output

    monkeypatch.setattr(registry, "resolve", lambda ids: [toy(run)])
    monkeypatch.chdir(tmp_path)
    room = faulty_room(tmp_path, "softmax-no-max")
    report = runner.run_labs(
        ["toy"], impl="clean-room", clean_room=room, out=tmp_path / "runs", isolation="process"
    )
    assert report.isolation == "process"
    (lab,) = report.labs
    measured = [(m.name, m.impl, m.passed) for m in lab.metrics if m.measured]
    assert measured == [("exact", "clean-room", False)]
    assert lab.metrics[0].actual == 1.0
    # The reference runs hidden beside the room (issue 38): its comparison row is asked for,
    # and this toy, which never compares, leaves it unmeasured; the reference shows no row.
    assert [(m.name, m.impl) for m in lab.metrics if not m.measured] == [("compared", "both")]


def test_a_result_made_with_an_error_shows_that_error_and_fail_keeps_english():
    """`error` is English for --json and records; `shown_error` is what the terminal
    translates: given at construction, or by `fail` as a message."""
    made = LabResult(toy(measured()), error="a lab that could not start")
    assert made.shown_error == "a lab that could not start"
    message = Msg("clean room failed: {error}", error="boom")
    made.fail(message)
    assert made.error == "clean room failed: boom" and made.shown_error is message
