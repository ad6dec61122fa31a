"""`labctl run`."""

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from labctl.cli.isolation import IsolationOption, effective, probe_early
from labctl.cli.render import (
    Column,
    Prose,
    err,
    fit,
    heading,
    number,
    out,
    print_json,
    row_verdict,
    verdict,
)
from labctl.errors import EXIT_FAILED
from labctl.i18n import N_, _, implementation

JsonFlag = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]


def run(
    labs: Annotated[list[str], typer.Argument(help="Lab ids, or all.", show_default=False)],
    seed: Annotated[int, typer.Option(help="Seed for every input.")] = 5,
    impl: Annotated[
        str, typer.Option(help="reference, clean-room or both.", case_sensitive=False)
    ] = "both",
    clean_room: Annotated[
        Path | None,
        typer.Option(
            "--clean-room",
            help="Clean-room package directory [default: ./clean_room, else labctl's own, "
            "which the output and the records then name as labctl's own].",
            show_default=False,
        ),
    ] = None,
    out_dir: Annotated[Path, typer.Option("--out", help="Where run records go.")] = Path(
        "evidence/runs"
    ),
    timeout: Annotated[float, typer.Option(help="Seconds one clean-room call may take.")] = 20.0,
    isolation: IsolationOption = "auto",
    settings: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            metavar="NAME=VALUE",
            help="Change a lab parameter (repeatable). NAME applies to every lab being run "
            "that has it; LAB.NAME to that lab only (e.g. causal-attention.T=16). "
            "`labctl show LAB` lists each lab's parameters and bounds; a value out of bounds "
            "is refused before anything runs. Records made with changed parameters say so.",
            show_default=False,
        ),
    ] = None,
    json_: JsonFlag = False,
) -> None:
    """Records go to --out/<lab>/, and the manifest of the newest record per lab to --out."""
    probe_early(isolation)
    from labctl import registry
    from labctl.evidence.records import shown_path
    from labctl.evidence.room import record_notes
    from labctl.runner import run_labs
    from labctl.textsafe import valid

    done = []
    try:
        with err.status(_("starting…")) as status:

            def progress(lab, index, total):
                status.update(f"[{index + 1}/{total}] {lab.id}: {_(lab.title)}")

            report = run_labs(
                labs,
                seed,
                impl.lower(),
                clean_room,
                out_dir,
                timeout,
                progress,
                settings or [],
                effective(isolation),
                finished=done.append,
            )
    except KeyboardInterrupt:
        # Ctrl-C in `run all > file`: the labs that finished (their records are written)
        # still reach the file; the handler then reports the interruption.
        if not json_ and done:
            # shown in the labs' order; they ended in their own (a timed lab's first)
            order = {lab.id: index for index, lab in enumerate(registry.resolve(labs))}
            for result in sorted(done, key=lambda result: order[result.lab.id]):
                _render_lab(result)
        raise
    for note in record_notes(report.clean_room, "--clean-room"):
        err.print(_(note), markup=False)
    if json_:
        print_json(report.to_json(shown_path))
    else:
        for result in report.labs:
            _render_lab(result)
        passed = sum(r.passed for r in report.labs)
        summary = _(
            "{passed}/{total} labs passed (seed {seed}, impl {impl}, tolerances {tolerances}) "
            "in {seconds:.1f} s; records under {where}"
        ).format(
            passed=passed,
            total=len(report.labs),
            seed=report.seed,
            impl=_(implementation(report.impl)),
            tolerances=registry.TOLERANCE_TABLE_VERSION,
            seconds=report.wall_time_s,
            where=valid(str(out_dir)),
        )
        out.print(Prose(f"{verdict(report.passed)}  {escape(summary)}"))
    if not report.passed:
        raise typer.Exit(EXIT_FAILED)


def _render_lab(result) -> None:
    from labctl.cli.figures import figures, text
    from labctl.lab import Note, shown_expected
    from labctl.params import record_values
    from labctl.results import REFERENCE_OFF_DEFAULTS

    lab = result.lab
    out.print(heading(lab.id, _(lab.title)))
    out.print(Prose(f"[dim]{escape(_(lab.question))}[/dim]"))
    sections = "; ".join(str(s) for s in lab.sections)
    out.print(Prose(f"[dim]{escape(_('course: {sections}').format(sections=sections))}[/dim]"))
    changed = result.changed_params
    if changed:
        values = record_values(result.params)
        shown = ", ".join(f"{name}={values[name]}" for name in changed)
        out.print(
            "[bold yellow]! "
            + escape(_("non-default parameters: {values}").format(values=shown))
            + "[/bold yellow]"
        )
        blamed = result.reference_fails_off_defaults
        if blamed:
            said = _(REFERENCE_OFF_DEFAULTS)
            out.print(
                Prose("[yellow]! " + escape(said.format(metrics=", ".join(blamed))) + "[/yellow]")
            )
    if result.error:
        out.print(Prose(f"{verdict(False)}  {escape(_(result.shown_error))}"))
    rows_shown = []
    by_name: dict[str, dict] = {}
    for m in result.metrics:
        by_name.setdefault(m.name, {})[m.impl] = m
    for name, rows in by_name.items():
        first = next(iter(rows.values()))
        label = escape(name) + (f" [dim]({_('timing')})[/dim]" if first.timing else "")
        if "both" in rows:
            cells = ("[dim]↔[/dim]", _shown(rows["both"]))
        else:
            cells = tuple(_shown(rows[i]) if i in rows else "" for i in ("reference", "clean-room"))
        rows_shown.append(
            [
                label,
                *cells,
                escape(_(shown_expected(first.expected))),
                row_verdict(list(rows.values())),
            ]
        )
    # Metric names are identifiers a learner copies into a submission: never broken.
    table = fit(
        [
            Column(N_("metric"), identifier=True),
            Column(N_("reference"), identifier=True, justify="right"),
            Column(N_("clean room"), identifier=True, justify="right"),
            Column(N_("expected"), identifier=True),
            Column(N_("verdict"), identifier=True),
        ],
        rows_shown,
        show_edge=False,
    )
    out.print(table)
    for renderable in figures(result.figures):
        out.print(renderable)
    for figure in result.figures:
        if isinstance(figure, Note):
            mark = "[bold yellow]![/bold yellow]" if figure.flag else "[dim]·[/dim]"
            out.print(Prose(f"{mark} {escape(text(figure.text))}"))
    footer = _("{lab} in {seconds:.2f} s").format(lab=lab.id, seconds=result.wall_time_s)
    out.print(f"{verdict(result.passed)}  {footer}\n")


def _shown(row) -> str:
    """A metric's value; one not measured (the clean room failed first) shows as a dash, a
    measured NaN as nan."""
    return number(row.actual) if row.measured else "—"
