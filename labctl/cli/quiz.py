"""`labctl quiz`: the chapters' self-check and closed-book questions, answered and checked.

Interactive (one question at a time, an empty answer skips it) or from `--answers FILE`
(a YAML or JSON mapping of question id to answer). Each answer is checked against the value
labctl computes with the labs' own code; a prose question shows what a right answer must
contain and the lab that shows it, and is not graded. The graded answers are kept as a
record under --out. Exit 0 when every checkable question was answered right, 1 otherwise.
"""

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from labctl.cli.render import Column, Prose, err, fit, heading, learner_text, out, print_json, text
from labctl.errors import EXIT_FAILED
from labctl.i18n import N_, Msg, _, declared
from labctl.textsafe import shown as safe_text

JsonFlag = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]

SHOWN = {
    "correct": "[green]{}[/green]",
    "wrong": "[bold red]{}[/bold red]",
    "unanswered": "[yellow]{}[/yellow]",
    "ungraded": "[dim]{}[/dim]",
}
VERDICT_WORDS = {
    "correct": N_("correct"),
    "wrong": N_("wrong"),
    "unanswered": N_("unanswered"),
    "ungraded": N_("not graded (prose)"),
}


def quiz(
    sections: Annotated[
        list[str] | None,
        typer.Option(
            "--section",
            help="Ask only this self-check (repeatable): parts-6.13, ch8-checklist, "
            "ch8-closed-book, hands-on-13.1, hands-on-13.3, hands-on-13.5.",
            show_default=False,
        ),
    ] = None,
    answers: Annotated[
        Path | None,
        typer.Option(
            "--answers",
            help="A YAML or JSON file mapping question ids to answers, instead of asking.",
            show_default=False,
        ),
    ] = None,
    list_only: Annotated[
        bool, typer.Option("--list", help="List the questions and their ids; ask nothing.")
    ] = False,
    out_dir: Annotated[Path, typer.Option("--out", help="Where the graded record goes.")] = Path(
        "evidence/quiz"
    ),
    json_: JsonFlag = False,
) -> None:
    from labctl.evidence.records import shown_path
    from labctl.outpaths import check_out_dir
    from labctl.quiz import check, record

    chosen = check.select(sections)
    if list_only:
        _list(chosen, json_)
        return
    # Before the first question: a learner who typed every answer lost them all when --out
    # turned out to be a file, found only when the record was written.
    check_out_dir(out_dir)
    given = check.read_answers(answers) if answers is not None else None
    graded = []
    for question in chosen:
        if given is None and not json_:
            _ask_heading(question)
        if given is not None:
            answer = given.get(question.id)
        elif question.graded:
            answer = _typed(err if json_ else out)
        else:
            answer = None
        graded.append(check.grade(question, answer))
        if not json_:
            if given is not None:
                _ask_heading(question)
            _show(graded[-1], given is not None)
    kept = record.build(
        graded,
        sections or [],
        "file" if given is not None else "interactive",
        answers.read_bytes() if answers is not None else None,
    )
    where = record.write(kept, out_dir)
    if json_:
        print_json({**kept.dump(), "record": shown_path(where)})
    else:
        counts = kept.summary
        line = _(
            "{correct} correct, {wrong} wrong, {unanswered} unanswered, {ungraded} prose "
            "(not graded); record: {where}"
        ).format(**counts, where=safe_text(shown_path(where)))  # --out is the learner's name
        mark = SHOWN["correct" if kept.passed else "wrong"].format(
            _("pass") if kept.passed else _("FAIL")
        )
        out.print(Prose(f"{mark}  {escape(line)}"))
    if not kept.passed:
        raise typer.Exit(EXIT_FAILED)


def _typed(console) -> str:
    """One line from stdin after the prompt; at the end of the input, an empty answer (the
    rest unanswered). With --json the prompt goes to stderr: stdout holds one document."""
    console.print(_("your answer (empty to skip)") + ": ", end="", markup=False)
    line = sys.stdin.readline()
    if not line.endswith("\n"):
        console.print("")
    return line.strip()


def _ask_heading(question) -> None:
    out.print(heading(question.id, str(question.section)))
    out.print(Prose(text(question.asks)))
    if question.hint:
        # a hint is declared with N_ (a text, not a Msg): a Msg's text argument is not translated
        hint = declared(question.hint) if isinstance(question.hint, str) else question.hint
        out.print(Prose(f"[dim]{text(Msg('answer as: {hint}', hint=hint))}[/dim]"))
    if question.kind == "choice":
        choices = ", ".join(f"{key} ({_(label)})" if _(label) != key else key
                            for key, label in question.choices)  # fmt: skip
        out.print(Prose(f"[dim]{escape(_('choices: {choices}').format(choices=choices))}[/dim]"))


def _show(graded, from_file: bool) -> None:
    from labctl.quiz.check import shown

    question = graded.question
    if not question.graded:
        out.print(Prose(escape(_("a right answer says:"))))
        points = Table.grid(padding=(0, 1))
        points.add_column(no_wrap=True)
        points.add_column()
        for point in question.contains:
            points.add_row("  •", Prose(text(point)))
        out.print(points)
        out.print(
            Prose(
                f"[dim]{escape(_('the lab that shows it: labctl run {lab}').format(lab=question.lab))}[/dim]"
            )
        )
        out.print("")
        return
    verdict = SHOWN[graded.verdict].format(escape(_(VERDICT_WORDS[graded.verdict])))
    if from_file and graded.answer is not None:
        out.print(Prose(f"{escape(_('your answer:'))} {learner_text(str(graded.answer))}"))
    problem = f" ({text(graded.problem)})" if graded.problem else ""
    out.print(Prose(f"{verdict}{problem}"))
    if graded.verdict != "correct":
        answer = _("labctl computes: {answer}").format(answer=shown(question, graded.expected))
        out.print(Prose(escape(answer)))
    out.print(Prose(f"[dim]{text(question.why)}[/dim]"))
    out.print(
        Prose(
            f"[dim]{escape(_('the lab that shows it: labctl run {lab}').format(lab=question.lab))}[/dim]"
        )
    )
    out.print("")


def _list(chosen, json_: bool) -> None:
    if json_:
        print_json(
            {
                "questions": [
                    {
                        "id": q.id,
                        "group": q.group,
                        "section": str(q.section),
                        "kind": q.kind,
                        "graded": q.graded,
                        "asks": _(q.asks),
                        "lab": q.lab,
                    }
                    for q in chosen
                ]
            }
        )
        return
    rows = [
        [escape(q.id), escape(q.group), escape(_(N_("prose")) if not q.graded else q.kind),
         escape(q.lab)]
        for q in chosen
    ]  # fmt: skip
    out.print(
        fit(
            [Column(N_("question"), identifier=True), Column(N_("section"), identifier=True),
             Column(N_("answer"), identifier=True), Column(N_("lab"), identifier=True)],
            rows,
            show_edge=False,
        )
    )  # fmt: skip
    err.print(_("answer them with `labctl quiz`, or `labctl quiz --answers FILE`"), markup=False)
