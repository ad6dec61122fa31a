"""`labctl list` and `labctl show LAB`: the labs, as a learner reads them before running one.

Both cite the course by chapter title, section number and heading. `show`
adds what a lab asks, the parameters a learner may change (defaults and the
bounds the lab's pydantic model enforces) and each metric's tolerance and why.
"""

from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.padding import Padding
from rich.text import Text

from labctl import listing
from labctl.cli import plain
from labctl.cli.render import Column, Prose, fit, heading, out, print_json, text
from labctl.errors import UsageError
from labctl.i18n import N_, Msg, _, speaking
from labctl.listing import citation

JsonFlag = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]

# The constraints pydantic's Field(ge=..., ...) leaves in a field's metadata, and how they read.
BOUNDS = (
    ("gt", ">"), ("ge", "≥"), ("lt", "<"), ("le", "≤"),
    ("min_length", N_("at least {n} values")), ("max_length", N_("at most {n} values")),
    ("multiple_of", N_("a multiple of {n}")),
)  # fmt: skip


def param_bounds(field) -> dict[str, Any]:
    """The bounds of one pydantic field, by constraint name: `{"ge": 1, "le": 512}`."""
    bounds: dict[str, Any] = {}
    for item in field.metadata:
        for name, _sign in BOUNDS:
            value = getattr(item, name, None)
            if value is not None:
                bounds[name] = value
    return bounds


def _bounds_text(name: str, bounds: dict[str, Any]) -> str:
    parts = []
    for key, sign in BOUNDS:
        if key in bounds:
            value = bounds[key]
            parts.append(f"{name} {sign} {value}" if len(sign) == 1 else _(sign).format(n=value))
    return ", ".join(parts) or "—"


def _default(value: Any) -> str:
    return ",".join(map(str, value)) if isinstance(value, tuple) else str(value)


def lab_document(lab) -> dict[str, Any]:
    """Everything `show` prints, as data: identifiers as they are, texts in the language `_`
    speaks (`show --json` has it speak English)."""
    from labctl import registry

    return {
        "id": lab.id,
        "title": _(lab.title),
        "question": _(lab.question),
        "sections": [citation(s) for s in lab.sections],
        "params": [
            {
                "name": name,
                "type": getattr(field.annotation, "__name__", str(field.annotation)),
                "default": field.default,
                "bounds": param_bounds(field),
                "description": _(field.description) if field.description else "",
            }
            for name, field in lab.params.model_fields.items()
        ],
        "tolerances": registry.TOLERANCE_TABLE_VERSION,
        "metrics": [
            {**listing.metric(m), "description": _(m.description), "why": _(m.why)}
            for m in lab.metrics
        ],
    }


def list_labs(json_: JsonFlag = False) -> None:
    print(plain.list_labs(json_))  # no rich: the console script prints it before importing any


def _indented(body: Text) -> Padding:
    """Two cells in, wrapped lines included; words (metric names) are never split."""
    return Padding(Prose(body), (0, 0, 0, 2))


def show(
    lab_id: Annotated[str, typer.Argument(metavar="LAB", help="A lab id (see labctl list).")],
    json_: JsonFlag = False,
) -> None:
    from labctl import registry
    from labctl.lab import UNITS, shown_expected

    if lab_id == "all":
        raise UsageError(N_("show takes one lab id; `labctl list` lists every lab"))
    lab = registry.get(lab_id)
    if json_:
        with speaking("en"):  # for tools: one language whatever the screen's
            print_json(lab_document(lab))
        return
    document = lab_document(lab)
    out.print(heading(lab.id, _(lab.title)))
    out.print(text(lab.question))
    out.print()
    out.print(f"[bold]{_('Course sections')}[/bold]")
    for section in lab.sections:
        out.print(_indented(Text(str(section))))
    out.print()
    out.print(
        f"[bold]{_('Parameters')}[/bold] [dim]({_('change one with --set NAME=VALUE')})[/dim]"
    )
    out.print(
        fit(
            (
                Column(N_("parameter"), identifier=True),
                Column(N_("default"), identifier=True),
                Column(N_("allowed")),
                Column(N_("meaning"), prose=True),
            ),
            [
                (
                    escape(p["name"]),
                    escape(_default(p["default"])),
                    escape(_bounds_text(p["name"], p["bounds"])),
                    escape(p["description"]),
                )
                for p in document["params"]
            ],
            show_edge=False,
        )
    )
    out.print()
    out.print(
        f"[bold]{_('Metrics')}[/bold] "
        f"[dim]({text(Msg('tolerance table {version}', version=document['tolerances']))})[/dim]"
    )
    out.print()
    for metric in lab.metrics:
        head = Text(metric.name, style="bold", no_wrap=True, overflow="ignore")
        head.append(f"  {_(shown_expected(metric.expected))}  ", style="")
        head.append(
            _(UNITS.get(metric.unit, metric.unit))
            + ("  " + _("(timing: never decides a verdict)") if metric.timing else ""),
            style="dim",
        )
        out.print(head)
        out.print(_indented(Text(_(metric.description))))
        out.print(_indented(Text(_(Msg("why: {why}", why=_(metric.why))), style="dim")))
        out.print()
