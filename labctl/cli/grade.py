"""`labctl grade SUBMISSIONS_DIR`, `grade bundle OUT.zip`, `grade gradescope`, `grade publish OUT`.

`grade` is a group whose default command grades a class, so both
`labctl grade DIR` and `labctl grade bundle OUT.zip` read as the issue wrote
them. Exit codes: 0 when every learner has a row (whatever the learners
scored), 1 when the input is refused (a bad rubric), 2 for usage.
"""

import os
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from typer.core import TyperGroup

from labctl.cli import grade_class as ta
from labctl.cli.grade_table import render
from labctl.cli.isolation import IsolationOption
from labctl.cli.options import memory_limit, positive_seconds
from labctl.cli.render import err, out, print_json
from labctl.errors import EXIT_FAILED, UsageError
from labctl.i18n import Msg, _
from labctl.outpaths import check_out_dir, check_out_file
from labctl.textsafe import shown

JsonFlag = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]
RubricOption = Annotated[
    Path | None,
    typer.Option("--rubric", help="Rubric YAML (default: the rubric that ships with labctl)."),
]
TimeoutOption = Annotated[
    float, typer.Option("--timeout", help="Seconds one clean-room call may take.")
]
LearnerTimeoutOption = Annotated[
    float,
    typer.Option(
        "--learner-timeout",
        help="Seconds one learner may take in all: its room's budget, the rule of verify "
        "--budget (past it: over-budget, never a pass); a learner still running 5 s later is "
        "stopped (hang).",
    ),
]
MemoryOption = Annotated[
    int, typer.Option("--memory-mb", help="Memory limit of each clean-room process (MiB).")
]


class _DefaultCommandGroup(TyperGroup):
    """`labctl grade DIR ...` runs `labctl grade class DIR ...`."""

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["class", *args]
        return super().parse_args(ctx, args)


app = typer.Typer(cls=_DefaultCommandGroup, no_args_is_help=True)  # help: labctl.cli.commands


def _check(timeout: float, learner_timeout: float, memory_mb: int, jobs: int | None) -> None:
    positive_seconds(timeout, "--timeout")
    positive_seconds(learner_timeout, "--learner-timeout")
    memory_limit(memory_mb)
    if jobs is not None and jobs < 1:
        raise UsageError(Msg("--jobs must be at least 1, got {jobs}", jobs=jobs))


def _progress_bar():
    return Progress(
        TextColumn(escape(_("grading"))),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[last]}"),
        TimeElapsedColumn(),
        TextColumn(escape(_("ETA"))),
        TimeRemainingColumn(),
        console=err,
        transient=False,
    )


@app.command("class")
def grade_class(
    submissions: Annotated[
        Path, typer.Argument(help="One folder per learner (the folder name is the learner id).")
    ],
    out_dir: Annotated[
        Path, typer.Option("--out", help="Where the gradebook, records and reports go.")
    ] = Path("grades"),
    rubric_path: RubricOption = None,
    jobs: Annotated[
        int | None, typer.Option("--jobs", help="Learners graded at once (default: the cores).")
    ] = None,
    scheduler: Annotated[
        str | None,
        typer.Option("--scheduler", help="Dask scheduler address: one task per learner there."),
    ] = None,
    timeout: TimeoutOption = 20.0,
    learner_timeout: LearnerTimeoutOption = 600.0,
    memory_mb: MemoryOption = 4096,
    isolation: IsolationOption = "auto",
    similarity: Annotated[
        bool,
        typer.Option("--similarity", help="List clean rooms that look alike (no score change)."),
    ] = False,
    threshold: Annotated[
        float,
        typer.Option(
            "--similarity-threshold",
            help="Share of either room's code beyond the base that a pair must share to be listed.",
        ),
    ] = 0.5,
    base: Annotated[
        list[Path] | None,
        typer.Option(
            "--base",
            help="A folder of starting code every learner was given (repeatable): a function "
            "that is its code earns no points and it never counts as similar, like labctl's own "
            "clean room (and the clean-room init stubs).",
        ),
    ] = None,
    seed: Annotated[
        int | None,
        typer.Option(
            "--seed",
            help="Draw every learner's verify inputs from this seed (default: the seed kept "
            "in --out, else a fresh one).",
            show_default=False,
        ),
    ] = None,
    only: ta.OnlyOption = None,
    force: ta.ForceOption = False,
    submitted_at: ta.SubmittedAtOption = None,
    extensions: ta.ExtensionsOption = None,
    overrides: ta.OverridesOption = None,
    export: ta.ExportOption = None,
    roster: ta.RosterOption = None,
    assignment: ta.AssignmentOption = None,
    no_grade: ta.NoGradeOption = "blank",
    json_: JsonFlag = False,
) -> None:
    """Grade every learner folder under SUBMISSIONS: verify, re-measure, score, report."""
    from labctl.grade.records import end_run
    from labctl.grade.rubric import load_rubric
    from labctl.grade.runner import GradeOptions
    from labctl.grade.runner import grade_class as run_class
    from labctl.verify.verify import check_seed

    _check(timeout, learner_timeout, memory_mb, jobs)
    check_out_dir(out_dir)
    if seed is not None:
        check_seed(seed)
    if not 0 < threshold <= 1:
        raise UsageError(
            Msg("--similarity-threshold must be in (0, 1], got {threshold:g}", threshold=threshold)
        )
    for folder in base or []:
        if not folder.is_dir():
            raise UsageError(Msg("--base {path} is not a folder", path=str(folder)))
    rubric = load_rubric(rubric_path)
    workflow = ta.workflow(
        only, force, submitted_at, overrides, export, roster, extensions, no_grade, rubric.due_at
    )
    students = ta.roster(export, roster)
    options = GradeOptions(
        timeout_s=timeout,
        memory_mb=memory_mb,
        learner_timeout_s=learner_timeout,
        isolation=isolation,
        jobs=jobs or os.cpu_count() or 1,
        scheduler=scheduler,
        seed=seed,
        base=tuple(base or ()),
    )
    bar = _progress_bar()
    task = bar.add_task("grading", total=None, last="")

    def progress(done: int, total: int, learner: str, status: str) -> None:
        # Shown once the batch is accepted: a refused one prints its error alone.
        if not bar.live.is_started:
            bar.start()
        last = escape(f"{shown(learner)}: {status}") if learner else ""
        bar.update(task, completed=done, total=total, last=last)

    try:
        # canvas.csv and the class page below are the batch's too: out_dir is marked unfinished
        # until they are written (`grade publish` refuses it meanwhile).
        batch = run_class(submissions, out_dir, rubric, options, progress, workflow, finish=False)
    finally:
        if bar.live.is_started:
            bar.stop()  # a bar never started prints an empty line before the error
    internal = _internal_errors(batch)
    if students is not None and not internal:
        ta.export(batch, rubric, students, assignment, out_dir, no_grade)
    else:
        from labctl.grade.export import remove_stale as remove_canvas

        if remove_canvas(out_dir) is not None:
            batch.warnings.append(
                Msg(
                    "removed canvas.csv of an earlier run: this run exports nothing to Canvas, "
                    "and its scores would not be this gradebook's"
                )
            )
    _warn(batch)
    # The grader's to know (stderr, the JSON document): never in a learner-facing file.
    err.print(_(Msg("verify inputs drawn with seed {seed}", seed=batch.seed)), markup=False)
    found = None
    if similarity:
        from labctl.grade.similarity import compare
        from labctl.grade.similarity_report import write_report

        with err.status(escape(_("comparing clean rooms…"))):
            rooms = {
                learner.id: learner.clean_room
                for learner, row in zip(batch.learners, batch.rows, strict=True)
                if row.status == "graded" and learner.clean_room is not None
            }
            found = compare(rooms, threshold, list(base or []))
        batch.files.extend(write_report(found, out_dir))
    else:
        from labctl.grade.similarity_report import remove_stale

        remove_stale(out_dir)
    from labctl.grade.class_page import write_class_page

    batch.files.append(write_class_page(batch, rubric, found, out_dir))
    end_run(out_dir)
    for entry in batch.ignored:
        ignored = Msg(
            "ignored {name} ({kind}): at the top of the class folder, not a learner's folder",
            name=entry.name,
            kind=entry.kind,
        )
        err.print(escape(shown(_(ignored))), soft_wrap=True)
    if json_:
        from labctl.grade.outputs import summary

        document = summary(batch.rows, rubric, batch.identical, batch.ignored)
        document.update(
            passed=not internal,
            out=str(out_dir),
            graded=batch.graded,
            skipped=batch.skipped,
            wall_time_s=round(batch.wall_time_s, 3),
            files=[str(p.relative_to(out_dir)) for p in batch.files],
            seed=batch.seed,
        )
        if found is not None:
            document["similarity"] = found.to_json()
        print_json(document)
    else:
        render(batch, rubric, found, out_dir)
    if internal:
        _say_internal(internal, export is not None)
        raise typer.Exit(EXIT_FAILED)


def _internal_errors(batch) -> list[str]:
    """The learners whose row is labctl's failure, not a grade (`internal-error`)."""
    from labctl.grade.pool import INTERNAL_ERROR

    return [row.learner for row in batch.rows if row.status == INTERNAL_ERROR]


def _say_internal(learners: list[str], exported: bool) -> None:
    """Once, on stderr: the batch did not pass, which learners labctl failed, what to do."""
    said = Msg(
        "{count} learner(s) ended in internal-error ({learners}): labctl failed there, not "
        "their work, so their 0 is no grade; fix the cause and run again to grade them",
        count=len(learners),
        learners=", ".join(shown(name) for name in learners[:5])
        + (", …" if len(learners) > 5 else ""),
    )
    err.print(escape(_(Msg("error: {message}", message=said))), soft_wrap=True)
    if exported:
        err.print(escape(_("--export skipped: no gradebook with internal errors is exported")))


def _warn(batch) -> None:
    for warning in batch.warnings:
        err.print(_(Msg("warning: {warning}", warning=warning)), markup=False, soft_wrap=True)


@app.command("gradescope")
def gradescope(
    submission: Annotated[
        Path, typer.Argument(help="The learner's folder (/autograder/submission).")
    ],
    results: Annotated[Path, typer.Option("--results", help="Where results.json goes.")],
    work: Annotated[
        Path, typer.Option("--work", help="Scratch folder for the record and reports.")
    ] = Path("labctl-grade"),
    rubric_path: RubricOption = None,
    timeout: TimeoutOption = 20.0,
    learner_timeout: LearnerTimeoutOption = 600.0,
    memory_mb: MemoryOption = 4096,
    isolation: IsolationOption = "auto",
    metadata: ta.SubmissionMetadataOption = None,
    require_sandbox: Annotated[
        bool,
        typer.Option(
            "--require-sandbox",
            help="Run the learner's code only in a working sandbox with every layer; without "
            "one, run nothing and write a 0-point results.json that says why (run_autograder "
            "passes this unless the bundle was built with --allow-process-isolation).",
        ),
    ] = False,
    json_: JsonFlag = False,
) -> None:
    """Grade one learner's folder into Gradescope's results.json (what run_autograder calls)."""
    from labctl.evidence.store import replace_atomically
    from labctl.grade.late import read_gradescope_metadata
    from labctl.grade.layout import check_learner
    from labctl.grade.rubric import load_rubric
    from labctl.grade.runner import GradeOptions, grade_learners
    from labctl.grade.workflow import Workflow

    _check(timeout, learner_timeout, memory_mb, None)
    check_out_file(results, "--results")
    check_out_dir(work, "--work")
    if not submission.is_dir():
        raise UsageError(Msg("{path} is not a folder", path=str(submission)))
    rubric = load_rubric(rubric_path)
    if require_sandbox:
        from labctl.grade.bundle import sandbox_refusal

        refusal = sandbox_refusal()
        if refusal is not None:
            # Gradescope reads results.json: the learner is told why, and nothing ran.
            replace_atomically(results, refusal)
            said = Msg(
                "no working sandbox: nothing was run; results in {results}", results=str(results)
            )
            err.print(escape(_(said)), soft_wrap=True)
            if json_:
                print_json({"passed": True, "results": str(results), "status": "no-sandbox"})
            return
    options = GradeOptions(timeout, memory_mb, learner_timeout, isolation, 1, None)
    learner = check_learner(submission)
    # When the learner handed in: Gradescope's word (created_at), never the learner's files;
    # and the due date Gradescope holds for this learner (an extension), over the rubric's.
    said = read_gradescope_metadata(metadata) if metadata else None
    workflow = Workflow(
        submitted={learner.id: said.created_at} if said else None,
        due_date=said.assignment_due if said else None,
        due={learner.id: said.extension} if said and said.extension else None,
    )
    batch = grade_learners([learner], work, rubric, options, workflow=workflow)
    _warn(batch)
    produced = work / "gradescope" / learner.stem / "results.json"
    replace_atomically(results, produced.read_bytes())
    row = batch.rows[0]
    internal = _internal_errors(batch)
    if json_:
        print_json({"passed": not internal, "results": str(results), "status": row.status})
    else:
        done = Msg("{status}: results in {results}", status=row.status, results=shown(str(results)))
        out.print(escape(_(done)), soft_wrap=True)
    if internal:
        _say_internal(internal, False)
        raise typer.Exit(EXIT_FAILED)


@app.command("bundle")
def bundle_command(
    zip_path: Annotated[Path, typer.Argument(help="The autograder zip to write (OUT.zip).")],
    rubric_path: RubricOption = None,
    timeout: TimeoutOption = 20.0,
    learner_timeout: LearnerTimeoutOption = 600.0,
    memory_mb: MemoryOption = 4096,
    isolation: IsolationOption = "auto",
    allow_process: Annotated[
        bool,
        typer.Option(
            "--allow-process-isolation",
            help="Let run_autograder run learner code at the process level (uid 65534, not a "
            "security boundary) where Gradescope's image has no working sandbox. Without it, "
            "such a submission gets 0 points and a message that says why, and nothing runs.",
        ),
    ] = False,
    json_: JsonFlag = False,
) -> None:
    """Write a Gradescope autograder: setup.sh, run_autograder, the rubric, labctl itself."""
    from labctl.grade.bundle import bundle
    from labctl.grade.rubric import load_rubric
    from labctl.isolation import resolve_isolation

    _check(timeout, learner_timeout, memory_mb, None)
    check_out_file(zip_path, "OUT.zip")
    resolve_isolation(isolation)
    rubric = load_rubric(rubric_path)
    names = bundle(
        zip_path, rubric, timeout, learner_timeout, memory_mb, isolation.lower(), allow_process
    )
    if json_:
        print_json({"passed": True, "zip": str(zip_path), "files": len(names)})
        return
    wrote = Msg(
        "wrote {zip}: setup.sh, run_autograder, rubric.yaml ({rubric}) and labctl ({files} "
        "files); upload it to Gradescope",
        zip=str(zip_path),
        rubric=rubric.shown_name,
        files=len(names) - 3,
    )
    out.print(escape(_(wrote)), soft_wrap=True)


@app.command("publish")
def publish_command(
    out_dir: Annotated[Path, typer.Argument(help="The --out folder of a graded batch.")],
    rubric_path: RubricOption = None,
    json_: JsonFlag = False,
) -> None:
    """Publish the grades: each learner's feedback with its after_published items, no regrading."""
    from labctl.grade.publish import publish
    from labctl.grade.rubric import load_rubric

    rubric = load_rubric(rubric_path)
    done = publish(out_dir, rubric)
    if json_:
        print_json(
            {
                "passed": True,
                "out": str(out_dir),
                "learners": done.learners,
                "due_passed": done.due_passed,
                "files": [str(p.relative_to(out_dir)) for p in done.files],
            }
        )
        return
    wrote = Msg(
        "published the feedback of {learners} learners in {folder}: after_published items "
        "shown; after_due_date items {due}",
        learners=done.learners,
        folder=str(out_dir / "feedback"),
        due=Msg("shown") if done.due_passed else Msg("not shown before the due date"),
    )
    out.print(escape(_(wrote)), soft_wrap=True)


@app.command("rubric")
def rubric_command(json_: JsonFlag = False) -> None:
    """Print the default rubric (YAML), to copy and change."""
    from labctl.grade.rubric import default_rubric_text, load_rubric

    if json_:
        print_json({"passed": True, "rubric": load_rubric().dump()})
        return
    print(default_rubric_text(), end="")
