"""A grading worker: a long-lived process that observes one learner after another.

`labctl.grade.pool` starts these with `python -m labctl.grade.worker FD`. Jobs
arrive as JSON lines on stdin; each reply is one JSON line on file descriptor
FD (stdout and stderr go nowhere, so nothing a learner prints can look like a
reply). Before a learner's code runs, the worker says on FD which isolation
level it resolved for that learner (`{"started": level}`), so a learner that
then hangs or kills the worker still has its level on its row. The worker imports torch once,
reads the reference's outputs at the batch's seed from the batch's signed cache (the seed
comes with each job), then serves any number of learners: that is where grading's throughput
comes from.

SIGTERM ends the worker through SystemExit, so the clean room it holds is
closed (its whole process group killed) before the worker goes.
"""

from __future__ import annotations

import json
import os
import signal
import sys


def _stop(signum, frame) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGTERM, _stop)
    reply_fd = int(argv[0])
    from labctl import reference  # noqa: F401  (torch, imported once, before any learner)
    from labctl.grade.task import observe_learner
    from labctl.i18n import choose, set_language

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
                reply = {"facts": observe_learner(job, started)}
            except Exception as exc:  # a refusal of the whole batch (UsageError) or a bug
                reply = {"raised": type(exc).__name__, "message": str(exc)}
            replies.write(json.dumps(reply, allow_nan=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
