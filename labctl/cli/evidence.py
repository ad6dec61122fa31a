"""`labctl evidence`: the schema, the learner template, validate and submit.

Thin commands over `labctl.evidence`: each prints one line per problem (or one
JSON document with `--json`) and exits 0 when the file is valid or accepted, 1
when it is invalid or refused, 2 on a usage error (a missing file).
"""

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from labctl.cli.isolation import IsolationOption, effective
from labctl.cli.options import positive_seconds
from labctl.cli.render import err, out, print_json, text
from labctl.errors import EXIT_FAILED
from labctl.evidence.modules import DEFAULT_MODULE
from labctl.i18n import N_, Msg, _
from labctl.textsafe import shown as safe_text

app = typer.Typer(no_args_is_help=True)  # its help: labctl.cli.commands

JsonFlag = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]
FileArg = Annotated[
    Path, typer.Argument(help="A filled template, YAML or JSON.", show_default=False)
]
RootOption = Annotated[
    Path, typer.Option("--root", help="The evidence store (runs, submissions, manifest).")
]


def _line(text: str) -> None:
    out.print(text, markup=False, soft_wrap=True)


def _problems(report) -> None:
    for problem in report.problems:
        _line(problem.shown_line())
    for warning in report.warnings:
        _line(_(Msg("warning: {warning}", warning=warning.shown_line())))


def _count(problems) -> Msg:
    if len(problems) == 1:
        return Msg("{count} problem", count=1)
    return Msg("{count} problems", count=len(problems))


def _labelled(style: str, label: str, shown: str) -> str:
    """`valid: FILE`, the verdict word styled; the colon is the chosen language's (`有效：`)."""
    return _("{label}: {text}").format(label=f"[{style}]{_(label)}[/{style}]", text=shown)


def _said(path: Path) -> str:
    """`_shown` for the terminal: a file named with an ESC sequence or a newline drove it, and
    split the verdict's one line in two (`--json` keeps the exact name)."""
    return safe_text(_shown(path))


def _shown(path: Path) -> str:
    """A path relative to the working directory when it is under it, else as given."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):
        return str(path)


@app.command("schema")
def schema(json_: JsonFlag = False) -> None:
    """Print the JSON Schema of learn-llm.evidence.v1 (as committed in labctl/data)."""
    from labctl.evidence.models import schema_text

    # The schema is one JSON document already: with --json, as without, it is the output.
    del json_
    sys.stdout.write(schema_text())


@app.command("template")
def template(
    module: Annotated[str, typer.Option(help="Course module.")] = DEFAULT_MODULE,
    fill: Annotated[
        bool, typer.Option("--fill", help="Fill it from the newest machine records in --root.")
    ] = False,
    root: RootOption = Path("evidence"),
    json_: JsonFlag = False,
) -> None:
    """Print the learner template of a module; --fill answers what the machine records know."""
    from labctl.evidence.store import EvidenceStore
    from labctl.evidence.template import template as build

    made = build(module, EvidenceStore(root) if fill else None)
    for warning in made.warnings:
        err.print(_(Msg("warning: {warning}", warning=warning)), markup=False, soft_wrap=True)
    if json_:
        print_json(made.data)
    else:
        sys.stdout.write(made.yaml_text())


@app.command("validate")
def validate(file: FileArg, json_: JsonFlag = False) -> None:
    """Check a submission without running anything: every problem at once, as `field: reason`."""
    from labctl.evidence.validate import validate_file

    report = validate_file(file)
    if json_:
        print_json(
            {
                "file": _shown(file),
                "valid": report.valid,
                "problems": [p.to_json() for p in report.problems],
                "warnings": [w.to_json() for w in report.warnings],
            }
        )
    else:
        _problems(report)
        if report.valid:
            out.print(_labelled("green", N_("valid"), escape(_said(file))), soft_wrap=True)
        else:
            shown = f"{escape(_said(file))}: {text(_count(report.problems))}"
            out.print(_labelled("bold red", N_("invalid"), shown), soft_wrap=True)
    if not report.valid:
        raise typer.Exit(EXIT_FAILED)


@app.command("submit")
def submit(
    file: FileArg,
    root: RootOption = Path("evidence"),
    timeout: Annotated[float, typer.Option(help="Seconds one clean-room call may take.")] = 20.0,
    isolation: IsolationOption = "auto",
    json_: JsonFlag = False,
) -> None:
    """Validate a submission, re-measure its claims on the recorded seed, and keep it if they hold.

    The claims are re-measured on the clean room the submission names
    (labctl.clean_room: an absolute path, or relative to the submission or
    the repository): it must hold the files the runs were made with, not be
    labctl's own, and pass verify. The strings in `commands` are never
    executed. Submitting the same content twice, the room unchanged, says it
    is already recorded (exit 0) and writes nothing.
    """
    from labctl.evidence.submit import submit as run_submit
    from labctl.outpaths import check_out_dir

    positive_seconds(timeout, "--timeout")
    # An accepted submission is written under --root: one that is a file was found only then,
    # after every claim had been re-measured for nothing.
    check_out_dir(root, "--root")
    with err.status(_("re-measuring…")):
        outcome = run_submit(file, root, timeout, isolation=effective(isolation))
    report = outcome.report
    if json_:
        print_json(
            {
                "file": _shown(file),
                "accepted": outcome.accepted,
                "already_recorded": outcome.already is not None,
                "stored": _shown(outcome.stored or outcome.already)
                if outcome.accepted and (outcome.stored or outcome.already)
                else None,
                "seed": outcome.seed,
                "problems": [p.to_json() for p in report.problems],
                "warnings": [w.to_json() for w in report.warnings],
                "reproduced": [r.to_json() for r in outcome.reproductions],
            }
        )
    else:
        _problems(report)
        for item in outcome.reproductions:
            if item.reproduced:
                _line(
                    _(
                        Msg(
                            "reproduced: {field} {name} ({impl}): claimed {claimed!r}, "
                            "measured {measured!r}",
                            field=item.field,
                            name=item.name,
                            impl=item.impl,
                            claimed=item.claimed,
                            measured=item.measured,
                        )
                    )
                )
        shown = escape(_said(file))
        if not outcome.accepted:
            written = Msg("{problems}; nothing written", problems=_count(report.problems))
            out.print(
                _labelled("bold red", N_("refused"), f"{shown}: {text(written)}"), soft_wrap=True
            )
        elif outcome.already is not None:
            already = Msg("{file} as {stored}; nothing written", file=_said(file),
                          stored=_shown(outcome.already))  # fmt: skip
            out.print(_labelled("green", N_("already recorded"), text(already)), soft_wrap=True)
        else:
            accepted = Msg(
                "{file}: {n} claim(s) re-measured on seed {seed}; stored as {stored}",
                file=_said(file),
                n=len(outcome.reproductions),
                seed=outcome.seed,
                stored=_shown(outcome.stored),
            )
            out.print(_labelled("green", N_("accepted"), text(accepted)), soft_wrap=True)
    if not outcome.accepted:
        raise typer.Exit(EXIT_FAILED)
