"""`labctl contract show|check`."""

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from labctl import contract
from labctl.cli.isolation import IsolationOption, effective
from labctl.cli.render import Column, err, fit, out, print_json, stacked, text, verdict
from labctl.errors import EXIT_FAILED, UsageError
from labctl.i18n import N_, Msg, _
from labctl.verify import bad_input, rules

app = typer.Typer(no_args_is_help=True)  # its help: labctl.cli.commands

JsonFlag = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]


def _contract_option(help_text: str) -> typer.Option:
    return typer.Option(
        "--contract",
        min=contract.VERSIONS[0],
        max=contract.LATEST,
        metavar="1|2",
        help=help_text,
        show_default=False,
    )


# Where a clean room is read (check, verify) its declaration decides; where none is (show,
# document, init), 1 does: a help naming the room's there would say what does not happen.
ContractOption = Annotated[
    int | None,
    _contract_option(
        "Contract version, 1 or 2 [default: the one the clean room declares, else 1]."
    ),
]
ContractChoice = Annotated[int | None, _contract_option("Contract version, 1 or 2 [default: 1].")]


FunctionArgument = Annotated[
    str | None,
    typer.Argument(
        metavar="[FUNCTION]",
        help="One function to show in full (its parameters, what it refuses, its edges).",
        show_default=False,
    ),
]


def _refusals(function: str, version: int) -> list[dict]:
    """What `function` must refuse at `version`: each rule once, with the cases verify
    grades it by (identifiers) and the exceptions it takes."""
    from labctl.verify.bad_input import bad_cases

    found: dict[rules.Rule, list[str]] = {}
    for case in bad_cases(function, contract=version):
        found.setdefault(case.rule, []).append(case.name)
    return [
        {
            "rule": str(rule.said()),
            "condition": rule.condition,
            "argument": rule.argument,
            "raises": list(rules.EXCEPTIONS),
            "cases": names,
        }
        for rule, names in found.items()
    ]


def _refused_text(function: str, version: int) -> str:
    return "\n".join(_(rule.said()) for rule in bad_input.rules_of(function, version))


def _edge_text(function: str, version: int) -> str:
    edge = rules.edge_of(function, version)
    return _(edge) if edge else ""


@app.command()
def show(
    function: FunctionArgument = None,
    contract_version: ContractChoice = None,
    json_: JsonFlag = False,
) -> None:
    """Print the contract's functions (v1: 19, v2: 26): signature, meaning, what each refuses."""
    version = contract_version or contract.CONTRACT_VERSION
    digest = contract.verify_pin(version=version)
    functions = contract.functions(version)
    if function is not None:
        _show_one(function, version, digest, json_)
        return
    if json_:
        print_json(
            {
                "id": contract.contract_id(version),
                "sha256": digest,
                **contract.data(version),
                # labctl's reading of the Bad input section (the cases verify grades) and
                # of t_q > t_k, beside the pinned data, never inside it.
                "bad_input": {
                    fn.name: _refusals(fn.name, version)
                    for fn in functions
                    if bad_input.rules_of(fn.name, version)
                },
                "edges": {
                    fn.name: rules.edge_of(fn.name, version)
                    for fn in functions
                    if rules.edge_of(fn.name, version)
                },
            }
        )
        return
    # A signature is code a learner copies: it is never broken; too wide, the table stacks.
    table = fit(
        (
            Column(N_("signature"), identifier=True),
            Column(N_("returns"), prose=True),
            Column(N_("meaning"), prose=True),
            Column(N_("must refuse"), prose=True),
            Column(N_("t_q > t_k"), prose=True),
        ),
        [
            (
                f"{fn.number}. {escape(fn.signature())}",
                text(fn.returns),
                text(fn.meaning),
                escape(_refused_text(fn.name, version)),
                escape(_edge_text(fn.name, version)),
            )
            for fn in functions
        ],
        title=f"{contract.contract_id(version)} (sha256 {digest[:12]}…)",
        show_lines=True,
    )
    out.print(table)


def _show_one(name: str, version: int, digest: str, json_: bool) -> None:
    """One function in full: signature, parameters, returns, meaning, refusals, edges."""
    fn = next((f for f in contract.functions(version) if f.name == name), None)
    if fn is None:
        later = [v for v in contract.VERSIONS if v > version and name in contract.function_names(v)]
        if later:
            raise UsageError(
                Msg(
                    "no function {name} in contract v{version}: it came with v{later}; "
                    "labctl contract show {name} --contract {later}",
                    name=name,
                    version=version,
                    later=later[0],
                )
            )
        raise UsageError(
            Msg(
                "no function {name} in contract v{version}; its functions: {names}",
                name=name,
                version=version,
                names=", ".join(contract.function_names(version)),
            )
        )
    if json_:
        fn_data = next(f for f in contract.data(version)["functions"] if f["name"] == name)
        print_json(
            {
                "id": contract.contract_id(version),
                "sha256": digest,
                "function": fn_data,
                "bad_input": _refusals(name, version),
                "edge": rules.edge_of(name, version),
            }
        )
        return
    params = "\n".join(f"{p.name}: {_(p.shape)}" if p.shape else p.name for p in fn.params)
    row = (
        f"[bold]{fn.number}. {escape(fn.signature())}[/bold]",
        escape(params),
        text(fn.returns),
        text(fn.meaning),
        escape(_refused_text(name, version))
        or text(N_("nothing: the contract's Bad input section lists no case for it")),
        escape(_edge_text(name, version)),
    )
    columns = (
        Column(N_("signature"), identifier=True),
        Column(N_("parameters"), prose=True),
        Column(N_("returns"), prose=True),
        Column(N_("meaning"), prose=True),
        Column(N_("must refuse"), prose=True),
        Column(N_("t_q > t_k"), prose=True),
    )
    out.print(
        stacked(columns, [row], title=f"{contract.contract_id(version)} (sha256 {digest[:12]}…)")
    )


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
    from labctl.runner import default_clean_room, local_clean_room
    from labctl.textsafe import valid

    room = path or default_clean_room()
    if path is None and local_clean_room() is None:
        # its PASS is labctl's answer: a learner who forgot --path must not read it as theirs
        err.print(
            text(
                Msg(
                    "note: no ./clean_room here, so this checks labctl's own clean room, not "
                    "yours; name your room with {option} my_room",
                    option="--path",
                )
            )
        )
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
def document(contract_version: ContractChoice = None, json_: JsonFlag = False) -> None:
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
