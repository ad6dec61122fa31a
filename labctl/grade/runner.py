"""`labctl grade`: a class graded in one batch, resumable, its outputs rebuilt every run.

1. Check the layout of every learner's folder (`labctl.grade.layout`); hash its inputs.
2. Skip each learner whose record under `OUT/records/` holds the same key: the
   sha256 of its inputs, of the rubric, labctl's version and the options that
   change a verdict. An interrupted batch resumes where it stopped.
3. Compute the reference once (kept on disk under `OUT/.reference-cache/` for
   every worker), then observe the rest: local workers (`--jobs`) or a Dask
   cluster (`--scheduler`). Each row is scored here and its record written as
   soon as it is known.
4. Apply this run's lateness, extensions and adjustments to every row and keep them
   in its record (so `labctl grade publish` shows the very same scores), then write the
   class's outputs from all the records (`labctl.grade.outputs`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import labctl
from labctl import contract
from labctl.errors import UsageError
from labctl.evidence.store import replace_atomically
from labctl.fingerprints.base import load_base
from labctl.grade import basecode, outputs
from labctl.grade.batch_seed import (
    CACHE,
    batch_secrets,
    kept_seed,
    warm_reference_cache,
    worker_env,
)
from labctl.grade.layout import Ignored, Learner, survey
from labctl.grade.pool import INTERNAL_ERROR, GradingError, LocalPool, Outcome
from labctl.grade.records import (
    RECORDS,
    begin_run,
    end_run,
    graded_room,
    identical_rooms,
    read_record,
    record_of,
    row_from_record,
    settled,
)
from labctl.grade.rubric import Rubric
from labctl.grade.score import Row, failed_row, observed, score
from labctl.grade.workflow import Workflow
from labctl.i18n import Msg, language
from labctl.isolation import resolve_isolation
from labctl.isolation.levels import require_every_layer

# A batch whose first learners all end in the same internal error stops there: labctl itself
# fails on this machine (a broken install, a folder that shadows a module), and going on
# would only give every other learner the same 0.
STOP_AFTER_INTERNAL_ERRORS = 3

Progress = Callable[[int, int, str, str], None]  # done, total, learner, status


@dataclass(frozen=True)
class GradeOptions:
    timeout_s: float = 20.0
    memory_mb: int = 4096
    learner_timeout_s: float = 600.0
    isolation: str = "auto"
    jobs: int = field(default_factory=lambda: os.cpu_count() or 1)
    scheduler: str | None = None
    seed: int | None = None  # None: the batch's kept seed, else a fresh one (`batch_seed`)
    base: tuple[Path, ...] = ()  # `--base`: the course's starting code (`labctl.grade.basecode`)

    def verdict_key(self) -> dict:
        """The options that can change a verdict (not how the work is spread)."""
        return {
            "timeout_s": self.timeout_s,
            "memory_mb": self.memory_mb,
            "learner_timeout_s": self.learner_timeout_s,
            "isolation": self.isolation,
            "seed": self.seed,
        }


@dataclass
class Batch:
    rows: list[Row]
    graded: list[str]
    skipped: list[str]
    out: Path
    wall_time_s: float = 0.0
    files: list[Path] = field(default_factory=list)
    similarity: object | None = None
    learners: list[Learner] = field(default_factory=list)  # in the order of `rows`
    ignored: list[Ignored] = field(default_factory=list)
    identical: list[list[str]] = field(default_factory=list)  # per row: the same clean room
    seed: int | None = None
    warnings: list[Msg] = field(default_factory=list)  # for stderr: a reference cache edited


def learner_key(
    learner: Learner, rubric: Rubric, options: GradeOptions, base_digest: str = ""
) -> str:
    text = json.dumps(
        {
            "inputs": learner.inputs_sha256,
            "layout": learner.error.code if learner.error else None,
            "rubric": rubric.sha256(),
            "labctl": labctl.__version__,
            "options": options.verdict_key(),
            # Diagnoses and item messages are written in the batch's language.
            "language": language(),
            # What counts as base code (the course's starting code given with --base).
            "base": base_digest,
        },
        sort_keys=True,
    )
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _job(learner: Learner, rubric: Rubric, options: GradeOptions) -> dict:
    claims = rubric.needs_submission and learner.submission is not None
    return {
        "learner": learner.id,
        "folder": str(learner.folder.resolve()),
        "clean_room": str(learner.clean_room.resolve()),
        "submission": str(learner.submission.resolve()) if learner.submission else None,
        "timeout_s": options.timeout_s,
        "memory_mb": options.memory_mb,
        "isolation": options.isolation,
        # A submission's claims are measured at the batch's seed too (`score._submission`),
        # whichever template metrics they name; a learner who handed in none has no claims,
        # and the labs run only for the metrics the rubric scores.
        "measure": rubric.needs_metrics or claims,
        "metrics": None if claims else rubric.metric_targets,
        "remeasure": rubric.needs_submission,
        "seed": options.seed,
        "contract": rubric.contract,
    }


def _stop_on_one_internal_cause(ended: list[Outcome], total: int) -> None:
    """Stop the batch (GradingError) when its first learners all ended in one internal error
    and more are waiting: the same cause would end every one of them."""
    if len(ended) != STOP_AFTER_INTERNAL_ERRORS or total <= len(ended):
        return
    cause = ended[0].message
    if all(o.status == INTERNAL_ERROR and o.message == cause for o in ended):
        raise GradingError(
            Msg(
                "grading stopped after the first {count} learners: each ended in the same "
                "internal error, a fault of labctl on this machine, not of their work "
                "({cause}); the other {left} were not graded and no gradebook was written. "
                "Fix the cause and run again: these learners are graded again too",
                count=len(ended),
                cause=cause,
                left=total - len(ended),
            )
        )


def grade_class(
    submissions_dir: Path,
    out: Path,
    rubric: Rubric,
    options: GradeOptions,
    progress: Progress | None = None,
    workflow: Workflow | None = None,
    finish: bool = True,
) -> Batch:
    """Grade every learner under `submissions_dir` into `out` (see the module docstring).
    Refuses an `out` inside the class folder: the next run would grade it as a learner.
    `finish`: as `grade_learners`'s."""
    inside = out.resolve()
    if inside == submissions_dir.resolve() or submissions_dir.resolve() in inside.parents:
        raise UsageError(
            Msg(
                "--out {out} is inside the class folder {folder}: the next run would grade "
                "its files as learners; write the grades beside the class folder",
                out=str(out),
                folder=str(submissions_dir),
            )
        )
    learners, ignored = survey(submissions_dir)
    return grade_learners(learners, out, rubric, options, progress, ignored, workflow, finish)


def grade_learners(
    learners: list[Learner],
    out: Path,
    rubric: Rubric,
    options: GradeOptions,
    progress: Progress | None = None,
    ignored: list[Ignored] | None = None,
    workflow: Workflow | None = None,
    finish: bool = True,
) -> Batch:
    """Grade `learners` (from `labctl.grade.layout`) into `out`.

    Rows are kept by the learner's place in `learners`: two learners may hand in
    the very same files (the same resume key), and each has its own row. `workflow`:
    which earlier results to reuse, lateness and adjustments (`labctl.grade.workflow`).
    Without `finish`, `out` stays marked unfinished (`records.begin_run`) until the caller,
    which writes outputs of its own from the batch, calls `records.end_run`."""
    workflow = workflow or Workflow()
    workflow.check(learners)
    # Refuse the batch before any learner runs: `sandbox` without a working one, or without
    # one of its layers, is exit 2.
    level = resolve_isolation(options.isolation)
    if options.isolation == "sandbox":
        require_every_layer()
    start = time.perf_counter()
    if out.exists() and not out.is_dir():
        raise UsageError(Msg("--out {path} is a file; give a folder", path=str(out)))
    (out / RECORDS).mkdir(parents=True, exist_ok=True)
    before = kept_seed(out)
    if workflow.only and options.seed is not None and before not in (None, options.seed):
        # One seed per batch: --only regrades its learners at the batch's own seed.
        raise UsageError(
            Msg(
                "--seed {seed} with --only: the class was graded at seed {kept}; a new seed "
                "regrades everyone (leave out --only)",
                seed=options.seed,
                kept=before,
            )
        )
    kept = batch_secrets(out, options.seed)
    options = dataclasses.replace(options, seed=kept.seed)
    with contextlib.ExitStack() as stack:
        # The workers start (Python, labctl, torch: about 2 s) now, while this process reads
        # the base code and the class's records; a batch whose every learner is reused stops
        # them unused.
        pool = None
        may_run = [x for x in learners if not workflow.only or x.id in workflow.only]
        if not options.scheduler and may_run:
            labs = rubric.needs_metrics or (
                rubric.needs_submission and any(x.submission is not None for x in may_run)
            )
            # The workers share the labs' reference side through a folder that learner code,
            # in the sandbox, cannot reach (`labctl.memo_shared`).
            pool = stack.enter_context(
                LocalPool(
                    min(options.jobs, len(may_run)),
                    options.learner_timeout_s,
                    worker_env(out, kept.reference_key, labs),
                    share_memo=level == "sandbox" and labs,
                )
            )
            pool.boot(len(may_run))
        base = load_base(list(options.base))
        functions = contract.function_names(rubric.contract)
        rows: dict[int, Row] = {}
        records: dict[int, dict] = {}
        batch = Batch(
            [], [], [], out, learners=list(learners), ignored=list(ignored or []), seed=kept.seed
        )
        todo: list[int] = []
        keys: dict[int, str] = {}
        rooms = {index: learner.room_sha256 for index, learner in enumerate(learners)}
        total = len(learners)
        if progress:
            progress(0, total, "", "")  # the batch is accepted: a bar from here, not for a refusal
        begin_run(out)

        def keep(index: int, row: Row, facts: dict | None) -> None:
            learner = learners[index]
            rows[index] = row
            record = records[index] = record_of(row, learner, keys[index], rubric, facts)
            replace_atomically(out / RECORDS / f"{learner.stem}.json", outputs.json_bytes(record))
            batch.graded.append(learner.id)
            if progress:
                progress(len(rows), total, learner.id, row.status)

        for index, learner in enumerate(learners):
            keys[index] = learner_key(learner, rubric, options, base.digest)
            previous = read_record(out, learner.stem)
            if workflow.reuse(learner, previous, keys[index]):
                rooms[index] = graded_room(learner, previous)
                rows[index] = row_from_record(previous)
                records[index] = previous
                batch.skipped.append(learner.id)
                if progress:
                    progress(len(rows), total, learner.id, "unchanged")
            elif learner.error is not None:
                keep(
                    index,
                    failed_row(learner.id, rubric, "layout-error", learner.error.message),
                    None,
                )
            else:
                todo.append(index)

        if todo:
            cache = out / CACHE
            ended: list[Outcome] = []

            def done(key: str, outcome: Outcome) -> None:
                index = int(key)
                learner = learners[index]
                if outcome.status == "observed":
                    # Read here, in labctl's process, from the learner's files (no learner code
                    # runs), for a room that loaded: the static scan has passed its files.
                    if (outcome.facts.get("verify") or {}).get("status") == "loaded":
                        outcome.facts["base_code"] = basecode.observe(
                            learner.clean_room, base, functions
                        )
                    row = score(learner.id, rubric, outcome.facts)
                else:
                    row = failed_row(
                        learner.id, rubric, outcome.status, outcome.message, outcome.isolation
                    )
                    observed(row, outcome.facts)
                keep(index, row, outcome.facts)
                ended.append(outcome)
                _stop_on_one_internal_cause(ended, len(todo))

            jobs = [(str(index), _job(learners[index], rubric, options)) for index in todo]
            labs = any(job["measure"] for _key, job in jobs)
            if pool is None:
                from labctl.grade.dask_exec import run_on_dask

                batch.warnings = warm_reference_cache(cache, kept.seed, kept.reference_key)
                env = worker_env(out, kept.reference_key, labs)
                run_on_dask(options.scheduler, jobs, done, options.learner_timeout_s, env)
            else:
                # No job is sent before the reference's outputs are written. Workers that import
                # torch for the labs compute them before their first learner's clock starts (a
                # third of a second each): this process then imports no torch, which took 1.5 s
                # of CPU from the workers' start on two cores.
                batch.warnings = warm_reference_cache(
                    cache, kept.seed, kept.reference_key, compute=not labs
                )
                pool.run(jobs, done)

    batch.rows = [rows[index] for index in range(total)]
    batch.warnings += workflow.apply(batch.rows, rubric)
    for index, row in enumerate(batch.rows):
        now = settled(records[index], row)
        if now != records[index]:
            path = out / RECORDS / f"{learners[index].stem}.json"
            replace_atomically(path, outputs.json_bytes(now))
    batch.identical = identical_rooms(learners, [rooms[index] for index in range(total)])
    stems = [learner.stem for learner in learners]
    batch.files = outputs.write_all(batch.rows, rubric, out, stems, batch.identical, batch.ignored)
    gone = outputs.remove_stale(out, stems, RECORDS)
    if gone:
        batch.warnings.append(
            Msg(
                "removed the feedback, results and records of learners not in this batch: {names}",
                names=", ".join(gone),
            )
        )
    if finish:
        end_run(out)
    batch.wall_time_s = time.perf_counter() - start
    return batch
