"""`labctl report`: the evidence on disk as one self-contained HTML file with plots."""

from pathlib import Path
from typing import Annotated

import typer

from labctl.cli.lang import Language
from labctl.cli.render import err, out, print_json
from labctl.i18n import _
from labctl.textsafe import shown

JsonFlag = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]


def report(
    out_file: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="The HTML file to write [default: ROOT/report.html].",
            show_default=False,
        ),
    ] = None,
    root: Annotated[
        Path,
        typer.Option(
            "--root", help="The evidence root (runs/, verify/), or a folder of `run --out`."
        ),
    ] = Path("evidence"),
    open_: Annotated[
        bool, typer.Option("--open", help="Open the report in the web browser.")
    ] = False,
    # The language is chosen from the raw arguments before parsing (labctl.cli.lang);
    # declaring it here lets `report --lang zh` parse.
    lang: Annotated[
        Language | None,
        typer.Option(
            "--lang",
            help="Language of the report: zh or en.",
            case_sensitive=False,
            show_default=False,
        ),
    ] = None,
    json_: JsonFlag = False,
) -> None:
    from labctl.evidence.records import shown_path
    from labctl.report import build_report

    with err.status(_("drawing the report…")):
        path, summary = build_report(root, out_file)
    summary["report"] = shown_path(path)
    if json_:
        print_json({"passed": True, **summary})
    else:
        # Folder and record names are the learner's: an ESC sequence or a newline in one drove
        # the terminal and split a line; each line is shown escaped (--json keeps them exact).
        labs = summary["labs"]
        written = _("report of {n} labs and {v} verify runs written to {path}").format(
            n=len(labs), v=summary["verify_runs"], path=summary["report"]
        )
        out.print(shown(written), markup=False)
        for lab in labs:
            for problem in lab["problems"]:
                err.print(shown(f"{lab['id']}: {_(problem)}"), markup=False, soft_wrap=True)
        for unread in summary["unread"]:
            if not unread["on_run"]:
                said = _("{path}: not read: {why}").format(
                    path=unread["path"], why=_(unread["why"])
                )
                err.print(shown(said), markup=False, soft_wrap=True)
    if open_:
        import webbrowser

        webbrowser.open(path.resolve().as_uri())
