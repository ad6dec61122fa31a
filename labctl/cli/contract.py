"""`labctl contract show|check`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from labctl import contract
from labctl.cli.isolation import IsolationOption, effective
from labctl.cli.render import out, print_json, verdict
from labctl.errors import EXIT_FAILED

app = typer.Typer(help="The frozen clean-room interface, contract v1.", no_args_is_help=True)

JsonFlag = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]


@app.command()
def show(json_: JsonFlag = False) -> None:
    """Print the 19 contract functions: signature, returns, meaning."""
    digest = contract.verify_pin()
    functions = contract.functions()
    if json_:
        print_json({"id": contract.CONTRACT_ID, "sha256": digest, **contract.raw_contract()})
        return
    table = Table(title=f"{contract.CONTRACT_ID} (sha256 {digest[:12]}…)", show_lines=True)
    for column in ("#", "signature", "returns", "meaning"):
        table.add_column(column, overflow="fold")
    for fn in functions:
        table.add_row(str(fn.number), fn.signature(), fn.returns, fn.meaning)
    out.print(table)


@app.command()
def check(
    path: Annotated[
        Path | None,
        typer.Option(
            "--path",
            help="Clean-room package directory [default: ./clean_room, else the project's own].",
            show_default=False,
        ),
    ] = None,
    isolation: IsolationOption = "auto",
    json_: JsonFlag = False,
) -> None:
    """Check that a clean room exposes every contract function with the exact signature."""
    from labctl.contract_check import check_clean_room
    from labctl.evidence.records import shown_path
    from labctl.runner import default_clean_room

    room = path or default_clean_room()
    level = effective(isolation)
    report = check_clean_room(room, shown=shown_path(room), isolation=level)
    if json_:
        print_json(report.to_json())
    else:
        for name in report.checked:
            problems = [d.message for d in report.deviations if d.function == name]
            out.print(
                f"{verdict(not problems)}  {name}" + "".join(f"\n      {m}" for m in problems)
            )
        total = len(report.checked)
        bad = len({d.function for d in report.deviations})
        out.print(
            f"\n{verdict(report.passed)}  {total - bad}/{total} functions match "
            f"{report.contract_id} (sha256 {report.digest[:12]}…) in {report.path}"
        )
    if not report.passed:
        raise typer.Exit(EXIT_FAILED)
