"""Hygiene of a batch: a closed stdout ends quietly; Dask-side grading workers are closed;
what a learner's room prints is counted, capped and flagged in the gradebook."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from gradetools import append, copy_room

from labctl.grade.rubric import parse_rubric
from labctl.grade.runner import GradeOptions, grade_class

ROOT = Path(__file__).resolve().parents[1]
LABCTL = "import sys; sys.argv[0] = 'labctl'; from labctl.cli.entry import main; main()"
RUBRIC = """schema: labctl.rubric.v1
name: one function
items:
  - {id: fn.softmax, kind: function, target: softmax, points: 1}
"""


def closed_stdout(*args: str) -> tuple[int, str]:
    """labctl with its stdout's reader gone before it writes (`labctl ... | head -c 0`)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), NO_COLOR="1")
    proc = subprocess.Popen(
        [sys.executable, "-c", LABCTL, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=ROOT,
    )
    proc.stdout.close()
    stderr = proc.stderr.read().decode("utf-8", "replace")
    return proc.wait(timeout=120), stderr


@pytest.mark.parametrize("args", [("verify", "--help"), ("list",), ("list", "--json"), ("--help",)])
def test_a_closed_stdout_ends_quietly(args):
    code, stderr = closed_stdout(*args)
    assert code in (0, 1), (code, stderr)
    assert "internal error" not in stderr and "BrokenPipe" not in stderr, stderr
    assert "Traceback" not in stderr, stderr


def test_grade_json_into_a_closed_stdout_ends_quietly(tmp_path):
    klass = tmp_path / "class"
    (klass / "no-room").mkdir(parents=True)  # a layout error: no code of a learner runs
    code, stderr = closed_stdout("grade", str(klass), "--out", str(tmp_path / "out"), "--json")
    assert code == 1, stderr
    assert "internal error" not in stderr and "BrokenPipe" not in stderr, stderr
    assert (tmp_path / "out" / "gradebook.csv").is_file()


def _distributed():
    if os.environ.get("CI") == "true":
        import distributed

        return distributed
    return pytest.importorskip("distributed", reason="the optional extra labctl[dask]")


def test_a_dask_batch_closes_its_grading_workers_when_it_ends(tmp_path):
    distributed = _distributed()
    from labctl.grade import dask_exec

    copy_room(tmp_path / "class" / "ann" / "clean_room")
    rubric = parse_rubric(RUBRIC)

    def held() -> tuple[int, list[str]]:
        import psutil

        from labctl.grade import dask_exec

        children = psutil.Process().children(recursive=True)
        workers = [p for p in children if "labctl.grade.worker" in " ".join(p.cmdline())]
        return len(dask_exec._POOLS), [str(p.pid) for p in workers]

    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        batch = grade_class(
            tmp_path / "class",
            tmp_path / "out",
            rubric,
            GradeOptions(jobs=1, scheduler=cluster.scheduler_address, timeout_s=10),
        )
        assert [row.status for row in batch.rows] == ["graded"]
        with distributed.Client(cluster.scheduler_address) as client:
            left = client.run(held)
            assert list(left.values()) == [(0, [])], left
    assert dask_exec._POOLS == {}  # this process never held one


def test_what_a_room_prints_is_counted_capped_and_flagged_with_its_time(tmp_path):
    klass = tmp_path / "class"
    room = copy_room(klass / "printer" / "clean_room")
    # 1 MiB at import, on stdout and stderr: far past the 64 KiB a record keeps.
    append(
        room,
        "primitives",
        "import sys\nfor _ in range(512):\n"
        "    print('x' * 1023)\n    print('y' * 1023, file=sys.stderr)",
    )
    copy_room(klass / "quiet" / "clean_room")
    out = tmp_path / "out"
    batch = grade_class(klass, out, parse_rubric(RUBRIC), GradeOptions(jobs=1, timeout_s=10))
    rows = {row.learner: row for row in batch.rows}
    assert rows["printer"].output_bytes == 1024 * 1024
    assert rows["quiet"].output_bytes == 0
    with (out / "gradebook.csv").open(encoding="utf-8") as handle:
        book = {row["learner"]: row for row in csv.DictReader(handle)}
    assert book["printer"]["printed"] == "printed 1.0 MiB; kept the first 64.0 KiB"
    assert book["quiet"]["printed"] == ""
    summary = json.loads((out / "summary.json").read_text())
    times = {row["learner"]: row["wall_time_s"] for row in summary["rows"]}
    assert times["printer"] > 0 and times["quiet"] > 0
    kept = json.loads((out / "records" / "printer.json").read_text())["facts"]["verify"]["output"]
    assert len(kept) == 64 * 1024 and set(kept) <= {"x", "y", "\n"}
