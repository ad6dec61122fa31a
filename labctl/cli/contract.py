"""`labctl contract show|check`."""

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from labctl import contract
from labctl.cli.isolation import IsolationOption, effective
from labctl.cli.render import Column, err, fit, out, print_json, text, verdict
from labctl.errors import EXIT_FAILED
from labctl.i18n import N_, Msg, _

app = typer.Typer(no_args_is_help=True)  # its help: labctl.cli.commands

JsonFlag = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]
ContractOption = Annotated[
    int | None,
    typer.Option(
        "--contract",
        min=contract.VERSIONS[0],
        max=contract.LATEST,
        metavar="1|2",
        help="Contract version, 1 or 2 [default: the one the clean room declares, else 1].",
        show_default=False,
    ),
]


@app.command()
def show(contract_version: ContractOption = None, json_: JsonFlag = False) -> None:
    """Print the contract's functions (v1: 19, v2: 26): signature, returns, meaning."""
    version = contract_version or contract.CONTRACT_VERSION
    digest = contract.verify_pin(version=version)
    functions = contract.functions(version)
    if json_:
        print_json(
            {
                "id": contract.contract_id(version),
                "sha256": digest,
                **contract.data(version),
            }
        )
        return
    # A signature is code a learner copies: it is never broken; too wide, the table stacks.
    table = fit(
        (
            Column(N_("signature"), identifier=True),
            Column(N_("returns"), prose=True),
            Column(N_("meaning"), prose=True),
        ),
        [
            (f"{fn.number}. {escape(fn.signature())}", text(fn.returns), text(fn.meaning))
            for fn in functions
        ],
        title=f"{contract.contract_id(version)} (sha256 {digest[:12]}…)",
        show_lines=True,
    )
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
    contract_version: ContractOption = None,
    json_: JsonFlag = False,
) -> None:
    """Check that a clean room exposes every contract function with the exact signature."""
    from labctl.contract_check import check_clean_room
    from labctl.evidence.records import shown_path
    from labctl.runner import default_clean_room
    from labctl.textsafe import valid

    room = path or default_clean_room()
    level = effective(isolation)
    report = check_clean_room(
        room, shown=shown_path(room), isolation=level, version=contract_version
    )
    if json_:
        print_json(report.to_json())
    else:
        stub_word = f"[yellow]{_('stub')}[/yellow]"
        for name in report.checked:
            problems = [_(d.shown) for d in report.deviations if d.function == name]
            mark = stub_word if name in report.stubs and not problems else verdict(not problems)
            out.print(f"{mark}  {name}" + "".join(f"\n      {escape(m)}" for m in problems))
        summary = Msg(
            "{matching}/{total} functions match {contract} (sha256 {digest}…) in {path}",
            matching=report.matching(),
            total=len(report.checked),
            contract=report.contract_id,
            digest=report.digest[:12],
            # the path as given: the report's own is never absolute, so may be just a name
            path=valid(str(room)),
        )
        if report.stubs:
            summary = Msg(
                "{summary}; {count} of them are stubs, not written yet "
                "(they raise NotImplementedError)",
                summary=summary,
                count=len(report.stubs),
            )
        out.print(f"\n{verdict(report.passed)}  {text(summary)}")
    if not report.passed:
        raise typer.Exit(EXIT_FAILED)


@app.command()
def document(contract_version: ContractOption = None, json_: JsonFlag = False) -> None:
    """Print the contract's whole text: conventions, functions and the bad input each refuses."""
    version = contract_version or contract.CONTRACT_VERSION
    body = contract.document_text(version)
    path = contract.document_path(version)
    if json_:
        print_json(
            {
                "id": contract.contract_id(version),
                "sha256": contract.DOCUMENT_SHA256[version],
                "path": str(path),
                "text": body,
            }
        )
        return
    out.print(body, markup=False, highlight=False, soft_wrap=True, end="")
    err.print(text(Msg("(the installed file: {path})", path=str(path))), markup=False)
