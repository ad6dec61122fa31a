"""The table `labctl grade class` prints: a row per learner, the similarity lines, the
summary. Learner text is escaped and never cut mid-clause (`labctl.cli.render`)."""

import re
from pathlib import Path

from rich.cells import cell_len
from rich.markup import escape

from labctl.cli import grade_class as ta
from labctl.cli.render import Column, Prose, fit, out
from labctl.i18n import N_, Msg, _
from labctl.textsafe import shown

# The terminal shows whole clauses of a diagnosis up to about this many cells; the gradebook
# holds them all.
DIAGNOSIS_CELLS = 200

# The table's column headers: words for a person (the gradebook's columns stay English).
COLUMNS = (
    ("learner", N_("learner")),
    ("status", N_("status")),
    ("score", N_("score")),
    ("isolation", N_("isolation")),
    ("diagnosis", N_("diagnosis")),
)


def _clauses(diagnosis: str) -> list[str]:
    """One clause per function: the gradebook joins them with "; ", which a sentence may hold
    too ("...: it is built on it; fix causal_mask first"), so a clause starts at a function's
    name."""
    from labctl import contract

    names = "|".join(contract.function_names(contract.LATEST))
    return re.split(rf"; (?=(?:{names})\b)", diagnosis) if diagnosis else []


def _diagnosis_shown(diagnosis: str) -> str:
    """The diagnosis's whole clauses that fit DIAGNOSIS_CELLS, and how many more the gradebook
    holds: a clause is never cut."""
    clauses = _clauses(diagnosis)
    kept = clauses[:1]
    for clause in clauses[1:]:
        if cell_len("; ".join([*kept, clause])) > DIAGNOSIS_CELLS:
            break
        kept.append(clause)
    shown_text = "; ".join(kept)
    if len(kept) < len(clauses):
        more = Msg("(and {n} more in gradebook.csv)", n=len(clauses) - len(kept))
        shown_text += " " + _(more)
    return shown_text


def render(batch, rubric, found, out_dir: Path) -> None:
    from labctl.grade.basecode import flag
    from labctl.grade.score import points_text  # the gradebook's figures, to the cent

    rows = []
    for row, identical in zip(batch.rows, batch.identical, strict=True):
        diagnosis = shown(_diagnosis_shown(row.diagnosis))
        if row.output_bytes:
            cost = ta.output_cost(row)
            diagnosis = f"{diagnosis} ({cost})" if diagnosis else cost
        if identical:
            same = _(Msg("same clean room as {learners}", learners=", ".join(identical)))
            diagnosis = f"{diagnosis} ({same})" if diagnosis else same
        if row.base_code and row.base_code.get("functions"):
            based = _(Msg("base code, no points: {flag}", flag=flag(row.base_code)))
            diagnosis = f"{based}; {diagnosis}" if diagnosis else based
        rows.append(
            [
                escape(shown(row.learner)),
                row.status if row.status == "graded" else f"[bold red]{row.status}[/bold red]",
                f"{points_text(row.score)}/{points_text(row.max_score)}",
                row.isolation or "—",
                escape(diagnosis),
            ]
        )
    columns = [Column(header, identifier=name != "diagnosis", prose=name == "diagnosis")
               for name, header in COLUMNS]  # fmt: skip
    out.print(fit(columns, rows, box=None, pad_edge=False, padding=(0, 1)))
    if found is not None:
        _render_similarity(found)
    out.print(Prose(escape(_(ta.summary_line(batch, rubric, out_dir)))))


def _render_similarity(found) -> None:
    from labctl.grade.similarity_report import headline

    for name, room in found.rooms.items():
        if room.base_share >= found.threshold:
            line = Msg(
                "base code: {learner}: {share:.0%} of its clean room is base code (labctl's own "
                "clean room, the clean-room init stubs, --base)",
                learner=shown(name),
                share=room.base_share,
            )
            out.print(Prose(escape(_(line))))
    if not found.pairs:
        out.print(Prose(escape(_("similarity: no pair of clean rooms above the threshold"))))
    for pair in found.pairs:
        if pair.shared_functions:
            where = ", ".join(
                f"{shown(m.a_function)} ({shown(m.a_file)} {m.a_lines[0]}-{m.a_lines[1]} ~ "
                f"{shown(m.b_file)} {m.b_lines[0]}-{m.b_lines[1]})"
                for m in pair.shared_functions[:3]
            )
            more = len(pair.shared_functions) - 3
            if more > 0:
                where += " " + _(Msg("(and {n} more in similarity.html)", n=more))
            line = Msg(
                "similar: {headline}; shared functions: {functions}",
                headline=shown(headline(pair)),
                functions=where,
            )
        else:
            # Each file pair's span; similarity.html shows every region of it.
            files = ", ".join(
                f"{shown(f.a_file)} {min(r.a_lines[0] for r in f.regions)}-"
                f"{max(r.a_lines[1] for r in f.regions)} ~ {shown(f.b_file)} "
                f"{min(r.b_lines[0] for r in f.regions)}-{max(r.b_lines[1] for r in f.regions)}"
                for f in pair.files[:3]
            )
            line = Msg("similar: {headline}; {files}", headline=shown(headline(pair)), files=files)
        out.print(Prose(escape(_(line))))
