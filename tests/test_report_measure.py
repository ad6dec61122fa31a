"""The report's figures measure their text once per process (`labctl.report.measure`): a
figure drawn again measures nothing again, and draws the bytes matplotlib's own measuring
draws."""

from __future__ import annotations

import pytest

from labctl.report import plots
from labctl.report.collect import Figure

HEATMAPS = [
    Figure("heatmap", "weights", name="w", impl=impl, row_label="query", col_label="key",
           matrix=[[0.1 * i + 0.01 * j + shift for j in range(6)] for i in range(6)],
           row_ticks=list("abcdef"), col_ticks=["中", "文", "c", "d", "e", "f"])
    for impl, shift in (("reference", 0.0), ("clean_room", 0.5))
]  # fmt: skip
TABLE = Figure(
    "table", "loss", columns=["step", "loss (reference)", "loss (clean_room)", "学习率"],
    rows=[[str(2**k), f"{1 / (k + 1):.4f}", f"{1.1 / (k + 1):.4f}", f"{10.0**-k:g}"]
          for k in range(8)],
)  # fmt: skip


def _drawn() -> list[bytes]:
    return [plots.heatmaps(HEATMAPS), plots.line_plot(TABLE)]


def test_a_figure_drawn_again_measures_no_text_again(monkeypatch):
    from matplotlib.textpath import TextToPath

    _drawn()  # every string and font of these figures measured once
    measured: list[str] = []
    real = TextToPath.get_text_width_height_descent

    def counted(self, s, prop, ismath):
        measured.append(s)
        return real(self, s, prop, ismath)

    monkeypatch.setattr(TextToPath, "get_text_width_height_descent", counted)
    _drawn()
    assert measured == []


@pytest.mark.filterwarnings("ignore:Glyph .* missing from font")
def test_the_figures_are_the_bytes_matplotlibs_own_measuring_draws(monkeypatch):
    from matplotlib.backends.backend_svg import RendererSVG

    shared = _drawn()
    assert hasattr(RendererSVG, "_get_font_height_metrics")
    kept = RendererSVG.get_text_width_height_descent
    monkeypatch.setattr(RendererSVG, "get_text_width_height_descent", kept.__wrapped__)
    monkeypatch.delattr(RendererSVG, "_get_font_height_metrics")
    monkeypatch.setattr("labctl.report.measure.install", lambda: None)
    assert _drawn() == shared
