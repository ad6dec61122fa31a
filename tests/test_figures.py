"""The learner's own numbers in the terminal: heatmaps per implementation, differing cells
marked, and the same matrices kept as CSV artifacts."""

from __future__ import annotations

import csv
import re

from labtools import faulty_room
from rich.console import Console
from typer.testing import CliRunner

from labctl.cli.figures import MARK, differing, heatmap, heatmap_group
from labctl.cli.main import app
from labctl.lab import HeatmapFigure

runner = CliRunner()


def _figure(matrix, impl):
    return HeatmapFigure("t", "w", tuple(tuple(r) for r in matrix), impl=impl)


def test_differing_cells_are_those_beyond_the_tolerance():
    reference = _figure([[1.0, 0.0], [0.5, 0.5]], "reference")
    same = _figure([[1.0, 0.0], [0.5, 0.5 + 1e-12]], "clean-room")  # rounding: not a difference
    wrong = _figure([[1.0, 0.0], [0.5, 0.4]], "clean-room")
    assert differing(same, reference) == set()
    assert differing(wrong, reference) == {(1, 1)}
    assert differing(_figure([[float("nan"), 0.0], [0.5, 0.5]], "clean-room"), reference) == {
        (0, 0)
    }
    assert differing(_figure([[1.0]], "clean-room"), reference) == {(0, 0)}  # shape differs
    assert differing(reference, reference) == set()


def _rendered(renderable, width=80) -> str:
    console = Console(width=width, record=True, no_color=True)
    console.print(renderable)
    return console.export_text()


def test_only_the_differing_cells_carry_the_mark():
    reference = _figure([[1.0, 0.0], [0.5, 0.5]], "reference")
    wrong = _figure([[1.0, 0.0], [0.5, 0.4]], "clean-room")
    text = _rendered(heatmap(wrong, differing(wrong, reference)))
    assert text.count(MARK) == 2  # the cell, and the caption that explains the mark
    assert f"0.40{MARK}" in text and f"0.50{MARK}" not in text
    both = _rendered(heatmap_group([reference, wrong]))
    assert both.count(f"0.40{MARK}") == 1


def _row_zero(block: str) -> list[float]:
    # the row of query 0, bordered (`0 │`) or compact (`0 1.00 ...`)
    line = next(line for line in block.splitlines() if re.match(r"^\s*0\s+(│|\d)", line))
    return [float(v) for v in re.findall(r"\d+\.\d+", line)]


def test_a_reversed_mask_shows_the_learners_leak_in_the_terminal_and_the_csv(tmp_path):
    room = faulty_room(tmp_path, "mask-reversed")
    out = tmp_path / "runs"
    args = ["run", "causal-attention", "--clean-room", str(room), "--out", str(out)]
    result = runner.invoke(app, args, env={"COLUMNS": "80"})
    assert result.exit_code == 1, result.output
    reference_part, room_part = result.output.split("(clean-room); the upper")
    reference_part = reference_part.split("(reference); the upper")[1]
    reference_row, room_row = _row_zero(reference_part), _row_zero(room_part)
    assert reference_row[0] == 1.0 and reference_row[1:] == [0.0] * (len(reference_row) - 1)
    assert sum(room_row[1:]) > 0.5  # query 0 reads its future: the leak, in the learner's numbers
    assert MARK in room_part
    assert max(len(line) for line in result.output.splitlines()) <= 80

    def upper(path):
        rows = [[float(v) for v in row] for row in csv.reader(path.open())]
        return [rows[i][j] for i in range(len(rows)) for j in range(i + 1, len(rows))]

    (room_csv,) = out.glob("causal-attention/*-attention-b0-h0-clean-room.csv")
    (reference_csv,) = out.glob("causal-attention/*-attention-b0-h0-reference.csv")
    assert max(upper(room_csv)) > 0.1
    assert max(upper(reference_csv)) == 0.0


def test_a_correct_clean_room_marks_nothing(tmp_path):
    out = tmp_path / "runs"
    result = runner.invoke(app, ["run", "causal-attention", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "(clean-room); the upper" in result.output
    assert MARK not in result.output.split("(clean-room); the upper")[1]
