"""The TA's options of `labctl grade` (regrade, late work, overrides, the Canvas export) and
the summary line: kept apart from `labctl.cli.grade`, which wires them in."""

from pathlib import Path
from typing import Annotated

import typer

from labctl.errors import UsageError
from labctl.i18n import Msg, _

OnlyOption = Annotated[
    list[str] | None,
    typer.Option(
        "--only",
        help="Regrade just this learner (repeat for more); every other row stays as recorded.",
        show_default=False,
    ),
]
ForceOption = Annotated[
    bool, typer.Option("--force", help="Regrade every learner: reuse no earlier result.")
]
SubmittedAtOption = Annotated[
    Path | None,
    typer.Option(
        "--submitted-at",
        help="CSV of learner,submitted_at rows (ISO 8601 with timezone): when each learner "
        "handed in, for the rubric's due date and late rules; an optional third column, "
        "due_at, is the learner's own due date (an extension).",
        show_default=False,
    ),
]
ExtensionsOption = Annotated[
    Path | None,
    typer.Option(
        "--extensions",
        help="CSV of learner,due_at rows: each learner's own due date, an ISO 8601 time with "
        "timezone or a duration added to the rubric's (P2D, PT36H).",
        show_default=False,
    ),
]
NoGradeOption = Annotated[
    str,
    typer.Option(
        "--no-grade",
        help="What canvas.csv holds for a learner with no grade (layout-error, refused, "
        "not-loaded, hang, crash): blank (Canvas keeps the grade it had) or zero.",
    ),
]
OverridesOption = Annotated[
    Path | None,
    typer.Option(
        "--overrides",
        help="overrides.yaml: per-learner point adjustments, each with its reason.",
        show_default=False,
    ),
]
ExportOption = Annotated[
    str | None,
    typer.Option("--export", help="Also write an LMS import file: canvas.", show_default=False),
]
RosterOption = Annotated[
    Path | None,
    typer.Option(
        "--roster",
        help="CSV with the header learner,Student,ID,SIS User ID,SIS Login ID,Section "
        "(for --export canvas).",
        show_default=False,
    ),
]
AssignmentOption = Annotated[
    str | None,
    typer.Option(
        "--assignment",
        help="The Canvas gradebook column, 'Name (id)' (default: the rubric's name, a new "
        "assignment).",
        show_default=False,
    ),
]
SubmissionMetadataOption = Annotated[
    Path | None,
    typer.Option(
        "--submission-metadata",
        help="Gradescope's submission_metadata.json: its created_at is when the learner handed in.",
        show_default=False,
    ),
]


def workflow(
    only: list[str] | None,
    force: bool,
    submitted_at: Path | None,
    overrides: Path | None,
    export: str | None,
    roster: Path | None,
    extensions: Path | None = None,
    no_grade: str = "blank",
    due=None,
):
    """The run's `Workflow`, its files read and checked before any learner is graded (`due`:
    the rubric's due date, from which an extension by a duration counts)."""
    from labctl.grade.export import NO_GRADE_RULES
    from labctl.grade.late import LateError, learner_key, read_extensions, read_submitted_csv
    from labctl.grade.overrides import load_overrides
    from labctl.grade.workflow import Workflow

    if no_grade not in NO_GRADE_RULES:
        raise UsageError(Msg("--no-grade {rule}: give blank or zero", rule=no_grade))
    if export is not None and export != "canvas":
        raise UsageError(Msg("--export {format}: the one format is canvas", format=export))
    if export is not None and roster is None:
        raise UsageError(Msg("--export canvas needs --roster FILE"))
    if roster is not None and not roster.is_file():
        raise UsageError(Msg("--roster {path} is not a file", path=str(roster)))
    times = read_submitted_csv(submitted_at, due) if submitted_at else None
    own = dict(times.due) if times else {}
    for learner, when in (read_extensions(extensions, due) if extensions else {}).items():
        if own.get(learner, when) != when:
            raise LateError(
                Msg(
                    "{learner} has two due dates: {first} in {times} and {second} in {file}",
                    learner=learner,
                    first=own[learner].isoformat(),
                    times=submitted_at.name,
                    second=when.isoformat(),
                    file=extensions.name,
                )
            )
        own[learner] = when
    return Workflow(
        only=frozenset(learner_key(name) for name in only or ()),
        force=force,
        submitted=times.submitted if times else None,
        due=own or None,
        overrides=load_overrides(overrides) if overrides else None,
        overrides_name=overrides.name if overrides else "overrides.yaml",
    )


def roster(export: str | None, path: Path | None) -> dict[str, dict[str, str]] | None:
    """The roster `--export canvas` maps learners with, read and checked before any learner is
    graded (a roster refused after grading left the outputs of two runs side by side)."""
    from labctl.grade.export import read_roster

    return read_roster(path) if export is not None and path is not None else None


def export(
    batch,
    rubric,
    students: dict[str, dict[str, str]],
    assignment: str | None,
    out_dir: Path,
    no_grade: str = "blank",
) -> None:
    """Write canvas.csv into the batch's outputs; its warnings join the batch's."""
    from labctl.grade.basecode import flag
    from labctl.grade.export import write_canvas

    path, warnings = write_canvas(
        batch.rows, students, assignment or rubric.name, rubric.max_score, out_dir, no_grade
    )
    batch.files.append(path)
    batch.warnings.extend(warnings)
    # Canvas's import reads scores only (a column it does not know becomes an assignment):
    # the learners whose score leaves base code out are named as it is written.
    for row in batch.rows:
        if row.base_code and row.base_code.get("functions"):
            batch.warnings.append(
                Msg(
                    "canvas.csv: {learner}'s score gives no points to base code: {flag}",
                    learner=row.learner,
                    flag=flag(row.base_code),
                )
            )


def output_cost(row) -> str:
    """A room that printed, for the table: how much, and how long its learner took."""
    from labctl.grade.outputs import printed

    if row.wall_time_s is None:
        return printed(row)
    return _(Msg("{printed}, in {seconds:.1f} s", printed=printed(row), seconds=row.wall_time_s))


def summary_line(batch, rubric, out_dir: Path) -> Msg:
    """One line whose counts add up: every learner in one status; graded or reused this run."""
    statuses: dict[str, int] = {}
    for row in batch.rows:
        statuses[row.status] = statuses.get(row.status, 0) + 1
    counts = ", ".join(f"{count} {status}" for status, count in sorted(statuses.items()))
    return Msg(
        "{learners} learners ({counts}; {graded} graded in this run, {skipped} unchanged since "
        "the last run) with {rubric}, in {seconds:.1f} s; gradebook {gradebook}",
        learners=len(batch.rows),
        counts=counts or "0",
        graded=len(batch.graded),
        skipped=len(batch.skipped),
        rubric=rubric.shown_name,
        seconds=batch.wall_time_s,
        gradebook=str(out_dir / "gradebook.csv"),
    )
