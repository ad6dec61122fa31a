"""Serial, `--jobs 2` and a two-worker Dask cluster grade a class to the same rows.

Two classes, each graded the three ways. The first has no submission (nothing to
re-measure, so each learner takes seconds) and one room of each row a room that
verifies gives: full points, a fault and its diagnosis, the stubs, a clean room that
crashes mid-verify (test_grade.py grades the other faults, each another such row).
The second holds the learners that never reach verify, the hanging one among them:
its import never returns, and the learner's time limit stops it with a `hang` row
while the batch goes on. That class gets a short limit (`HANG_TIMEOUT`), which the
others there meet with room to spare, so the hang costs each batch 7 s (the limit,
then the hard stop), not the 45 s it costs under the 40 s a verifying room may need.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from gradetools import (
    CALL_TIMEOUT,
    HANG_TIMEOUT,
    LEARNER_TIMEOUT,
    build_hang_class,
    copy_room,
    crashing_room,
    rubric_without,
)
from honestrooms import honest_fault

from labctl.grade.rubric import load_rubric
from labctl.grade.runner import GradeOptions, grade_class
from labctl.verify.stubs import init_clean_room


def comparable(batch) -> list[tuple]:
    """Everything a row decides (not when, nor how long it took)."""
    return [
        (
            r.learner,
            r.status,
            r.score,
            r.isolation,
            r.diagnosis,
            [(i.id, i.points, i.passed, i.message) for i in r.items],
        )
        for r in batch.rows
    ]


CLASSES = {"class": LEARNER_TIMEOUT, "hang-class": HANG_TIMEOUT}


def build_verifying_class(root: Path) -> dict[str, str]:
    """A learner of each row a room that verifies gives; returns {learner: what it is}."""
    copy_room(root / "no-submission" / "clean_room")
    # A fault the functions built on the mask inherit: points lost under cascade, a diagnosis.
    honest_fault("mask-reversed", root / "fault-mask-reversed" / "clean_room")
    init_clean_room(root / "stubs" / "clean_room")
    return {
        "no-submission": "correct, no submission",
        "fault-mask-reversed": "fault mask-reversed",
        "stubs": "clean-room init stubs",
        **crashing_room(root),
    }


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    base = tmp_path_factory.mktemp("parallel")
    cases = {**build_verifying_class(base / "class"), **build_hang_class(base / "hang-class")}
    rubric = load_rubric(rubric_without(base, "metric", "submission"))
    # One seed for the three batches, so their gradebooks can be compared byte for byte.
    options = {
        name: GradeOptions(timeout_s=CALL_TIMEOUT, learner_timeout_s=float(limit), jobs=1, seed=5)
        for name, limit in CLASSES.items()
    }
    serial = {
        name: grade_class(base / name, base / f"{name}-serial", rubric, options[name])
        for name in CLASSES
    }
    return base, cases, rubric, options, serial


def _grade_both(base, rubric, options, run: str, **changes):
    return {
        name: grade_class(
            base / name,
            base / f"{name}-{run}",
            rubric,
            GradeOptions(**{**options[name].__dict__, **changes}),
        )
        for name in CLASSES
    }


def test_the_serial_run_names_the_hang_and_goes_on(setup):
    _, cases, _, _, serial = setup
    rows = {r.learner: r for batch in serial.values() for r in batch.rows}
    assert sorted(rows) == sorted(cases)
    assert rows["hanging"].status == "hang" and rows["hanging"].score == 0
    assert f"{float(HANG_TIMEOUT):g} s" in rows["hanging"].diagnosis
    # The hanging learner is not the last one: the batch went on past it.
    assert rows["malformed"].status == "layout-error"
    assert rows["torch-importer"].score == 0
    assert "import policy" in rows["torch-importer"].diagnosis
    assert rows["no-submission"].status == "graded"
    assert rows["no-submission"].score == rows["no-submission"].max_score
    # No learner of the class of rooms that verify came near its limit.
    assert all(r.status != "hang" for r in serial["class"].rows)


def test_two_local_workers_agree_with_the_serial_run(setup):
    base, _, rubric, options, serial = setup
    two = _grade_both(base, rubric, options, "jobs2", jobs=2)
    for name in CLASSES:
        assert comparable(two[name]) == comparable(serial[name]), name


def _distributed():
    """Dask's `distributed`: the dev extra installs it, so under CI=true it must be there."""
    if os.environ.get("CI") == "true":
        import distributed

        return distributed
    return pytest.importorskip("distributed", reason="the optional extra labctl[dask]")


def test_a_two_worker_dask_cluster_agrees_with_the_serial_run(setup):
    distributed = _distributed()
    base, _, rubric, options, serial = setup
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        on_dask = _grade_both(base, rubric, options, "dask", scheduler=cluster.scheduler_address)
    for name in CLASSES:
        assert comparable(on_dask[name]) == comparable(serial[name]), name


def test_an_unreachable_scheduler_is_a_usage_error(setup, tmp_path, monkeypatch):
    _distributed()
    from labctl.errors import UsageError
    from labctl.grade import dask_exec

    monkeypatch.setattr(dask_exec, "CONNECT_TIMEOUT_S", 2.0)  # what is said, not how long

    base, _, rubric, options, _ = setup
    dead = GradeOptions(**{**options["class"].__dict__, "scheduler": "tcp://127.0.0.1:9"})
    with pytest.raises(UsageError, match="Dask scheduler"):
        grade_class(base / "class", tmp_path / "out", rubric, dead)


def test_outputs_of_the_three_runs_match_byte_for_byte_where_no_time_is_written(setup):
    base = setup[0]
    _distributed()
    if not (base / "class-dask").exists():
        # It comes from the test above; run alone, this one has nothing to compare.
        if os.environ.get("CI") == "true":
            pytest.fail("the Dask run did not happen: test_a_two_worker_dask_cluster_... failed")
        pytest.skip("the Dask run did not happen (run the test above first)")
    for klass in CLASSES:
        for name in ("gradebook.csv", "junit.xml"):
            runs = ("serial", "jobs2", "dask")
            texts = {(base / f"{klass}-{run}" / name).read_bytes() for run in runs}
            assert len(texts) == 1, (klass, name)


def test_the_reference_is_cached_on_disk_once_for_the_batch(setup):
    base = setup[0]
    cached = list((base / "class-serial" / ".reference-cache").glob("reference-*.bin"))
    assert len(cached) == 1
    assert Path(cached[0]).stat().st_size > 0
