"""`labctl verify clean-room`, `labctl clean-room init`, `labctl faults`."""

import shlex
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table

from labctl import outpaths
from labctl.cli.contract import ContractChoice, ContractOption
from labctl.cli.isolation import IsolationOption, effective
from labctl.cli.options import memory_limit, positive_seconds
from labctl.cli.render import Prose, err, learner_text, number, out, print_json, verdict
from labctl.errors import EXIT_FAILED, UsageError
from labctl.i18n import N_, Msg, _, joined
from labctl.textsafe import shown as shown_text

JsonFlag = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]

# Their help, and the root's help of every command: labctl.cli.commands.
verify_app = typer.Typer(no_args_is_help=True)
clean_room_app = typer.Typer(no_args_is_help=True)

_MARK = {"pass": "[green]✓[/green]", "fail": "[bold red]✗[/bold red]", "not-run": "[dim]–[/dim]"}
# Short column heads, so the function x check table fits 80 columns; the legend under the
# table names each check in full.
_SHORT = {
    "loads": N_("lod"),
    "import-policy": N_("imp"),
    "contract": N_("sig"),
    "runs": N_("run"),
    "shape": N_("shp"),
    "dtype": N_("dty"),
    "parity": N_("parity"),
    "finite": N_("fin"),
    "pure": N_("pur"),
    "rows-sum": N_("sum"),
    "causal": N_("cau"),
    "bad-input": N_("bad"),
    "memory": N_("mem"),
}
# A line that continues a failure or a diagnosis starts this far in: under its own text.
_HANG = 4


def _head(name: str, matrix: bool = False) -> str:
    """A check's column head; the fault matrix's columns hold marks only, so parity's is
    short there too."""
    return _(N_("par")) if matrix and name == "parity" else _(_SHORT.get(name, name))


def _label(name: str) -> str:
    from labctl.verify.checks import check_label

    return _(check_label(name))


def _legend(names, matrix: bool = False) -> str:
    heads = {n: _head(n, matrix) for n in names}
    return " · ".join(f"{heads[n]} {_label(n)}" for n in names if heads[n] != _label(n))


@verify_app.command("clean-room")
def clean_room(
    path: Annotated[
        Path | None,
        typer.Option(
            "--path",
            help="Clean-room package directory (default: ./clean_room if it is a package; "
            "without one, name your room: --path my_room).",
            show_default=False,
        ),
    ] = None,
    timeout: Annotated[
        float, typer.Option("--timeout", help="Seconds one clean-room call may take.")
    ] = 20.0,
    budget: Annotated[
        float,
        typer.Option(
            "--budget",
            help="Seconds the whole room's calls may take, counted in labctl: past it the "
            "calls left are not run and the verdict is over-budget, never a pass. The same "
            "rule as grade's --learner-timeout.",
        ),
    ] = 120.0,
    memory_mb: Annotated[
        int, typer.Option("--memory-mb", help="Memory limit of the clean-room process (MiB).")
    ] = 4096,
    out_dir: Annotated[
        Path,
        typer.Option(
            "--out",
            help=(
                "Where verify records and their history go; the evidence manifest "
                "(module-manifest-v1.json, the newest record of each module) is kept in its "
                "parent folder, the evidence root."
            ),
        ),
    ] = Path("evidence/verify"),
    metrics: Annotated[
        bool,
        typer.Option(
            "--metrics/--no-metrics",
            help="Measure the course template's metrics through the labs (slower).",
        ),
    ] = True,
    isolation: IsolationOption = "auto",
    contract_version: ContractOption = None,
    seed: Annotated[
        int | None,
        typer.Option(
            "--seed",
            help="Draw every fixture and lab input from this seed (default: a fresh one; "
            "5 is the course's).",
            show_default=False,
        ),
    ] = None,
    json_: JsonFlag = False,
) -> None:
    """Check a clean room: contract, import policy, parity, properties, isolation; diagnose."""
    from labctl.evidence.records import shown_path
    from labctl.evidence.room import record_notes
    from labctl.isolation.loader import existing_folder
    from labctl.runner import local_clean_room
    from labctl.verify.builders import fresh_seed
    from labctl.verify.record import check_out_dir
    from labctl.verify.verify import check_seed, verify_clean_room

    positive_seconds(timeout, "--timeout")
    positive_seconds(budget, "--budget")
    memory_limit(memory_mb)
    check_out_dir(out_dir)
    seed = check_seed(fresh_seed() if seed is None else seed)
    level = effective(isolation)
    target = path if path is not None else local_clean_room()
    if target is None:
        raise UsageError(
            Msg(
                "no ./clean_room here: name the clean room to verify, e.g. "
                "labctl verify clean-room --path my_room"
            )
        )
    # A folder that is not there is refused before the seed is said: nothing was drawn.
    existing_folder(target)
    # Before anything runs: a run stopped half-way can still be repeated exactly.
    err.print(
        _(Msg("fixtures drawn with seed {seed}; rerun with --seed {seed}", seed=seed)),
        markup=False,
        soft_wrap=True,
    )
    with err.status(_("verifying…")) as status:

        def progress(what: str) -> None:
            status.update(
                learner_text(Msg("verifying {path}: {what}", path=shown_path(target), what=what))
            )

        report = verify_clean_room(
            target,
            timeout,
            memory_mb,
            out_dir,
            measure=metrics,
            progress=progress,
            isolation=level,
            seed=seed,
            budget_s=budget,
            contract_version=contract_version,
        )
    for note in record_notes(report.clean_room, "--path"):
        err.print(_(note), markup=False)
    if json_:
        print_json(report.to_json(shown_path))
    else:
        _render_report(report, shown_path)
    if not report.passed:
        raise typer.Exit(EXIT_FAILED)


def _short_number(value: float) -> str:
    if value != value or value in (float("inf"), float("-inf")):
        return "inf" if value == value else "nan"
    return "0" if value == 0 else f"{value:.0e}"


def _rows_narrow(report, names, by_cell) -> None:
    """A line per function, its failing checks named: for a terminal too narrow for the
    table, whose columns would be squeezed to one letter and an ellipsis."""
    from labctl import contract

    for function in contract.function_names(report.contract):
        results = [by_cell[(function, n)] for n in names if (function, n) in by_cell]
        failed = [r for r in results if r.failed]
        if failed:
            said = _(", ").join(
                f"{_label(r.name)} {_short_number(r.max_error)}"
                if r.name == "parity" and r.max_error is not None
                else _label(r.name)
                for r in failed
            )
            out.print(f"{function} {_MARK['fail']} {escape(said)}")
        else:
            mark = "pass" if results and all(r.passed for r in results) else "not-run"
            out.print(f"{function} {_MARK[mark]}")


def _render_report(report, shown) -> None:
    from labctl import contract
    from labctl.isolation import describe
    from labctl.lab import shown_expected
    from labctl.verify.checks import CHECK_NAMES
    from labctl.verify.compare import TOLERANCE_VERSION
    from labctl.verify.observe import PACKAGE

    record = next((shown(p) for p in report.records if p.suffix == ".json"), None)
    where = _(Msg("; record {record}", record=record)) if record else ""
    if report.status not in ("loaded", "over-budget"):
        out.print(
            f"{verdict(False)}  {escape(shown_text(report.path))}: {learner_text(report.shown)}"
            f"{escape(where)}",
            soft_wrap=True,
        )
        return
    by_cell = {(c.function, c.name): c for c in report.checks}
    package = [by_cell[(PACKAGE, n)] for n in ("loads", "import-policy") if (PACKAGE, n) in by_cell]
    # pieces already markup: the marks, and a learner's text escaped (a file name, a message)
    checked = joined(
        [
            Msg(
                "{check} {mark} ({detail})",
                check=escape(_label(c.name)),
                mark=_MARK[c.status],
                detail=learner_text(c.shown),
            )
            for c in package
        ]
    )
    # the room's path is a learner's name: shown, never translated
    path = escape(shown_text(report.path))
    out.print(_(Msg("{path}: {checks}", path=path, checks=checked)))
    # import-policy has a cell only where a function holds a violation.
    names = [n for n in CHECK_NAMES if n != "loads"]
    table = Table(box=None, pad_edge=False, padding=(0, 1), collapse_padding=True)
    table.add_column(_("function"), no_wrap=True)
    for name in names:
        table.add_column(_head(name), justify="left" if name == "parity" else "center")
    for function in contract.function_names(report.contract):
        cells = []
        for name in names:
            result = by_cell.get((function, name))
            if result is None:
                cells.append("")
            elif name == "parity" and result.max_error is not None:
                cells.append(f"{_MARK[result.status]} {_short_number(result.max_error)}")
            else:
                cells.append(_MARK[result.status])
        table.add_row(function, *cells)
    # Its natural width (measured without the terminal's bound, which would clamp it).
    if Measurement.get(out, out.options.update(width=1 << 16), table).maximum <= out.width:
        out.print(table)
        legend = Msg("{legend}; {parity}", legend=_legend(names), parity=_("parity: max abs error"))
        out.print(f"[dim]{escape(_(legend))}[/dim]")
    else:
        _rows_narrow(report, names, by_cell)
    failed = [c for c in report.checks if c.failed]
    if failed:
        out.print(f"[bold]{_('failures')}[/bold]")
        for c in failed:
            # markup already: the names escaped, the problem as a learner's text
            said = Msg(
                "{function} · {check}: {problem}",
                function=escape(c.function),
                check=escape(_label(c.name)),
                problem=learner_text(c.shown),
            )
            out.print(Prose(f"  {_(said)}", hang=_HANG))
    if report.diagnosis:
        out.print(f"[bold]{_('diagnosis')}[/bold]")
        stubs = [d.function for d in report.diagnosis if d.kind == "not-implemented"]
        if stubs:
            total = len(contract.function_names(report.contract))
            shown = (
                _(Msg("all {total} functions", total=total))
                if len(stubs) == total
                else ", ".join(stubs)
            )
            said = _(Msg("not implemented yet: {shown}", shown=shown))
            out.print(Prose(f"  {escape(said)}", hang=_HANG))
        for d in report.diagnosis:
            if d.kind != "not-implemented":
                out.print(Prose(f"  {learner_text(d.shown, lines=True)}", hang=_HANG))
    if report.metrics:
        out.print(
            f"[bold]{_('course template metrics (学习者提交模板), on this clean room')}[/bold]"
        )
        for m in report.metrics:
            if m.actual is None:
                note = f"  [dim]{m.name}: {learner_text(m.shown_note)}[/dim]"
                out.print(Prose(note, hang=_HANG))
            else:
                detail = _(
                    Msg(
                        "(expected {expected}, {impl}, lab {lab})",
                        expected=shown_expected(m.expected),
                        impl=m.impl,
                        lab=m.lab,
                    )
                )
                line = f"  {verdict(m.passed)}  {m.name} = {number(m.actual)} {escape(detail)}"
                out.print(Prose(line, hang=_HANG))
    passed, total = report.functions_passed()
    summary = Msg(
        "{passed}/{total} functions pass every check ({contract}, tolerances {tolerances}, "
        "timeout {timeout:g} s) in {seconds:.1f} s{where}; isolation {isolation}",
        passed=passed,
        total=total,
        contract=contract.contract_id(report.contract),
        tolerances=TOLERANCE_VERSION,
        timeout=report.timeout_s,
        seconds=report.wall_time_s,
        where=escape(where),
        isolation=describe(report.isolation),
    )
    if report.over_budget:
        out.print(f"[bold red]over-budget[/bold red]: {escape(_(report.shown))}", soft_wrap=True)
    out.print(f"{verdict(report.passed)}  {_(summary)}", soft_wrap=True)


@clean_room_app.command("init")
def init(
    directory: Annotated[
        Path, typer.Argument(help="A new or empty directory for the package.", show_default=False)
    ],
    contract_version: ContractChoice = None,
    json_: JsonFlag = False,
) -> None:
    """Write every contract function as a stub (signature, shapes, formula, NotImplementedError)."""
    from labctl import contract
    from labctl.verify.stubs import init_clean_room

    version = contract_version or contract.CONTRACT_VERSION
    written = init_clean_room(directory, version)
    if json_:
        print_json(
            {
                "path": str(directory),
                "files": [str(p) for p in written],
                "contract": contract.contract_id(version),
                "functions": list(contract.function_names(version)),
            }
        )
        return
    wrote = Msg(
        "wrote {n} stubs of {contract} to {files}",
        n=len(contract.function_names(version)),
        contract=contract.contract_id(version),
        files=", ".join(str(p) for p in written),
    )
    # the folder is the learner's name: shown escaped, and quoted where the command is copied
    command = shlex.join(["labctl", "verify", "clean-room", "--path", str(directory)])
    out.print(learner_text(wrote), soft_wrap=True)
    out.print(learner_text(Msg("next: {command}", command=command)), soft_wrap=True)


def faults(
    timeout: Annotated[
        float,
        typer.Option("--timeout", help="Seconds one call may take (the hang fault waits this)."),
    ] = 2.0,
    memory_mb: Annotated[
        int, typer.Option("--memory-mb", help="Memory limit of each clean-room process (MiB).")
    ] = 4096,
    out_dir: Annotated[Path, typer.Option("--out", help="Where the matrix record goes.")] = Path(
        "evidence/faults"
    ),
    isolation: IsolationOption = "auto",
    json_: JsonFlag = False,
) -> None:
    from labctl.evidence.records import shown_path
    from labctl.verify.matrix import build_matrix

    positive_seconds(timeout, "--timeout")
    memory_limit(memory_mb)
    # the matrix's record names its files: known before the faults run, not after
    outpaths.check_recordable(out_dir)
    outpaths.check_out_dir(out_dir)
    level = effective(isolation)
    with err.status(_("verifying the project's clean room…")) as status:

        def progress(name: str, done: int, total: int) -> None:
            status.update(f"[{done}/{total}] {name}")

        matrix = build_matrix(timeout, memory_mb, out_dir, progress, isolation=level)
    if json_:
        print_json(matrix.to_json(shown_path))
    else:
        _render_matrix(matrix, shown_path)
    if not matrix.passed:
        raise typer.Exit(EXIT_FAILED)


def _render_matrix(matrix, shown) -> None:
    from labctl.verify.checks import CHECK_NAMES, JUSTIFIED

    marks = {"caught": "[bold red]●[/bold red]", "pass": "[dim]·[/dim]", "not-run": "[dim]–[/dim]"}
    table = Table(box=None, pad_edge=False, padding=(0, 1), collapse_padding=True)
    table.add_column(_("fault"), no_wrap=True)
    for name in CHECK_NAMES:
        table.add_column(_head(name, matrix=True), justify="center")
    table.add_column(_("named"))
    for row in [matrix.baseline, *matrix.rows]:
        fault = row.fault
        cells = []
        for name in CHECK_NAMES:
            mark = marks[row.cells[name]]
            if fault is not None and name == fault.signal and row.cells[name] == "caught":
                mark = "[bold red]◉[/bold red]"
            cells.append(mark)
        if fault is None:
            diagnosed = ""
        elif row.diagnosed_as == fault.name:
            diagnosed = f"[green]{_('yes')}[/green]"
        else:
            diagnosed = f"[bold red]{_('no')}[/bold red]"
        table.add_row(row.name if fault else _("(none: project clean room)"), *cells, diagnosed)
    out.print(
        _(
            "which checks catch which fault: ● caught, ◉ caught by its signal check, · passed, – not run"
        )
    )
    out.print(table)
    legend = Msg(
        "{legend}; {parity}",
        legend=_legend(CHECK_NAMES, matrix=True),
        parity=_("named: diagnosed by its own name at its own function"),
    )
    out.print(f"[dim]{escape(_(legend))}[/dim]")
    for name, why in JUSTIFIED.items():
        justified = _(
            Msg("{name}: no catalogued fault, justified: {why}.", name=_label(name), why=_(why))
        )
        out.print(f"[dim]{justified}[/dim]", soft_wrap=True)
    for problem in matrix.problems_shown():
        out.print(f"{verdict(False)}  {learner_text(problem)}")
    record = next((shown(p) for p in matrix.records if p.suffix == ".json"), None)
    where = _(Msg("; record {record}", record=record)) if record else ""
    total = len(matrix.rows)
    caught = sum(1 for r in matrix.rows if r.caught_by)
    named = total - len(matrix.undiagnosed())
    proven = len(CHECK_NAMES) - len(matrix.unproven()) - len(JUSTIFIED)
    baseline = Msg("clean") if not matrix.baseline.failures else Msg("FAILING")
    summary = Msg(
        "{caught}/{total} faults caught, {named}/{total} diagnosed by name; {proven}/{checks} "
        "checks proven by a fault (+{justified} justified); baseline {baseline}; in "
        "{seconds:.1f} s{where}",
        caught=caught,
        total=total,
        named=named,
        proven=proven,
        checks=len(CHECK_NAMES),
        justified=len(JUSTIFIED),
        baseline=baseline,
        seconds=matrix.wall_time_s,
        where=where,
    )
    out.print(f"{verdict(matrix.passed)}  {_(summary)}", soft_wrap=True)
