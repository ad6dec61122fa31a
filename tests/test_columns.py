"""Every lab's terminal output, and grade's table, readable at 80 columns (and 60), in English
and Chinese: no line wider than the terminal in cells (a Chinese character takes two), nothing
cut with "…", prose wrapped between words or beside Chinese characters, the attention heatmaps'
token labels kept; and a metric row judged on the sides it has, timing rows reported only."""

from __future__ import annotations

import copy
import csv
import math
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from gradetools import copy_room, rubric_without
from honestrooms import honest_fault
from rich.cells import cell_len
from rich.console import Console
from typer.testing import CliRunner

from labctl import faults, registry
from labctl import runner as runner_module
from labctl.cli.main import app
from labctl.cli.render import Prose, break_offsets, row_verdict
from labctl.i18n import set_language
from labctl.verify.stubs import init_clean_room

runner = CliRunner()
ENV = {"LABCTL_LANG": "", "LC_ALL": "", "LC_MESSAGES": "", "LANG": ""}
SMALL = ["--set", "mask-ablation.steps=24", "--set", "mask-ablation.tail=4"]
WIDE = 1000  # nothing is cut or wrapped: the "…" written in the labs' own texts


@pytest.fixture(autouse=True)
def english_after():
    yield
    set_language("en")


def _invoke(args: list[str], lang: str, width: int):
    return runner.invoke(app, ["--lang", lang, *args], env={**ENV, "COLUMNS": str(width)})


def _too_wide(output: str, width: int) -> list[str]:
    return [line for line in output.splitlines() if cell_len(line) > width]


@pytest.fixture(scope="module")
def run_all(tmp_path_factory):
    """`labctl run all` (small parameters) at each width and language, the output kept.

    Each lab computes once: what a width or a language changes is the rendering, which
    every call still does; the same seed and parameters give the same numbers, and a lab's
    result holds its words untranslated (`Msg`, marked texts), translated as it is shown
    (test_screen.py holds each lab's words to its language)."""
    kept = {}
    computed = {}
    real = runner_module.run_lab

    def run_lab(lab, seed, impls, params=None):
        key = (lab.id, seed, repr(params), tuple(sorted(impls)))
        if key not in computed:
            computed[key] = real(lab, seed, impls, params)
        return copy.deepcopy(computed[key])

    def output(lang: str, width: int) -> str:
        if (lang, width) not in kept:
            out = tmp_path_factory.mktemp(f"runs-{lang}-{width}")
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(runner_module, "run_lab", run_lab)
                result = _invoke(["run", "all", "--out", str(out), *SMALL], lang, width)
            assert result.exit_code == 0, result.output
            kept[lang, width] = result.stdout
        return kept[lang, width]

    return output


@pytest.mark.slow
@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("width", [80, 60])
def test_every_lab_fits_the_terminal_and_nothing_is_cut(run_all, lang, width):
    shown = run_all(lang, width)
    assert _too_wide(shown, width) == []
    # every lab is there, its heading whole
    for lab in registry.discover():
        assert lab.id in shown
    # the only "…" are those the labs write themselves (wide, nothing can be cut)
    assert shown.count("…") == run_all(lang, WIDE).count("…")


def _heatmap_header_tokens(output: str) -> list[str]:
    """The column labels of the heatmaps' header lines (`query\\key  用  户 ...`)."""
    return [t for line in output.splitlines() if line.startswith("query\\key")
            for t in line.split()[1:]]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("width", [80, 60])
def test_attention_heatmaps_keep_their_token_labels(run_all, width):
    tokens = list(registry.get("attention-inspect").params().tokens)
    part = run_all("zh", width).split("attention-inspect")[1]
    labels = _heatmap_header_tokens(part)
    assert set(tokens) <= set(labels)
    # every token labels a row too: `用 1.00 0.00 ...`
    for token in tokens:
        assert re.search(rf"^\s*{re.escape(token)}\s+\d\.\d\d", part, re.M), token
    assert "0…" not in part


def test_a_heatmap_too_wide_is_sliced_not_cut():
    from labctl.cli.figures import heatmap_group
    from labctl.lab import HeatmapFigure

    ticks = tuple(f"t{j:02d}" for j in range(20))
    matrix = tuple(tuple(round((i * 7 + j) % 10 / 10, 2) for j in range(20)) for i in range(20))
    reference = HeatmapFigure("w", "w", matrix, impl="reference", row_ticks=ticks, col_ticks=ticks)
    wrong = [list(r) for r in matrix]
    wrong[3][17] = 0.99
    room = HeatmapFigure("w", "w", tuple(map(tuple, wrong)), impl="clean-room",
                         row_ticks=ticks, col_ticks=ticks)  # fmt: skip
    console = Console(width=60, record=True, no_color=True)
    console.print(heatmap_group([reference, room]))
    shown = console.export_text()
    assert _too_wide(shown, 60) == [] and "…" not in shown
    assert set(ticks) <= set(_heatmap_header_tokens(shown))
    assert "0.99*" in shown  # the learner's differing cell, still marked


# ---- prose ---------------------------------------------------------------------------------


def _lines(text: str, width: int) -> list[str]:
    console = Console(width=width, record=True, no_color=True)
    console.print(Prose(text))
    return console.export_text().splitlines()


def test_prose_breaks_beside_chinese_characters_and_never_inside_an_identifier():
    text = "它失败是因为 causal_mask 失败：multi_head_attention 与参考实现相差 0.5（超过容差）"
    for width in range(22, 60):
        lines = _lines(text, width)
        assert all(cell_len(line) <= width for line in lines), (width, lines)
        joined = "".join(line.strip() for line in lines)
        assert joined.replace(" ", "") == text.replace(" ", "")  # nothing lost
        assert any("multi_head_attention" in line for line in lines), (width, lines)
        assert not any(line.lstrip().startswith(("：", "）", "，")) for line in lines), lines


def test_a_word_wider_than_the_line_is_folded_not_cut():
    assert break_offsets("a" * 25, 10) == [10, 20]
    assert _lines("x" * 25, 10) == ["x" * 10, "x" * 10, "x" * 5]


# ---- grade's table -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """A class of two (the project's room, copied, and a reversed mask) graded per language;
    graded again at another width, the unchanged learners are not re-run. The table's columns
    are the same whatever the rubric scores, so its lab metrics (seconds a learner) are left out.
    """
    base = tmp_path_factory.mktemp("class")
    copy_room(base / "class" / "copycat" / "clean_room")
    honest_fault("mask-reversed", base / "class" / "mask_reversed" / "clean_room")
    rubric = rubric_without(base, "metric", "submission")
    kept = {}

    def output(lang: str, width: int) -> tuple[str, Path]:
        out = base / f"grades-{lang}"
        args = ["grade", str(base / "class"), "--out", str(out), "--jobs", "1"]
        args += ["--rubric", str(rubric)]
        result = _invoke(args, lang, width)
        assert result.exit_code == 0, result.output
        kept[lang, width] = result.stdout
        return result.stdout, out

    return output


@pytest.mark.slow
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_grade_table_fits_and_shows_whole_diagnosis_clauses(graded, lang):
    for width in (80, 60):
        shown, out = graded(lang, width)
        assert _too_wide(shown, width) == []
        with (out / "gradebook.csv").open(encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
        flat = re.sub(r"\s+", "", shown)
        faulty = next(r for r in rows if r["learner"] == "mask_reversed")
        first = faulty["diagnosis"].split("; ")[0]
        assert "causal_mask" in first
        assert re.sub(r"\s+", "", first) in flat  # the first clause whole, never cut
        # a "…" only where the grader's own diagnosis holds one (its 600-character cap), and
        # the clauses left out are counted, not cut
        assert shown.count("…") <= sum(r["diagnosis"].count("…") for r in rows)


# ---- verdict rows --------------------------------------------------------------------------


def _row(impl: str, actual: float, passed: bool, timing: bool = False, measured: bool = True):
    return SimpleNamespace(impl=impl, actual=actual, passed=passed, timing=timing,
                           measured=measured)  # fmt: skip


def test_a_row_is_judged_on_the_sides_it_has():
    reference = _row("reference", 3.5e-15, True)
    never = _row("clean-room", math.nan, False, measured=False)
    garbage = _row("clean-room", math.nan, False)  # a room that returned NaN: measured
    assert "pass" in row_verdict([reference, never])
    assert "FAIL" in row_verdict([reference, garbage])
    assert "FAIL" in row_verdict([_row("reference", 1.0, False), never])
    assert "not measured" in row_verdict([never])
    slow = _row("clean-room", 9.0, False, timing=True)
    assert "reported only" in row_verdict([slow])
    assert "reported only" in row_verdict([_row("clean-room", 1.0, True, timing=True)])


def test_the_reference_row_passes_where_the_clean_room_never_got_a_value(tmp_path):
    stubs = tmp_path / "stubs"
    init_clean_room(stubs)
    args = ["run", "worked-examples", "--clean-room", str(stubs), "--out", str(tmp_path / "r")]
    result = runner.invoke(app, args, env={**ENV, "COLUMNS": "120"})
    assert result.exit_code == 1, result.output  # the lab fails: the stubs raise
    row = next(line for line in result.stdout.splitlines() if "worked_arithmetic_max_error" in line)
    assert "—" in row and "pass" in row and "FAIL" not in row, row
    compared = next(
        line for line in result.stdout.splitlines() if "worked_impl_max_difference" in line
    )
    assert "not measured" in compared, compared


@pytest.mark.slow
def test_timing_rows_say_reported_only_in_the_terminal_as_in_the_report(run_all):
    shown = run_all("en", 80)
    lines = shown.split("kv-cache")[1].splitlines()
    start = lines.index("decode_time_ratio[T=64] (timing)")  # stacked at 80 columns
    assert any("reported only" in line for line in lines[start : start + 6])
    assert not re.search(r"\b(slow|ok)\b", shown)


@pytest.mark.parametrize("width", [80, 60])
def test_chinese_help_folds_a_long_run_instead_of_cutting_it(width):
    """Chinese help has few spaces: rich cut a run longer than the column with "…", and the
    end of `--set`'s help (which values are refused, and when) was never shown."""
    result = _invoke(["run", "--help"], "zh", width)
    assert result.exit_code == 0
    assert "…" not in result.output, result.output
    flat = re.sub(r"[\s│]+", "", result.output)
    assert "越界的值在任何实验运行之前就会被拒绝" in flat, result.output
    assert _too_wide(result.output, width) == []


def test_a_diagnosis_is_counted_in_functions_not_in_semicolons():
    """A sentence may hold "; " itself ("...: it is built on it; fix causal_mask first"): the
    table counted 8 more clauses in English and 4 in Chinese for the same row."""
    from labctl.cli.grade_table import DIAGNOSIS_CELLS, _diagnosis_shown

    chained = "{f} fails because causal_mask fails: it is built on it; fix causal_mask first"
    diagnosis = "; ".join(
        ["causal_mask: the triangle is reversed; see the course"]
        + [
            chained.format(f=f)
            for f in ("multi_head_attention", "attention_decode", "decoder_forward")
        ]
        + ["rope: " + "x" * DIAGNOSIS_CELLS]
    )
    shown = _diagnosis_shown(diagnosis)
    assert shown.startswith("causal_mask: the triangle is reversed; see the course")
    assert shown.endswith(" more in gradebook.csv)")
    kept = shown.count(" fails because ")
    assert f"(and {3 - kept + 1} more in gradebook.csv)" in shown, shown


def test_a_long_diagnosis_keeps_whole_sentences_and_names_the_rest():
    """The gradebook's diagnosis was cut at 600 characters mid-word."""
    from labctl.grade.score import _diagnosis

    verify = {
        "status": "loaded",
        "diagnosis": [
            {"function": f, "kind": "dependency", "message": f"{f}: " + "word " * 40}
            for f in ("softmax", "causal_mask", "rope", "rms_norm", "layer_norm")
        ],
    }
    said = _diagnosis(verify)
    assert len(said) <= 600
    assert said.endswith("rms_norm, layer_norm") or "more: " in said, said
    assert all(part.endswith("word ") or "more: " in part for part in said.split("; ")), said


def test_verify_s_table_is_a_line_per_function_where_it_does_not_fit(tmp_path, monkeypatch):
    """At 60 columns the function x check table squeezed its heads to 'i… s… r…' and its
    numbers to '1…': a line per function, its failing checks named, reads at any width."""
    from labctl.verify import verify as verify_module

    # The room and seed are the same at both widths: verify once, render twice.
    real, reports = verify_module.verify_clean_room, []

    def verify_once(*args, **kwargs):
        if not reports:
            reports.append(real(*args, **kwargs))
        return reports[0]

    monkeypatch.setattr(verify_module, "verify_clean_room", verify_once)
    room = faults.get("no-sqrt-dk").materialize(tmp_path / "clean_room")
    args = ["verify", "clean-room", "--path", str(room), "--no-metrics", "--seed", "3"]
    narrow = _invoke([*args, "--out", str(tmp_path / "a")], "en", 60)
    head = narrow.stdout.split("failures")[0]
    assert "scaled_dot_product_attention ✗ parity 1e+00" in head, head
    assert "softmax ✓" in head and "…" not in head, head
    wide = _invoke([*args, "--out", str(tmp_path / "b")], "en", 80)
    assert "imp sig run shp dty parity" in wide.stdout
    table = [line for line in wide.stdout.splitlines() if line.startswith(("function", "soft"))]
    assert len(table) == 2 and _too_wide("\n".join(table), 80) == [], table
