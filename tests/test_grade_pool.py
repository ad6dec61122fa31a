"""How the grading pool spends its workers: they start before the batch's own preparations,
a hang's worker is stopped without holding up the next learner, and a worker with nothing
left to do ends while the others finish.

Stand-in workers (a few lines of Python speaking the pool's protocol) make each case exact;
no learner code runs here.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from gradetools import copy_room, rubric_without

from labctl.grade import pool, runner
from labctl.grade.rubric import load_rubric
from labctl.grade.workflow import Workflow

# A stand-in worker that takes each job's "sleep_s" to answer; with "deaf", it ignores
# SIGTERM from then on (a worker stuck where its handler cannot run).
_STAND_IN = """
import json, os, signal, sys, time
replies = os.fdopen(int(sys.argv[1]), "w", buffering=1)
replies.write(json.dumps({"ready": True}) + "\\n")
for line in sys.stdin:
    job = json.loads(line)
    if job.get("deaf"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    replies.write(json.dumps({"started": "process"}) + "\\n")
    time.sleep(job["sleep_s"])
    replies.write(json.dumps({"facts": {"pid": os.getpid()}}) + "\\n")
"""


class _StandInPool(pool.LocalPool):
    def __init__(self, *args):
        super().__init__(*args)
        self.pids: list[int] = []

    def _command(self, reply_fd: int) -> list[str]:
        return [sys.executable, "-c", _STAND_IN, str(reply_fd)]

    def _start(self):
        slot = super()._start()
        self.pids.append(slot.proc.pid)
        return slot


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except OSError:
        return False


def test_the_next_learner_does_not_wait_for_a_stopped_workers_grace_period(monkeypatch):
    """A hang's worker that ignores SIGTERM is killed after its grace period (60 s here);
    meanwhile a fresh worker already takes the next learner. The pool used to wait out the
    grace period first, sending no learner (up to 3 s a hang)."""
    monkeypatch.setattr(pool, "HARD_STOP_AFTER_S", 0.2)
    monkeypatch.setattr(pool, "_GRACE_S", 60.0)
    seen = {}
    with _StandInPool(1, 0.3, {}) as workers:

        def done(key, outcome):
            seen[key] = outcome.status
            if key == "b":
                seen["stopped worker still in its grace period"] = _running(workers.pids[0])
                os.killpg(workers.pids[0], 9)  # its grace period is not this test's to wait

        workers.run([("a", {"sleep_s": 600, "deaf": True}), ("b", {"sleep_s": 0})], done)
    assert seen == {"a": "hang", "b": "observed", "stopped worker still in its grace period": True}


def test_an_idle_worker_ends_while_the_last_learners_run():
    """With nothing left to send, a worker that finished its learner ends (and its folder
    goes) while the other one still works: its exit no longer waits for the batch's end."""
    seen, pids = {}, {}
    with _StandInPool(2, 30.0, {}) as workers:

        def done(key, outcome):
            seen[key] = outcome.status
            pids[key] = outcome.facts["pid"]
            if key == "slow":
                seen["idle worker running"] = _running(pids["quick"])

        workers.run([("slow", {"sleep_s": 2.0}), ("quick", {"sleep_s": 0})], done)
    assert seen == {"slow": "observed", "quick": "observed", "idle worker running": False}


class _Stopped(Exception):
    pass


def _recorded_pool(events: list, sizes: list):
    class Recorded:
        def __init__(self, jobs, learner_timeout_s, env, share_memo=False):
            sizes.append(jobs)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

        def boot(self, count):
            events.append("workers start")

        def run(self, jobs, done):
            raise _Stopped

    return Recorded


def test_the_workers_start_before_the_base_code_is_read(tmp_path, monkeypatch):
    """The workers' start (Python, labctl, torch: about 2 s) overlaps this process's reading
    of the base code (labctl's own room, fingerprinted: about 1 s), which came first."""
    events, sizes = [], []
    monkeypatch.setattr(runner, "LocalPool", _recorded_pool(events, sizes))
    read_base = runner.load_base

    def load_base(extra):
        events.append("base code read")
        return read_base(extra)

    monkeypatch.setattr(runner, "load_base", load_base)
    for name in ("a", "b", "c"):
        copy_room(tmp_path / "class" / name / "clean_room")
    rubric = load_rubric(rubric_without(tmp_path, "metric"))
    options = runner.GradeOptions(jobs=2, seed=5)
    with pytest.raises(_Stopped):
        runner.grade_class(tmp_path / "class", tmp_path / "out", rubric, options)
    assert events == ["workers start", "base code read"]
    # --only: as many workers as the learners it may regrade
    only = Workflow(only=frozenset({"b"}))
    with pytest.raises(_Stopped):
        runner.grade_class(tmp_path / "class", tmp_path / "out", rubric, options, workflow=only)
    assert sizes == [2, 1]
