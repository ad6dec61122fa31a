"""labctl's own line breaking (`labctl.wrapping`), and the tables that use it (`fit`).

A Chinese character takes two cells; a line breaks beside a Chinese character or at a
space, never before closing punctuation nor after opening punctuation, never inside a
word; lines are filled (Chinese text does not break at its first ASCII space); a table
wraps its headers instead of cutting them.
"""

from __future__ import annotations

import re
from collections import Counter

import pytest
from rich.cells import cell_len
from rich.console import Console

from labctl.cli.render import Column, Prose, fit
from labctl.wrapping import CLOSING, OPENING, break_offsets, fill, unbreakable, wrap

ZH = (
    "它失败是因为 causal_mask 失败：multi_head_attention 与参考实现相差 0.5（超过容差），"
    "另有 3 个 fixture 不一致；请先修复 causal_mask，再看 scaled_dot_product_attention。"
)
EN = (
    "decoder_forward fails because transformer_block fails, and it fails because "
    "multi_head_attention fails: it is built on it; fix causal_mask first (float64, results.json)"
)


@pytest.mark.parametrize("text", [ZH, EN])
@pytest.mark.parametrize("width", range(24, 81, 7))
def test_lines_fit_keep_every_word_and_never_start_with_closing_punctuation(text, width):
    lines = wrap(text, width)
    assert all(cell_len(line) <= width for line in lines), lines
    assert "".join(lines).replace(" ", "") == text.replace(" ", "")  # nothing lost
    shown = set(re.findall(r"[A-Za-z0-9_.]+", "\n".join(lines)))
    for word in re.findall(r"[A-Za-z0-9_.]+", text):
        assert word in shown or len(word) + 1 > width, (word, lines)  # none split but to fold
    assert not any(line.lstrip()[:1] in CLOSING for line in lines[1:]), lines
    assert not any(line.rstrip()[-1:] in OPENING for line in lines), lines


def test_chinese_fills_its_lines_instead_of_breaking_at_the_first_space():
    """rich (and textwrap) broke `…（Hkv =` and left `4）…` for the next line, or broke at
    the first space of a Chinese line and left it half empty."""
    text = "把 MHA 层按组对 K/V 投影头取平均转换而来（Ainslie et al. 2023）：GQA（Hkv = 4）与 MHA 输出的相对距离"
    lines = wrap(text, 40)
    assert lines[0] == "把 MHA 层按组对 K/V 投影头取平均转换而来"
    assert all(cell_len(line) >= 30 for line in lines[:-1]), lines
    assert any("Hkv = 4" in line for line in lines), lines  # a lone sign keeps its operands


def test_a_long_formula_breaks_beside_its_signs_rather_than_inside_a_word():
    """`… × d_k × sizeof(dty|pe)`: operands bound to their signs made the whole formula one
    unbreakable piece, folded inside a word."""
    formula = "KV 字节数 = 2 × n_layers × n_kv_heads × d_k × sizeof(dtype) × T"
    for width in range(20, 40):
        lines = wrap(formula, width)
        assert all(cell_len(line) <= width for line in lines), lines
        assert any("sizeof(dtype)" in line for line in lines), (width, lines)
    assert wrap("a b Hkv = 4 c", 9) == ["a b", "Hkv = 4 c"]


def test_a_word_wider_than_the_line_is_folded_and_only_then():
    assert break_offsets("a" * 25, 10) == [10, 20]
    assert wrap("see " + "x" * 12 + " then", 10) == ["see", "xxxxxxxxxx", "xx then"]
    assert unbreakable("ab cd 中文") == 2


def test_a_wrapped_line_is_indented_as_far_as_the_line_it_continues():
    lines = wrap("  causal_mask · parity: " + "word " * 20, 30)
    assert all(line.startswith("  ") for line in lines), lines
    assert wrap("row   " + "中文" * 20, 30, hang=6)[1].startswith("      中")
    assert fill("一二三四五六七八九十", 10) == "一二三四五\n六七八九十"


def test_the_commands_console_wraps_its_text_itself():
    """verify's failure, diagnosis and summary lines and doctor were printed with soft_wrap,
    left for the terminal to wrap: `floa|t64`, `.js|on`."""
    from labctl.cli.render import _Console

    console = _Console(width=40, record=True, no_color=True, highlight=False)
    console.print(EN, markup=False, soft_wrap=True)
    lines = console.export_text().splitlines()
    assert len(lines) > 2 and all(cell_len(line) <= 40 for line in lines), lines
    assert "results.json)" in lines[-1]


def _shown(renderable, width: int) -> str:
    console = Console(width=width, record=True, no_color=True)
    console.print(renderable)
    return console.export_text()


def test_a_table_wraps_a_header_wider_than_its_cells_instead_of_cutting_it():
    """`run all` showed `verdic` (80 columns), `implementa`, `measured, refere`."""
    columns = [
        Column("metric", identifier=True),
        Column("reference", identifier=True, justify="right"),
        Column("clean room", identifier=True, justify="right"),
        Column("expected", identifier=True),
        Column("verdict", identifier=True),
    ]
    rows = [["gqa_head_order_vs_torch_max_error", "8.882e-16", "4.441e-16", "<=1e-12", "pass"]]
    shown = _shown(fit(columns, rows, show_edge=False, width=80), 80)
    assert all(cell_len(line) <= 80 for line in shown.splitlines())
    assert "verdict" in shown and "clean" in shown and "room" in shown, shown
    assert "gqa_head_order_vs_torch_max_error" in shown and "4.441e-16" in shown
    # narrower still, the rows are stacked: nothing cut either
    narrow = _shown(fit(columns, rows, show_edge=False, width=50), 50)
    assert "verdict     pass" in narrow and "…" not in narrow, narrow


def test_chinese_headers_wrap_between_characters_and_titles_go_above_the_table():
    columns = [Column("变体", identifier=True)] + [
        Column(h, identifier=True, justify="right")
        for h in ("K/V 参数量", "每 token 的 KV 字节数（float64）", "与 MHA 的距离（参考实现）",
                  "与 MHA 的距离（clean room）")
    ]  # fmt: skip
    rows = [["MHA", "8,192", "1,024", "0", "0"], ["GQA", "4,096", "512", "0.822959", "0.822959"]]
    title = (
        "同一输入上的 MHA、GQA 与 MQA（H = 8，D = 8）；GQA 和 MQA 由 MHA 层的 K/V 头平均池化得到"
    )
    shown = _shown(fit(columns, rows, title=title, width=80), 80)
    assert all(cell_len(line) <= 80 for line in shown.splitlines()), shown
    shown_chars = Counter(re.sub(r"\s+", "", shown))
    for _column in columns:  # every character of every header is there: none cut
        assert not Counter(_column.header.replace(" ", "")) - shown_chars, (_column.header, shown)
    assert "…" not in shown
    assert shown.splitlines()[0].startswith("同一输入上的 MHA"), shown
    assert "0.822959" in shown


def test_prose_in_a_table_cell_measures_its_longest_unbreakable_piece():
    console = Console(width=80)
    measured = console.measure(Prose("一二三 abcdefgh 四"))
    assert (measured.minimum, measured.maximum) == (8, 18)
