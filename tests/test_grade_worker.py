"""A grading worker imports torch only for a job that runs labs, and the pool counts a
learner's limit from when its code starts, not from when its worker began the job.

The reference's outputs at the batch's seed come from the batch's signed cache, so a
rubric that scores no template metric and no submission costs a worker no torch; one that
does imports it before the learner's clock starts. Whether torch is loaded is read from
outside, in the worker's memory map, while it waits for its next job.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fixturetools import signed_reference

from labctl import faults
from labctl.grade import pool


def _graded(job: dict, env: dict[str, str]) -> tuple[dict, bool]:
    """The worker's facts for `job`, and whether libtorch was mapped into it afterwards."""
    read_fd, write_fd = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, "-m", "labctl.grade.worker", str(write_fd)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        pass_fds=(write_fd,),
        env={**os.environ, **env},
    )
    os.close(write_fd)
    with os.fdopen(read_fd, encoding="utf-8") as replies:
        try:
            assert json.loads(replies.readline()) == {"ready": True}
            proc.stdin.write((json.dumps(job) + "\n").encode("utf-8"))
            proc.stdin.flush()
            reply = {}
            while "facts" not in reply and "raised" not in reply:
                reply = json.loads(replies.readline())
            torch_loaded = "libtorch" in Path(f"/proc/{proc.pid}/maps").read_text()
        finally:
            proc.stdin.close()
            proc.wait(timeout=60)
    assert "facts" in reply, reply
    return reply["facts"], torch_loaded


@pytest.mark.parametrize("measure", [False, True])
def test_a_worker_imports_torch_only_for_a_job_that_runs_labs(tmp_path, measure):
    seed, env = signed_reference(tmp_path / "cache")
    room = faults.project_clean_room()
    job = {
        "learner": "a",
        "folder": str(room.parent),
        "clean_room": str(room),
        "submission": None,
        "timeout_s": 30.0,
        "memory_mb": 2048,
        "isolation": "process",
        "measure": measure,
        "remeasure": True,
        "seed": seed,
        "contract": 1,
        # One lab runs labs as well as all of them: the subject is torch, not which metrics
        # (the residual ablation is the template's cheapest lab; the scale ablation's alone
        # took more CPU than the rest of this job).
        "metrics": ["residual_ablation_max_output_delta"],
    }
    facts, torch_loaded = _graded(job, env)
    assert facts["verify"]["passed"] is True and facts["verify"]["seed"] == seed
    assert bool(facts["verify"]["metrics"]) is measure
    assert torch_loaded is measure


@pytest.mark.parametrize("handed_in", [False, True])
def test_a_rubric_that_scores_a_submission_runs_labs_only_for_a_learner_who_handed_one_in(
    tmp_path, handed_in
):
    """A rubric with a submission item and no metric item: the labs measure a submission's
    claims at the batch's seed; a learner with none has none to measure (a class of 14 such
    learners took 13.6 s of CPU with the labs, 8.8 s without)."""
    from gradetools import rubric_without

    from labctl.grade.layout import Learner
    from labctl.grade.rubric import load_rubric
    from labctl.grade.runner import GradeOptions, _job

    rubric = load_rubric(rubric_without(tmp_path, "metric"))
    assert rubric.needs_submission and not rubric.needs_metrics
    submission = tmp_path / "submission.yaml" if handed_in else None
    learner = Learner("a", tmp_path, tmp_path / "clean_room", submission)
    job = _job(learner, rubric, GradeOptions(seed=5))
    assert job["measure"] is handed_in and job["remeasure"] is True
    with_metrics = load_rubric(rubric_without(tmp_path, "submission"))
    assert _job(learner, with_metrics, GradeOptions(seed=5))["measure"] is True
    # the labs measure the metrics the rubric scores, and every one a submission may claim
    assert _job(learner, with_metrics, GradeOptions(seed=5))["metrics"] == [
        i.target for i in with_metrics.items if i.kind == "metric"
    ]
    both = load_rubric(rubric_without(tmp_path))
    assert _job(learner, both, GradeOptions(seed=5))["metrics"] == (
        None if handed_in else with_metrics.metric_targets
    )


# A stand-in for `labctl.grade.worker` that takes argv[2] seconds to make a job ready before
# it says the learner's code started, then answers after two runs of argv[3] seconds.
_SLOW_TO_PREPARE = """
import json, os, sys, time
replies = os.fdopen(int(sys.argv[1]), "w", buffering=1)
replies.write(json.dumps({"ready": True}) + "\\n")
for line in sys.stdin:
    time.sleep(float(sys.argv[2]))
    replies.write(json.dumps({"started": "process"}) + "\\n")
    time.sleep(float(sys.argv[3]))
    replies.write(json.dumps({"started": "process"}) + "\\n")  # a second one: no more time
    time.sleep(float(sys.argv[3]))
    replies.write(json.dumps({"facts": {"ran": True}}) + "\\n")
"""


class _SlowPool(pool.LocalPool):
    def __init__(self, *args, times: tuple[float, float]):
        super().__init__(*args)
        self.times = times

    def _command(self, reply_fd: int) -> list[str]:
        return [sys.executable, "-c", _SLOW_TO_PREPARE, str(reply_fd), *map(str, self.times)]


@pytest.mark.parametrize(
    ("prepare_s", "run_s", "status"),
    [(1.2, 0.5, "observed"), (1.2, 2.0, "hang")],
)
def test_a_learners_limit_counts_from_when_its_code_starts(monkeypatch, prepare_s, run_s, status):
    """Limit 1 s and 1 s more before the stop: preparing the job (1.2 s) is not the
    learner's; two runs of 0.5 s end inside the 2 s that follow, two of 2 s do not, and the
    second `started` gives no more time."""
    monkeypatch.setattr(pool, "HARD_STOP_AFTER_S", 1.0)
    outcomes = {}
    with _SlowPool(1, 1.0, times=(prepare_s, run_s)) as slow:
        slow.run([("a", {})], lambda key, outcome: outcomes.update({key: outcome}))
    assert outcomes["a"].status == status


def test_a_workers_first_job_may_take_as_long_as_a_start_to_get_ready(monkeypatch):
    """The first job makes ready what every later one reuses (torch, the labs' reference
    side): limit 1 s and 1 s more; the first job's 2.5 s of preparing is allowed, the same
    for the second job is not."""
    monkeypatch.setattr(pool, "HARD_STOP_AFTER_S", 1.0)
    outcomes = {}
    with _SlowPool(1, 1.0, times=(2.5, 0.05)) as slow:
        slow.run([("a", {}), ("b", {})], lambda key, outcome: outcomes.update({key: outcome}))
    assert (outcomes["a"].status, outcomes["b"].status) == ("observed", "hang")


def test_the_workers_share_a_folder_of_the_pools_own_only_when_asked(tmp_path):
    import stat

    from labctl.grade.worker import MEMO_SHARED

    with pool.LocalPool(2, 10.0, {}, share_memo=True) as workers:
        folder = Path(workers.env[MEMO_SHARED])
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700  # no room's uid reads it
        assert (folder / ".owner").read_text().split()[0] == str(os.getpid())
    assert not folder.exists()
    for args in ((1, 10.0, {}, True), (2, 10.0, {}, False)):
        with pool.LocalPool(*args) as workers:
            assert MEMO_SHARED not in workers.env


@pytest.mark.parametrize(
    ("isolation", "dropped", "shared"),
    [("auto", "submission", True), ("process", "submission", False), ("auto", "metric", False)],
)
def test_a_batch_shares_the_labs_only_in_the_sandbox_and_only_for_labs(
    tmp_path, monkeypatch, isolation, dropped, shared
):
    """Learner code at the process level could reach a folder of the grader's; a rubric
    without metrics runs no labs."""
    from gradetools import copy_room, rubric_without

    from labctl.grade import runner
    from labctl.grade.rubric import load_rubric
    from labctl.isolation.bwrap import sandbox_status

    # `auto` without a working sandbox is the process level: nothing shared there either.
    shared = shared and sandbox_status().works
    asked = []

    class Recorded:
        def __init__(self, jobs, learner_timeout_s, env, share_memo=False):
            asked.append(share_memo)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

        def boot(self, count):
            return None

        def run(self, jobs, done):
            for key, _job in jobs:
                done(key, pool.Outcome("crash", message="not run"))

    monkeypatch.setattr(runner, "LocalPool", Recorded)
    for name in ("a", "b"):
        copy_room(tmp_path / "class" / name / "clean_room")
    rubric = load_rubric(rubric_without(tmp_path, dropped))
    options = runner.GradeOptions(jobs=2, seed=5, isolation=isolation)
    runner.grade_class(tmp_path / "class", tmp_path / "out", rubric, options)
    assert asked == [shared]


class _Ended(Exception):
    pass


@pytest.mark.parametrize(("ends", "code"), [(0, 0), (SystemExit(143), 143), (SystemExit("x"), 1)])
def test_a_worker_ends_at_once_with_its_code_and_the_pool_starts_it_so(monkeypatch, ends, code):
    """Not through the interpreter's exit, whose teardown of torch kept every batch waiting
    about a second for its workers (the pool's command had bypassed this end)."""
    from labctl.grade import worker

    def main(argv):
        if isinstance(ends, BaseException):
            raise ends
        return ends

    def exit_now(status):
        raise _Ended(status)

    monkeypatch.setattr(worker, "main", main)
    monkeypatch.setattr(worker.os, "_exit", exit_now)
    with pytest.raises(_Ended) as ended:
        worker.run(["7"])
    assert ended.value.args == (code,)
    with pool.LocalPool(1, 10.0, {}) as workers:
        command = workers._command(7)
    assert "from labctl.grade.worker import run; run(" in command[3]


def test_a_worker_freezes_what_lives_on_and_no_garbage_with_it():
    """Before each learner the worker hides what lives on from the cycle collector
    (`gc.freeze`), after a collection: a cycle already unreachable is freed, not frozen for
    the worker's whole life."""
    import gc
    import weakref

    from labctl.grade import worker

    class Node:
        pass

    kept, lost = Node(), Node()
    lost.me = lost  # a cycle only the collector frees
    gone = weakref.ref(lost)
    del lost
    gc.unfreeze()
    try:
        worker._settle()
        assert gone() is None, "an unreachable cycle was frozen with the live objects"
        assert gc.get_freeze_count() > 0
        assert not any(o is kept for o in gc.get_objects())  # frozen: out of the collector's sight
    finally:
        gc.unfreeze()
