"""A grading worker: a long-lived process that observes one learner after another.

`labctl.grade.pool` starts these with `python -I` (an isolated import path, in a private
folder) calling `main([FD])`. Jobs arrive as JSON lines on stdin; each reply is one JSON
line on file descriptor FD (stdout and stderr go nowhere, so nothing a learner prints can
look like a reply). Before a learner's code runs, the worker says on FD which isolation
level it resolved for that learner (`{"started": level}`), so a learner that
then hangs or kills the worker still has its level on its row. The worker serves any number
of learners: that is where grading's throughput comes from. Before each learner's clock
starts it reads the reference's outputs at the batch's seed (the seed comes with each job)
from the batch's signed cache, and imports torch only for a job that runs labs (the
template metrics, a submission's claims), once: a rubric that scores neither costs a worker
no torch (about 1.5 s of CPU to import), unless a failing room's diagnosis asks the
reference about the inputs one of its calls received. The template metrics' labs compute
their reference side once per worker (`labctl.memo`): the same inputs at the batch's seed
for every learner; where the pool gives its workers a shared folder, once for all of them
(`labctl.memo_shared`), before the first learner's clock starts.

SIGTERM ends the worker through SystemExit, so the clean room it holds is
closed (its whole process group killed) before the worker goes.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import signal
import sys
import threading
from pathlib import Path

MEMO_SHARED = "LABCTL_MEMO_SHARED"  # the batch's shared memo folder (`labctl.memo_shared`)


def _stop(signum, frame) -> None:
    raise SystemExit(128 + signum)


_warmed: set[tuple] = set()


def _prepare(job: dict) -> None:
    """What `job` needs of labctl, made before its learner's clock starts. Where the batch's
    workers share a memo folder, the template labs' reference side too: the workers split
    the labs, each computing the ones it takes (`template_reference`)."""
    from labctl import contract, memo
    from labctl.verify import fixtures

    version = job.get("contract", 1)
    fixtures.warm_reference(contract.function_names(version), job["seed"], version)
    if job["measure"] or (job["submission"] and job["remeasure"]):
        from labctl import reference  # noqa: F401  (torch, for the labs)
    metrics = job.get("metrics")
    warm = (job["seed"], None if metrics is None else tuple(metrics))
    if job["measure"] and memo.shared() and warm not in _warmed:
        from labctl.verify.verify import template_reference

        template_reference(job["seed"], metrics)
        _warmed.add(warm)


def _settle() -> None:
    """What lives on from here (torch's and labctl's modules, the reference's outputs, the
    labs' kept values) is moved out of the cycle collector's sight (`gc.freeze`), after a
    collection so that no garbage is kept with it. Unfrozen, each full collection walked
    torch's ~180,000 objects again (~90 ms), several times a learner: about 7% of a worker's
    own CPU time over a class of 30 (`gc.freeze` is CPython's way for long-lived servers)."""
    gc.collect()
    gc.freeze()


def _import_torch() -> None:
    try:
        from labctl import reference  # noqa: F401
    except Exception:  # raised again, and reported, where a job imports it
        return


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGTERM, _stop)
    reply_fd = int(argv[0])
    from labctl import memo
    from labctl.grade.task import observe_learner
    from labctl.i18n import choose, set_language

    # Learner after learner at one seed: the labs' reference side is computed once, and
    # where the pool gives a shared folder, once for all its workers.
    memo.enable()
    if os.environ.get(MEMO_SHARED):
        memo.share(Path(os.environ[MEMO_SHARED]))
    if os.environ.get("LABCTL_WORKER_TORCH") == "1":
        # The batch's labs need torch (~1.5 s to import): imported while the batch's process
        # computes the reference cache, before the first learner's clock starts.
        threading.Thread(target=_import_torch, name="labctl-import-torch", daemon=True).start()

    # The texts a worker puts in the facts (verify's messages) are in the batch's language,
    # which the pool passes as LABCTL_LANG.
    set_language(choose())
    with os.fdopen(reply_fd, "w", encoding="utf-8", buffering=1) as replies:
        replies.write(json.dumps({"ready": True}) + "\n")

        def started(level: str) -> None:
            replies.write(json.dumps({"started": level}) + "\n")

        for line in sys.stdin:
            job = json.loads(line)
            try:
                _prepare(job)
                _settle()
                reply = {"facts": observe_learner(job, started)}
            except Exception as exc:  # a refusal of the whole batch (UsageError) or a bug
                reply = {"raised": type(exc).__name__, "message": str(exc)}
            replies.write(json.dumps(reply, allow_nan=False) + "\n")
    return 0


def run(argv: list[str]) -> None:
    """`main`, then the worker ends at once: every clean room is closed by then (its process
    group killed), and neither the interpreter's teardown (torch's took about a second at the
    end of every batch, the pool waiting for it) nor `atexit` runs (the folder the worker
    writes in is the pool's, which removes it; the labs' thread pools would be waited for)."""
    try:
        code = main(argv)
    except SystemExit as stopped:
        code = stopped.code if isinstance(stopped.code, int) else 1
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    run(sys.argv[1:])
