"""`labctl report`: one self-contained HTML file from the evidence on disk, checked as text
and in a real headless Chromium (no console errors, no request, every lab's figures)."""

from __future__ import annotations

import base64
import html
import io
import json
import os
import re
import shutil
import stat
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from xml.etree import ElementTree

import pytest
from browsertools import open_browser
from labtools import faulty_room
from typer.testing import CliRunner

from labctl import registry
from labctl.cli.main import app
from labctl.report import drawing

runner = CliRunner()
CJK = re.compile(r"[\u4e00-\u9fff]")


@pytest.fixture(scope="module")
def evidence(tmp_path_factory) -> Path:
    """Every lab run on a reversed-mask clean room (the mask ablation shortened, so its record
    is non-default), and a verify history that fails and then passes."""
    root = tmp_path_factory.mktemp("evidence")
    room = faulty_room(root.parent, "mask-reversed")
    args = ["run", "all", "--clean-room", str(room), "--out", str(root / "runs")]
    args += ["--set", "mask-ablation.steps=24", "--set", "mask-ablation.tail=4"]
    result = runner.invoke(app, args)
    assert result.exit_code == 1, result.output  # the reversed mask fails labs, as it must
    history = [
        {"verified_at": "2026-01-01T10:00:00Z", "path": "clean_room", "passed": False,
         "failing_functions": ["causal_mask"], "diagnosis": ["the triangle is reversed"]},
        {"verified_at": "2026-01-01T11:00:00Z", "path": "clean_room", "passed": True,
         "failing_functions": [], "diagnosis": []},
    ]  # fmt: skip
    (root / "verify").mkdir()
    (root / "verify" / "history.jsonl").write_text("".join(json.dumps(h) + "\n" for h in history))
    return root


@pytest.fixture(scope="module")
def rendered(evidence) -> tuple[Path, list]:
    """The English report, and every matplotlib figure it drew, caught as it was saved."""
    from matplotlib.figure import Figure

    caught = []
    save = Figure.savefig

    def spy(self, *args, **kwargs):
        caught.append(self)
        return save(self, *args, **kwargs)

    path = evidence / "report.html"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Figure, "savefig", spy)
        # every figure drawn in this process, where the spy sees it (no child forked)
        patch.setattr(drawing, "_cores", lambda: 1)
        result = runner.invoke(
            app, ["report", "--root", str(evidence), "--out", str(path), "--json"]
        )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert {lab["id"] for lab in document["labs"]} == {lab.id for lab in registry.discover()}
    return path, caught


@pytest.fixture(scope="module")
def report(rendered) -> Path:
    return rendered[0]


def one_lab(evidence: Path, dest: Path, lab: str = "causal-attention") -> Path:
    """A copy of `evidence` with one lab's runs: for what a report of every lab adds nothing
    to (each lab's figures cost a second to draw)."""
    shutil.copytree(evidence / "runs" / lab, dest / "runs" / lab)
    shutil.copytree(evidence / "verify", dest / "verify")
    return dest


class _Parser(HTMLParser):
    """Sections by lab, the images in each, and every URL an element would fetch."""

    def __init__(self):
        super().__init__()
        self.lab = None
        self.images: dict[str, int] = {}
        self.urls: list[str] = []
        self.meta: list[dict] = []
        self.changed: set[str] = set()
        self.tables: dict[tuple[str, str], list[list[str]]] = {}
        self._table = None
        self._cell = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "section" and "data-lab" in attrs:
            self.lab = attrs["data-lab"]
            self.images[self.lab] = 0
        if tag == "img" and self.lab:
            self.images[self.lab] += 1
        if tag == "p" and attrs.get("class") == "changed" and self.lab:
            self.changed.add(self.lab)
        for name in ("src", "href", "srcset", "action", "poster", "data"):
            if name in attrs:
                self.urls.append(attrs[name])
        if tag == "meta":
            self.meta.append(attrs)
        if tag == "details" and "data-impl" in attrs:
            self._table = (self.lab, attrs["data-heatmap"], attrs["data-impl"])
            self.tables[self._table] = []
        if tag == "tr" and self._table:
            self.tables[self._table].append([])
        if tag == "td" and self._table:
            self._cell = ""

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data

    def handle_endtag(self, tag):
        if tag == "td" and self._table and self._cell is not None:
            self.tables[self._table][-1].append(self._cell)
            self._cell = None
        if tag == "details":
            self._table = None
        if tag == "section":
            self.lab = None


def _parsed(path: Path) -> _Parser:
    parser = _Parser()
    parser.feed(path.read_text("utf-8"))
    return parser


def test_every_lab_is_there_with_its_figures_and_nothing_is_fetched(report):
    parsed = _parsed(report)
    assert set(parsed.images) == {lab.id for lab in registry.discover()}
    assert all(count >= 1 for count in parsed.images.values()), [
        i for i in parsed.images.items() if i[1] < 1
    ]
    # heatmaps of both implementations, the loss curves and the d_k curves are drawn
    assert parsed.images["causal-attention"] >= 1 and parsed.images["mask-ablation"] >= 2
    assert parsed.images["scale-ablation"] >= 2 and parsed.images["kv-cache"] >= 1
    csp = [m for m in parsed.meta if m.get("http-equiv") == "Content-Security-Policy"]
    assert csp and csp[0]["content"].startswith("default-src 'none'; img-src data:")
    images = [u for u in parsed.urls if not u.startswith("#")]
    assert images and all(u.startswith("data:image/svg+xml;base64,") for u in images)
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", report.read_text())
    # every figure closed where it ends: none holds the next one, nor the values' tables
    page = report.read_text("utf-8")
    depth = 0
    for tag in re.findall(r"</?figure>", page):
        depth += 1 if tag == "<figure>" else -1
        assert depth in (0, 1), "a figure opened inside another"
    assert depth == 0 and page.count("<figure>") >= len(registry.discover())


def test_the_learners_reversed_mask_shows_in_the_report(report):
    tables = _parsed(report).tables
    room = tables[("causal-attention", "attention-b0-h0", "clean-room")]
    reference = tables[("causal-attention", "attention-b0-h0", "reference")]

    def upper(rows):
        values = [[float(v) for v in row[1:]] for row in rows if row]
        return [values[i][j] for i in range(len(values)) for j in range(i + 1, len(values))]

    assert max(upper(room)) > 0.1
    assert max(upper(reference)) == 0.0


def test_non_default_parameters_and_the_verify_fix_are_flagged(report):
    parsed = _parsed(report)
    assert parsed.changed == {"mask-ablation"}
    text = report.read_text()
    assert "steps=24" in text and "tail=4" in text
    assert "← fixed" in text


@pytest.fixture(scope="module")
def report_zh(evidence, tmp_path_factory) -> Path:
    """The Chinese report, chosen by the command's own `--lang` (labctl's, before the command,
    is the one test_screen's reports are made with)."""
    path = tmp_path_factory.mktemp("zh") / "report.html"
    args = ["report", "--root", str(evidence), "--out", str(path), "--lang", "zh"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return path


def test_the_report_is_written_in_the_chosen_language(report_zh):
    assert '<html lang="zh">' in report_zh.read_text()


SVG = "{http://www.w3.org/2000/svg}"


def _svgs(path: Path) -> dict[str, list[ElementTree.Element]]:
    """Each lab's inlined SVGs, parsed with their comments."""
    found: dict[str, list[ElementTree.Element]] = {}
    for section in re.findall(r'<section class="lab"[^>]*data-lab="([^"]+)"(.*?)</section>',
                              path.read_text(), re.S):  # fmt: skip
        lab, body = section
        for data in re.findall(r'src="data:image/svg\+xml;base64,([^"]+)"', body):
            parser = ElementTree.XMLParser(target=ElementTree.TreeBuilder(insert_comments=True))
            parser.feed(base64.b64decode(data))
            found.setdefault(lab, []).append(parser.close())
    return found


def _svg_texts(svgs: dict[str, list[ElementTree.Element]]) -> dict[str, list[str]]:
    """Each lab's figure text in its SVGs (`_svgs`): drawn as glyph paths, each piece named by
    the comment matplotlib writes at the head of its group (`<g id="text_3"><!-- 课程 -->`)."""
    texts: dict[str, list[str]] = {}
    for lab, trees in svgs.items():
        for tree in trees:
            for group in tree.iter(f"{SVG}g"):
                if group.get("id", "").startswith("text_") and len(group):
                    first = group[0]
                    if first.tag is ElementTree.Comment:
                        texts.setdefault(lab, []).append(first.text.strip())
    return texts


def test_figure_text_is_drawn_as_glyphs_in_the_chosen_language(report, report_zh):
    """Figures carry their own glyphs (svg.fonttype path): no `<text>` for a browser to draw
    with fonts the machine may lack; the Chinese comes from Noto Sans SC, which labctl's
    dependencies install."""
    tokens = registry.get("attention-inspect").params().tokens
    svgs = _svgs(report_zh)  # parsed once: 5 MB of base64
    chinese, english = _svg_texts(svgs), _svg_texts(_svgs(report))
    assert set(chinese) == {lab.id for lab in registry.discover()}
    assert set(tokens) <= set(chinese["attention-inspect"])  # the heatmap's token labels
    assert any(CJK.search(t) for t in chinese["scale-ablation"])  # a translated axis label
    assert not any(CJK.search(t) for t in english["scale-ablation"])
    trees = [tree for trees in svgs.values() for tree in trees]
    assert not [t for tree in trees for t in tree.iter(f"{SVG}text")]
    glyph_ids = {p.get("id", "") for tree in trees for p in tree.iter(f"{SVG}path")}
    assert any(i.startswith("NotoSansSC") for i in glyph_ids)
    assert not any(i.startswith("LastResort") for i in glyph_ids)  # matplotlib's tofu


def test_the_page_embeds_the_glyphs_its_chinese_text_needs(report_zh):
    """The HTML's own text reads without a CJK font: an @font-face of `data:` holding every
    CJK character of the page, and the policy lets the page load it."""
    from fontTools.ttLib import TTFont

    from labctl.report import glyphs

    text = report_zh.read_text("utf-8")
    faces = re.findall(r"@font-face \{[^}]*url\(data:font/otf;base64,([A-Za-z0-9+/=]+)\)", text)
    assert len(faces) == 1
    covered = TTFont(io.BytesIO(base64.b64decode(faces[0]))).getBestCmap()
    page = re.sub(r"<style>.*?</style>|data:[^\"')]+", "", text, flags=re.S)
    needed = {ord(c) for c in glyphs.wide_characters(html.unescape(page))}
    assert needed and needed <= set(covered)
    assert len(covered) < len(needed) + 16  # a subset, not the 8 MB font
    assert "font-src data:" in text
    # the embedded font comes first: Chromium on Linux draws boxes for Chinese in bold
    # headings when `system-ui` comes before it
    assert f'font-family: "{glyphs.EMBEDDED}", system-ui' in text


def test_log_axes_read_as_powers_in_text():
    """A log axis's ticks are text with superscript digits (`10⁻³`), not mathtext, which
    matplotlib parses again at every layout pass."""
    from labctl.report import plots

    assert [plots.power(v, 10) for v in (0.001, 1.0, 100.0)] == ["10⁻³", "10⁰", "10²"]
    assert plots.power(32.0, 2) == "2⁵"
    assert plots.power(3.0, 10) == "3"  # no whole power: its value
    assert plots.power(0.0, 10) == ""


def test_the_reports_log_axes_are_labelled_with_powers(report):
    texts = [t for lab in _svg_texts(_svgs(report)).values() for t in lab]
    powers = [t for t in texts if re.fullmatch(r"(2|10)[⁻⁰¹²³⁴⁵⁶⁷⁸⁹]+", t)]
    assert len(powers) >= 4, texts[:40]
    assert not any("mathdefault" in t or "$" in t for t in texts)


@pytest.fixture(scope="module")
def drawn(rendered) -> list:
    return rendered[1]


MOST_LEGEND_ENTRIES = 12


# measured with Agg, which lays Chinese out with DejaVu Sans; the browser draws it. The layout
# is the one the report's SVG was saved with (no second draw): each box is computed from it.
@pytest.mark.filterwarnings("ignore:Glyph .* missing from font")
def test_every_plot_has_labelled_axes_and_a_legible_legend(drawn):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    assert len(drawn) >= len(registry.discover())
    for figure in drawn:
        canvas = FigureCanvasAgg(figure)
        for ax in figure.axes:
            if ax.get_label() == "<colorbar>":
                continue
            where = f"{ax.get_title()!r} in {figure.texts and figure.texts[0].get_text()!r}"
            assert ax.get_xlabel() and ax.get_ylabel(), where
            legend = ax.get_legend()
            labels = [t.get_text() for t in legend.get_texts()] if legend else []
            assert len(labels) == len(set(labels)), (where, labels)
            assert len(labels) <= MOST_LEGEND_ENTRIES, (where, labels)
            styles = [(line.get_color(), line.get_linestyle(), line.get_marker())
                      for line in ax.get_lines()]  # fmt: skip
            assert len(styles) == len(set(styles)), (where, styles)
            renderer = canvas.get_renderer()
            boxes = [ax.get_tightbbox(renderer)]  # the axes with its ticks, labels and title
            if legend is not None:
                # outside the axes: the legend's left edge right of the plot area
                legend_box = legend.get_window_extent(renderer)
                assert legend_box.x0 >= ax.get_window_extent(renderer).x1, where
                boxes.append(legend_box)
            # laid out: nothing cut at the figure's edge. The layout measured its text with
            # the SVG renderer (which finds the heatmaps' labels 0.9 px from the edge), Agg
            # measures here (4.3 px): 5 px for the difference. Without the layout, legends
            # and labels ran past the edge by 37 px and more; a label of a dozen quantities
            # in one line, along a line plot's y axis, by 13 to 140 px
            edge = figure.bbox.padded(5)
            for box in boxes:
                assert edge.x0 <= box.x0 and box.x1 <= edge.x1, (where, box, edge)
                assert edge.y0 <= box.y0 and box.y1 <= edge.y1, (where, box, edge)


@pytest.mark.parametrize("case", ["no-root", "out-is-dir", "empty-root"])
def test_bad_arguments_are_usage_errors(tmp_path, case):
    (tmp_path / "empty").mkdir()
    args = {
        "no-root": ["--root", str(tmp_path / "missing")],
        "out-is-dir": ["--root", str(tmp_path / "empty"), "--out", str(tmp_path)],
        "empty-root": ["--root", str(tmp_path / "empty")],
    }[case]
    result = runner.invoke(app, ["report", *args])
    assert result.exit_code == 2, result.output
    assert not (tmp_path / "empty" / "report.html").exists()


def test_a_changed_artifact_is_named_not_drawn(evidence, tmp_path):
    copy = one_lab(evidence, tmp_path / "evidence")
    (csv_file,) = copy.glob("runs/causal-attention/*-attention-b0-h0-clean-room.csv")
    csv_file.write_text(csv_file.read_text().replace("0.", "9.", 1))
    path = tmp_path / "r.html"
    result = runner.invoke(app, ["report", "--root", str(copy), "--out", str(path)])
    assert result.exit_code == 0, result.output
    assert "changed since the run" in path.read_text()
    assert ("causal-attention", "attention-b0-h0", "clean-room") not in _parsed(path).tables


def _edited(record: Path, dest: Path) -> Path:
    """A copy of `record` whose commit no labctl writes (`<script>`), as a hand edit leaves it."""
    data = json.loads(record.read_text("utf-8"))
    data["commit"] = "<script>alert(1)</script>"
    dest.write_text(json.dumps(data), "utf-8")
    return dest


def test_records_that_cannot_be_read_are_named_not_passed_over(evidence, tmp_path):
    """A record named `*.json` that is a FIFO, a device, not JSON, or edited out of the schema
    was passed over in silence (the lab's older record shown as its newest), and the FIFO left
    the report waiting forever, /dev/zero read until memory ran out. Each is named on the run
    of its lab, or alone where its lab has no run to show; the report is still written."""
    copy = one_lab(evidence, tmp_path / "evidence")
    folder = copy / "runs" / "causal-attention"
    (record,) = (p for p in folder.glob("*.json"))
    os.mkfifo(folder / "zz-fifo.json")
    (folder / "zz-zero.json").symlink_to("/dev/zero")
    (folder / "zz-text.json").write_text("not json", "utf-8")
    _edited(record, folder / "zz-edited.json")
    (copy / "runs" / "other-lab").mkdir()
    (copy / "runs" / "other-lab" / "r.json").write_text("[", "utf-8")
    path = tmp_path / "r.html"
    env = {"NO_COLOR": "1", "COLUMNS": "5000"}
    args = ["report", "--root", str(copy), "--out", str(path)]
    result = runner.invoke(app, [*args, "--json"], env=env)
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    (lab,) = document["labs"]
    said = "\n".join(lab["problems"])
    assert "record zz-fifo.json was not read" in said
    assert "is a FIFO, not a regular file" in said
    assert "is a character device, not a regular file" in said
    assert "record zz-text.json was not read (not JSON)" in said
    assert "commit: must be a git commit sha" in said
    unread = {Path(u["path"]).name: u["on_run"] for u in document["unread"]}
    assert unread == {
        "zz-fifo.json": True, "zz-zero.json": True, "zz-text.json": True,
        "zz-edited.json": True, "r.json": False,
    }  # fmt: skip
    page = path.read_text("utf-8")
    assert "record zz-edited.json was not read" in page
    assert "r.json: not read: not JSON" in page
    assert "<script>alert" not in page
    result = runner.invoke(app, args, env=env)
    assert result.exit_code == 0, result.output
    assert "r.json: not read: not JSON" in result.stderr
    assert "causal-attention: record zz-fifo.json was not read" in result.stderr


def test_verify_records_beside_the_labs_folders_are_not_taken_for_runs(evidence, tmp_path):
    """A root with no runs/ is read as a runs folder, and verify's own files (`verify/*.json`,
    its reports among them) lie beside the labs' folders: they are no lab's run, never named
    as records not read; a lab's unreadable record beside them still is."""
    shutil.copytree(evidence / "verify", tmp_path / "verify")
    (tmp_path / "verify" / "20260101T000000Z-seed5-report.json").write_text('{"checks": []}')
    (tmp_path / "causal-attention").mkdir()
    (tmp_path / "causal-attention" / "r.json").write_text("[", "utf-8")
    path = tmp_path / "r.html"
    result = runner.invoke(app, ["report", "--root", str(tmp_path), "--out", str(path), "--json"])
    assert result.exit_code == 0, result.output
    unread = json.loads(result.stdout)["unread"]
    assert [Path(u["path"]).name for u in unread] == ["r.json"]


def test_evidence_of_unreadable_records_alone_is_refused_in_words(evidence, tmp_path):
    """Only records that cannot be read: not "no evidence, run labctl run all first" (there
    is evidence, refused), but which record and why; exit 1, and no report written."""
    folder = tmp_path / "runs" / "causal-attention"
    folder.mkdir(parents=True)
    (record,) = (evidence / "runs" / "causal-attention").glob("*.json")
    _edited(record, folder / record.name)
    path = tmp_path / "r.html"
    said = {
        "en": ("no readable evidence under", "must be a git commit sha"),
        "zh": ("没有可读的证据", "必须是"),
    }
    for lang, words in said.items():
        result = runner.invoke(
            app,
            ["--lang", lang, "report", "--root", str(tmp_path), "--out", str(path), "--json"],
            env={"NO_COLOR": "1", "COLUMNS": "5000"},  # pytest's folders make long paths
        )
        assert result.exit_code == 1, result.output
        error = json.loads(result.stdout)["error"]
        assert error["kind"] == "refused"
        assert "no readable evidence under" in error["message"]  # --json keeps English
        assert (
            record.name in error["message"]
            and "commit: must be a git commit sha" in error["message"]
        )
        assert all(w in result.stderr for w in words), result.stderr
        assert not path.exists()


def test_matplotlib_is_imported_only_by_the_report():
    code = (
        "import sys; from labctl.cli.main import app; import labctl.registry as r; r.discover(); "
        "print('matplotlib' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


# ---- in a real browser ---------------------------------------------------------------------


PAGE_FACTS = """JSON.stringify({
  labs: [...document.querySelectorAll('section[data-lab]')].map(s => s.dataset.lab),
  images: Object.fromEntries([...document.querySelectorAll('section[data-lab]')].map(
    s => [s.dataset.lab, [...s.querySelectorAll('img')].filter(
      i => i.complete && i.naturalWidth > 0).length])),
  broken: [...document.images].filter(i => !(i.complete && i.naturalWidth > 0)).length
})"""


@pytest.fixture(scope="module")
def chromium(tmp_path_factory):
    yield from open_browser(tmp_path_factory.mktemp("chromium"))


@pytest.fixture
def browser(chromium):
    chromium.new_tab()
    return chromium


def test_the_report_opens_in_chromium_without_errors_or_requests(browser, report, tmp_path):
    browser.load(report.resolve().as_uri())
    facts = json.loads(browser.evaluate(PAGE_FACTS))
    assert sorted(facts["labs"]) == sorted(lab.id for lab in registry.discover())
    assert all(count >= 1 for count in facts["images"].values()), facts
    assert facts["broken"] == 0
    assert browser.errors() == []
    assert browser.requests() == []
    shot = browser.screenshot(tmp_path / "report.png")  # kept with pytest's last runs
    assert shot.read_bytes().startswith(b"\x89PNG")
    print(f"screenshot: {shot}")


SVG_TEXT = """JSON.stringify(Object.fromEntries([...document.querySelectorAll('section[data-lab]')]
  .map(s => [s.dataset.lab, [...s.querySelectorAll('img')].flatMap(i => {
    const bytes = Uint8Array.from(atob(i.src.split(',')[1]), c => c.charCodeAt(0));
    const svg = new DOMParser().parseFromString(new TextDecoder().decode(bytes), 'image/svg+xml');
    return [...svg.querySelectorAll('g[id^="text_"]')].map(g => [...g.childNodes].find(
      n => n.nodeType === Node.COMMENT_NODE)).filter(n => n).map(n => n.data.trim());
  })])))"""


def test_chinese_figure_text_reaches_chromium_in_its_figures(browser, report_zh):
    browser.load(report_zh.resolve().as_uri())
    facts = json.loads(browser.evaluate(PAGE_FACTS))
    assert facts["broken"] == 0 and all(n >= 1 for n in facts["images"].values()), facts
    texts = json.loads(browser.evaluate(SVG_TEXT))
    tokens = registry.get("attention-inspect").params().tokens
    assert set(tokens) <= set(texts["attention-inspect"])
    assert any(CJK.search(t) for t in texts["scale-ablation"])
    assert browser.errors() == [] and browser.requests() == []


# ---- on a machine with no CJK font ---------------------------------------------------------
# Chromium here sees the machine's fonts, less every one that has Chinese, Japanese or Korean
# (fontconfig's own rules, and a rule of this test's that rejects those): a fresh machine. A
# character no font has is drawn as a box, and every box looks the same: two different
# Chinese characters that come out as the same pixels were not drawn; two that differ were.

TWO = ("注", "意")
NO_CJK = """<?xml version="1.0"?><!DOCTYPE fontconfig SYSTEM "fonts.dtd"><fontconfig>
<include ignore_missing="yes">/etc/fonts/fonts.conf</include><cachedir>{cache}</cachedir>
<selectfont><rejectfont>{patterns}</rejectfont></selectfont></fontconfig>"""
CJK_LANGS = ("zh-cn", "zh-tw", "zh-hk", "ja", "ko")


@pytest.fixture(scope="module")
def bare_chromium(tmp_path_factory):
    """A Chromium that finds no CJK font on the machine."""
    tmp_path = tmp_path_factory.mktemp("bare-chromium")
    patterns = "".join(
        f'<pattern><patelt name="lang"><string>{lang}</string></patelt></pattern>'
        for lang in CJK_LANGS
    )
    config = tmp_path / "fonts.conf"
    config.write_text(NO_CJK.format(cache=tmp_path / "fc-cache", patterns=patterns))
    yield from open_browser(tmp_path, env={"FONTCONFIG_FILE": str(config)})


@pytest.fixture
def bare_browser(bare_chromium):
    bare_chromium.new_tab()
    return bare_chromium


CHARACTER_BOXES = """(() => {
  const element = document.querySelectorAll(SELECTOR)[INDEX];
  const walker = document.createTreeWalker(element, NodeFilter.SHOW_TEXT);
  const found = [];
  while (walker.nextNode() && found.length < 12) {
    const node = walker.currentNode;
    for (let i = 0; i < node.data.length && found.length < 12; i++) {
      if (!/[\\u4e00-\\u9fff]/.test(node.data[i])) continue;
      const range = document.createRange();
      range.setStart(node, i);
      range.setEnd(node, i + 1);
      const box = range.getBoundingClientRect();
      found.push([node.data[i], box.x, box.y + window.scrollY, box.width, box.height]);
    }
  }
  return JSON.stringify(found);
})()"""


def _hollow(png: bytes) -> bool:
    """Whether a character's picture is a box: its ink all on the edge of where it lies,
    none inside (a drawn Chinese character has strokes through its middle)."""
    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("L")
    width, height = image.size
    pixels = image.load()
    ink = [(x, y) for x in range(width) for y in range(height) if pixels[x, y] < 160]
    if not ink:
        return True  # nothing drawn reads no better than a box
    xs, ys = [x for x, _ in ink], [y for _, y in ink]
    left, right, top, bottom = min(xs), max(xs), min(ys), max(ys)
    margin_x, margin_y = (right - left) / 4, (bottom - top) / 4
    inside = sum(
        1
        for x, y in ink
        if left + margin_x < x < right - margin_x and top + margin_y < y < bottom - margin_y
    )
    return inside < 0.05 * len(ink)


def _boxes(browser, selector: str, index: int = 0) -> tuple[list[str], int]:
    """The Chinese characters of an element as the page first drew them, and how many of
    them came out as boxes."""
    script = CHARACTER_BOXES.replace("SELECTOR", json.dumps(selector)).replace("INDEX", str(index))
    found = json.loads(browser.evaluate(script))
    boxes = 0
    for _character, x, y, width, height in found:
        # scrolled into view and shot from the viewport: the same pixels as a shot beyond the
        # viewport, which lays out and paints the whole 80,000 px page again, 0.4 s a character
        scrolled = browser.evaluate(f"window.scrollTo(0, {y} - innerHeight / 2); scrollY")
        assert scrolled <= y and y + height <= scrolled + browser.evaluate("innerHeight")
        clip = {"x": x, "y": y, "width": width, "height": height, "scale": 3}
        data = browser.send("Page.captureScreenshot", session=True, clip=clip)
        boxes += _hollow(base64.b64decode(data["data"]))
    return [c for c, *_ in found], boxes


def test_the_chinese_report_reads_in_a_browser_with_no_cjk_font(bare_browser, report_zh):
    bare_browser.load(report_zh.resolve().as_uri())
    bare_browser.fonts_ready()
    # what the page's own font draws: its heading, a table header, a lab's title, a paragraph
    for selector in ("h1", "th", "section[data-lab] h2", "section[data-lab] p"):
        characters, boxes = _boxes(bare_browser, selector)
        assert characters and boxes == 0, f"{selector}: {boxes} of {characters} drawn as boxes"
    # the premise and the detector: without the page's font, this browser has none for Chinese
    bare_browser.evaluate("document.querySelector('h1').style.fontFamily = 'DejaVu Sans'; 1")
    characters, boxes = _boxes(bare_browser, "h1")
    assert boxes == len(characters), "this browser found a CJK font of its own"
    assert bare_browser.errors() == [] and bare_browser.requests() == []


def test_the_figures_draw_their_chinese_in_a_browser_with_no_cjk_font(bare_browser, tmp_path):
    """A figure's Chinese, drawn by the report's own plotting, as paths; as text (what the
    report did before: svg.fonttype none) the same browser draws boxes."""
    from labctl.report import plots

    def figure(character: str, fonttype: str) -> str:
        plt = plots._pyplot()
        with plt.rc_context({"svg.fonttype": fonttype}):
            fig = plt.figure(figsize=(1, 1))
            fig.text(0.1, 0.3, character, fontsize=40)
            data = base64.b64encode(plots._svg(fig)).decode("ascii")
        return f'<img src="data:image/svg+xml;base64,{data}">'

    page = tmp_path / "figures.html"
    page.write_text(
        "<!DOCTYPE html><html><body>"
        + "".join(figure(c, kind) for kind in ("path", "none") for c in TWO)
        + "</body></html>",
        "utf-8",
    )
    bare_browser.load(page.resolve().as_uri())
    as_paths = [bare_browser.pixels("img", i) for i in (0, 1)]
    as_text = [bare_browser.pixels("img", i) for i in (2, 3)]
    assert as_paths[0] != as_paths[1], "the figures' Chinese drawn as boxes"
    assert as_text[0] == as_text[1], "this browser found a CJK font of its own"


def test_the_browser_checks_catch_a_console_error_and_a_request(browser, tmp_path):
    bad = tmp_path / "bad.html"
    bad.write_text(
        "<!DOCTYPE html><html><body><script>console.error('boom')</script>"
        "<img src='http://127.0.0.1:9/x.png'></body></html>"
    )
    browser.load(bad.resolve().as_uri())
    assert any("boom" in e for e in browser.errors())
    assert browser.requests() == ["http://127.0.0.1:9/x.png"]


def test_open_hands_the_file_to_the_web_browser(evidence, tmp_path, monkeypatch):
    import webbrowser

    opened = []
    monkeypatch.setattr(webbrowser, "open", opened.append)
    path = tmp_path / "opened.html"
    root = one_lab(evidence, tmp_path / "evidence")
    result = runner.invoke(app, ["report", "--root", str(root), "--out", str(path), "--open"])
    assert result.exit_code == 0, result.output
    assert opened == [path.resolve().as_uri()]


@pytest.mark.parametrize("kind", ["link", "fifo"])
def test_an_out_that_is_no_regular_file_is_refused_untouched(evidence, tmp_path, kind):
    """`report --out /dev/stdout`, run as root, replaced the system's /dev/stdout link with
    a report; a FIFO given as --out was replaced by a file too."""
    copy = one_lab(evidence, tmp_path / "evidence")
    target = tmp_path / "elsewhere.html"
    out = tmp_path / "report.html"
    if kind == "link":
        out.symlink_to(target)
    else:
        os.mkfifo(out)
    result = runner.invoke(app, ["report", "--root", str(copy), "--out", str(out), "--json"])
    assert result.exit_code == 1, result.output
    assert "is not a regular file" in json.loads(result.stdout)["error"]["message"]
    assert out.is_symlink() if kind == "link" else stat.S_ISFIFO(out.lstat().st_mode)
    assert not target.exists()
    assert not list(tmp_path.glob(".tmp-*"))


def test_a_reference_failing_off_its_defaults_is_blamed_on_the_parameters(tmp_path):
    """The report says of a run what the terminal said: the reference's own FAILs with
    non-default parameters are the parameters' doing (98 pairs for the scale ablation)."""
    root = tmp_path / "evidence"
    args = ["run", "scale-ablation", "--impl", "reference", "--out", str(root / "runs")]
    ran = runner.invoke(app, [*args, "--set", "pairs=100", "--set", "pairs_per_block=7"])
    assert ran.exit_code == 1, ran.output
    page = tmp_path / "report.html"
    made = runner.invoke(app, ["report", "--root", str(root), "--out", str(page)])
    assert made.exit_code == 0, made.output
    text = html.unescape(page.read_text())
    (said,) = re.findall(r"the reference itself fails ([^<]*) with these parameters", text)
    assert "scaled_score_var[d_k=2]" in said and "d_k=512" not in said
