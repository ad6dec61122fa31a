"""The report's figures drawn by forked children: the same bytes as drawn in one process, a
failing child's share drawn again here, an error raised here, no child left behind; and the
page's embedded font the same bytes at every build."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from labctl.cli.main import app
from labctl.report import drawing, glyphs
from labctl.report.collect import collect


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """Two small labs' records: three heatmap groups and a line plot."""
    root = tmp_path_factory.mktemp("drawing")
    result = CliRunner().invoke(app, ["run", "causal-attention", "positions", "--out", str(root)])
    assert result.exit_code == 0, result.output
    return root


@pytest.fixture(scope="module")
def entries(runs) -> list[drawing.Entry]:
    planned = [entry for run in collect(runs).runs for entry in drawing.plan(run)]
    assert {entry.how or entry.kind for entry in planned} == {"heatmaps", "line"}
    return planned


@pytest.fixture
def forks(monkeypatch) -> list[int]:
    """The pids of the children `drawing` forks."""
    seen: list[int] = []
    real = os.fork

    def counted() -> int:
        pid = real()
        if pid:
            seen.append(pid)
        return pid

    monkeypatch.setattr(os, "fork", counted)
    return seen


def _reaped(pids: list[int]) -> bool:
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            continue
        return False
    return True


def test_children_draw_the_bytes_this_process_draws(entries, forks):
    here = drawing.draw_all(entries, children=0)
    assert forks == []
    shared = drawing.draw_all(entries, children=2)
    assert len(forks) == 2 and _reaped(forks)
    assert all(svg and svg.startswith(b"<?xml") for svg in here)
    assert shared == here


def test_a_failing_childs_share_is_drawn_here(entries, forks, monkeypatch):
    parent = os.getpid()
    real = drawing.draw

    def fails_in_a_child(entry):
        if os.getpid() != parent:
            raise MemoryError("a child out of memory")
        return real(entry)

    monkeypatch.setattr(drawing, "draw", fails_in_a_child)
    shared = drawing.draw_all(entries, children=2)
    assert len(forks) == 2 and _reaped(forks)
    monkeypatch.setattr(drawing, "draw", real)
    assert shared == drawing.draw_all(entries, children=0)


def test_an_error_in_drawing_is_raised_here_and_no_child_is_left(entries, forks, monkeypatch):
    def broken(entry):
        raise ValueError("a figure matplotlib cannot draw")

    monkeypatch.setattr(drawing, "draw", broken)
    with pytest.raises(ValueError, match="cannot draw"):
        drawing.draw_all(entries, children=2)
    assert len(forks) == 2 and _reaped(forks)


def test_shares_are_balanced_by_drawing_time_and_keep_the_reports_order():
    entries = [drawing.Entry("heatmaps")] * 2 + [drawing.Entry("table", how="line")] * 6
    shares = drawing._shares(list(range(8)), entries, 2)
    assert sorted(i for share in shares for i in share) == list(range(8))
    assert all(share == sorted(share) for share in shares)
    assert [sum(drawing._WEIGHT[entries[i].how or "heatmaps"] for i in s) for s in shares] == [
        pytest.approx(6.6),
        pytest.approx(6.6),
    ]


def test_the_embedded_font_is_the_same_bytes_at_every_build():
    """fontTools stamped the subset with the time it was saved: two builds a second apart
    embedded different bytes for the same text."""
    first = glyphs.font_face("注意力掩码")
    time.sleep(1.1)
    assert glyphs.font_face("注意力掩码") == first != ""


def test_the_report_command_draws_in_children_what_one_process_draws(runs, tmp_path):
    pages = []
    for cores in (1, 3):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(drawing, "_cores", lambda cores=cores: cores)
            patch.setattr("labctl.report.now_iso", lambda: "2026-01-01T00:00:00Z")
            out = tmp_path / f"report-{cores}.html"
            result = CliRunner().invoke(app, ["report", "--root", str(runs), "--out", str(out)])
        assert result.exit_code == 0, result.output
        pages.append(out.read_bytes())
    assert pages[0] == pages[1]
