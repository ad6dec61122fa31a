"""`OUT/class.html`: the class at a glance, checked as text and in a real headless Chromium.

One class graded once through CliRunner with `--similarity`, late rules, an override and
a submission-times file: a learner's own correct room (`honestrooms`), a copy of it, two
learners with the same catalogued fault (a reversed causal mask), one with another (no
√d_k), a late learner, and a room whose import fails with a message of markup. The page
must be whole (no request, no script, no console error), its figures drawn from the
gradebook, and every learner's text inert. A second, smaller class is graded in Chinese.
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
import yaml
from browsertools import open_browser
from gradetools import rubric_without
from honestrooms import honest_fault, honest_room
from typer.testing import CliRunner

from labctl.cli.main import app
from labctl.grade.class_page import BINS, class_faults, histogram
from labctl.verify.stubs import init_clean_room

MARKUP = "<script>alert(1)</script><img src=x onerror=alert(2)>"


@pytest.fixture(scope="module")
def chromium(tmp_path_factory):
    yield from open_browser(tmp_path_factory.mktemp("chromium"))


@pytest.fixture
def browser(chromium):
    chromium.new_tab()
    return chromium


def _rubric(base: Path) -> Path:
    path = rubric_without(base, "metric", "submission")
    data = yaml.safe_load(path.read_text())
    data["due"] = "2026-03-01T23:59:00+00:00"
    data["late"] = {"unit": "day", "penalty_percent": 10}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    base = tmp_path_factory.mktemp("class-page")
    klass = base / "class"
    honest_room(klass / "ann" / "clean_room")
    shutil.copytree(klass / "ann", klass / "eve")
    with (klass / "eve" / "clean_room" / "primitives.py").open("a") as handle:
        handle.write("\n# mine\n")
    honest_fault("mask-reversed", klass / "bob" / "clean_room")
    honest_fault("mask-reversed", klass / "cy" / "clean_room")
    honest_fault("no-sqrt-dk", klass / "dee" / "clean_room")
    init_clean_room(klass / "mal" / "clean_room")
    (klass / "mal" / "clean_room" / "__init__.py").write_text(f"raise ImportError({MARKUP!r})\n")
    times = base / "submitted.csv"
    times.write_text(
        "learner,submitted_at\n"
        + "".join(f"{n},2026-03-01T10:00:00+00:00\n" for n in ("ann", "bob", "dee", "eve", "mal"))
        + "cy,2026-03-03T10:00:00+00:00\n"
    )
    overrides = base / "overrides.yaml"
    overrides.write_text(
        "schema: labctl.grade-overrides.v1\noverrides:\n"
        f"  - learner: dee\n    points: 3\n    reason: {json.dumps('oral exam ' + MARKUP)}\n"
    )
    out = base / "out"
    args = ["grade", str(klass), "--out", str(out), "--rubric", str(_rubric(base)), "--jobs",
            "2", "--similarity", "--submitted-at", str(times), "--overrides", str(overrides),
            "--json"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    with (out / "gradebook.csv").open(newline="") as handle:
        rows = {r["learner"]: r for r in csv.DictReader(handle)}
    return out, rows, json.loads(result.stdout)


def test_the_page_is_written_with_the_batch_and_listed_in_its_files(graded):
    out, _, doc = graded
    assert (out / "class.html").is_file() and "class.html" in doc["files"]


def test_the_page_is_self_contained_and_every_learner_string_is_inert(graded):
    out, _, _ = graded
    page = (out / "class.html").read_text()
    assert "<script" not in page.lower() and "<img" not in page.lower()
    assert "http://" not in page and "https://" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;" in page
    assert "default-src &#x27;none&#x27;" in page or "default-src 'none'" in page


def test_the_faults_the_class_made_most_come_first_with_their_learners():
    made = class_faults(
        {
            "ann": [{"kind": "fault", "fault": "no-sqrt-dk", "function": "sdpa"}],
            "bob": [
                {"kind": "fault", "fault": "mask-reversed", "function": "causal_mask"},
                {"kind": "dependency", "function": "mha"},
            ],
            "cy": [{"kind": "fault", "fault": "mask-reversed", "function": "causal_mask"}],
        }
    )
    assert made == [
        ("mask-reversed", "causal_mask", ["bob", "cy"]),
        ("no-sqrt-dk", "sdpa", ["ann"]),
    ]


def test_the_histogram_bins_every_score_up_to_the_maximum():
    svg = histogram([0, 0, 41, 82, 81.9, 8.2], 82)
    counts = [int(part.split('"')[0]) for part in svg.split('data-count="')[1:]]
    assert len(counts) == BINS and sum(counts) == 6
    assert counts[0] == 2 and counts[1] == 1 and counts[5] == 1 and counts[-1] == 2


PAGE = """JSON.stringify({
  lang: document.documentElement.lang,
  scripts: document.scripts.length,
  images: document.images.length,
  bins: [...document.querySelectorAll('svg[data-figure=scores] rect[data-bin]')]
    .map(r => Number(r.dataset.count)),
  items: Object.fromEntries([...document.querySelectorAll('#items tr[data-item]')]
    .map(r => [r.dataset.item, [Number(r.dataset.passed), Number(r.dataset.graded)]])),
  faults: Object.fromEntries([...document.querySelectorAll('#faults tr[data-fault]')]
    .map(r => [r.dataset.fault, r.querySelector('td.learners').textContent])),
  edges: [...document.querySelectorAll('svg[data-figure=similarity] line.edge')]
    .map(l => [l.dataset.a, l.dataset.b].sort().join(' ~ ')),
  nodes: document.querySelectorAll('svg[data-figure=similarity] circle.node').length,
  glance: Object.fromEntries([...document.querySelectorAll('#glance tr[data-learner]')]
    .map(r => [r.dataset.learner, r.textContent])),
  text: document.body.innerText,
  scores: document.querySelector('svg[data-figure=scores]').textContent,
})"""


def test_the_page_in_chromium_shows_the_class_as_the_gradebook_has_it(graded, browser, tmp_path):
    out, rows, doc = graded
    browser.load((out / "class.html").resolve().as_uri())
    facts = json.loads(browser.evaluate(PAGE))
    assert browser.errors() == [] and browser.requests() == []
    assert facts["lang"] == "en" and facts["scripts"] == 0 and facts["images"] == 0
    # Every learner in the histogram; the bins as the gradebook's scores fall.
    scores = [float(r["score"]) for r in rows.values()]
    assert facts["bins"] == [
        sum(1 for s in scores if min(int(s * BINS / doc["max_score"] + 1e-9), BINS - 1) == b)
        for b in range(BINS)
    ]
    graded_rows = [r for r in rows.values() if r["status"] == "graded"]
    # An item passes whole (a check item's share of points may be earned in part), as each
    # learner's record says.
    records = [json.loads(p.read_text()) for p in (out / "records").glob("*.json")]
    for item, (passed, of) in facts["items"].items():
        assert of == len(graded_rows)
        whole = [
            r["status"] == "graded" and any(i["id"] == item and i["passed"] for i in r["items"])
            for r in records
        ]
        assert passed == sum(whole), item
    assert facts["faults"]["mask-reversed"] == "bob, cy"
    assert facts["faults"]["no-sqrt-dk"] == "dee"
    assert next(iter(facts["faults"])) == "mask-reversed"
    assert "ann ~ eve" in facts["edges"] and facts["nodes"] >= 2
    assert "+3" in facts["glance"]["dee"] and MARKUP in facts["glance"]["dee"]
    assert "2 day" in facts["glance"]["cy"]
    assert "not-loaded" in facts["glance"]["mal"] and MARKUP in facts["glance"]["mal"]
    assert "ann" not in facts["glance"]
    shot = browser.screenshot(tmp_path / "class.png")
    assert shot.read_bytes().startswith(b"\x89PNG")


def test_the_page_follows_lang(tmp_path, browser):
    klass = tmp_path / "class"
    init_clean_room(klass / "张三" / "clean_room")
    out = tmp_path / "out"
    args = ["--lang", "zh", "grade", str(klass), "--out", str(out), "--rubric",
            str(rubric_without(tmp_path, "metric", "submission")), "--jobs", "1"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    browser.load((out / "class.html").resolve().as_uri())
    facts = json.loads(browser.evaluate(PAGE))
    assert browser.errors() == [] and browser.requests() == []
    assert facts["lang"] == "zh"
    assert "分数" in facts["text"] and "评分项" in facts["text"], facts["text"][:400]
    assert "0–8: 1 (张三)" in facts["scores"]
