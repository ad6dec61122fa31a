"""`labctl report` on evidence edited by hand: a figure artifact whose sha256 was stamped
again after the edit, and `--out` naming a file of the evidence itself.

One lab's reference run (a heatmap and its CSV), copied into tmp_path for each test."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from labctl.cli.main import app

runner = CliRunner()
ENV = {"NO_COLOR": "1", "COLUMNS": "5000", "LABCTL_LANG": "", "LC_ALL": "", "LANG": ""}


@pytest.fixture(scope="module")
def one_run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("evidence")
    args = ["run", "causal-attention", "--impl", "reference", "--out", str(root / "runs")]
    result = runner.invoke(app, args, env=ENV)
    assert result.exit_code == 0, result.output
    return root


@pytest.fixture
def copy(one_run, tmp_path) -> Path:
    return Path(shutil.copytree(one_run, tmp_path / "evidence"))


def _restamp(folder: Path) -> None:
    """Stamp each artifact's sha256 again in the run record, as one who edits it by hand."""
    (record,) = folder.glob("*.json")
    data = json.loads(record.read_text("utf-8"))
    for artifact in data["artifacts"]:
        artifact["sha256"] = hashlib.sha256((folder / Path(artifact["path"]).name).read_bytes())
        artifact["sha256"] = artifact["sha256"].hexdigest()
    record.write_text(json.dumps(data), "utf-8")


def _edit(folder: Path, case: str) -> None:
    (listing,) = folder.glob("*-figures.jsonl")
    (matrix,) = folder.glob("*-attention-*.csv")
    lines = [json.loads(line) for line in listing.read_text("utf-8").splitlines()]
    heatmap = next(line for line in lines if line["kind"] == "heatmap")
    if case == "a list":
        lines.append([1, 2])
    elif case == "a string":
        lines.append("x")
    elif case == "ticks a number":
        heatmap["row_ticks"] = 5
    elif case == "columns a number":
        lines.append({"kind": "table", "csv": matrix.name, "columns": 7})
    elif case == "ragged":
        rows = matrix.read_text("utf-8").splitlines()
        matrix.write_text("\n".join([rows[0] + ",1,2", *rows[1:]]) + "\n", "utf-8")
    elif case == "empty":
        matrix.write_text("", "utf-8")
    elif case == "not UTF-8":
        matrix.write_bytes(matrix.read_bytes() + b"\xff\xfe\n")
    listing.write_text("".join(json.dumps(line) + "\n" for line in lines), "utf-8")


@pytest.mark.parametrize(
    ("case", "says"),
    [
        ("a list", "figures.jsonl, line 2: not a figure labctl can draw"),
        ("a string", "figures.jsonl, line 2: not a figure labctl can draw"),
        ("ticks a number", "figures.jsonl, line 1: not a figure labctl can draw"),
        ("columns a number", "figures.jsonl, line 2: not a figure labctl can draw"),
        ("ragged", "figures.jsonl, line 1: not a figure labctl can draw"),
        ("empty", "figures.jsonl, line 1: not a figure labctl can draw"),
        ("not UTF-8", "-attention-b0-h0-reference.csv is not UTF-8 text"),
    ],
)
def test_a_figure_edited_by_hand_is_named_and_the_report_written(copy, tmp_path, case, says):
    """Each was an internal error (AttributeError, TypeError, UnicodeDecodeError, numpy's
    ValueError, matplotlib's TypeError): no report at all, and no word of which file."""
    folder = copy / "runs" / "causal-attention"
    _edit(folder, case)
    _restamp(folder)
    path = tmp_path / "r.html"
    result = runner.invoke(
        app, ["report", "--root", str(copy), "--out", str(path), "--json"], env=ENV
    )
    assert result.exit_code == 0, result.output
    (lab,) = json.loads(result.stdout)["labs"]
    assert any(says in problem for problem in lab["problems"]), lab["problems"]
    assert says in path.read_text("utf-8")


@pytest.mark.parametrize(
    "named",
    [
        "runs/causal-attention/RECORD",
        "runs/causal-attention/new.html",
        "verify/history.jsonl",
        "module-manifest-v1.json",
    ],
)
@pytest.mark.parametrize("json_", [False, True])
def test_an_out_that_is_a_file_of_the_evidence_is_refused_untouched(copy, named, json_):
    """`--out` naming the run record replaced it with the report: exit 0, evidence lost."""
    folder = copy / "runs" / "causal-attention"
    (record,) = folder.glob("*.json")
    (copy / "verify").mkdir()
    (copy / "verify" / "history.jsonl").write_text("", "utf-8")
    (copy / "module-manifest-v1.json").write_text("{}", "utf-8")
    out = copy / named.replace("RECORD", record.name)
    before = {p: p.read_bytes() for p in copy.rglob("*") if p.is_file()}
    args = ["report", "--root", str(copy), "--out", str(out)]
    result = runner.invoke(app, args + (["--json"] if json_ else []), env=ENV)
    assert result.exit_code == 2, result.output
    said = json.loads(result.stdout)["error"]["message"] if json_ else result.stderr
    assert f"--out {out}: a file of the evidence under {copy}" in said, said
    assert {p: p.read_bytes() for p in copy.rglob("*") if p.is_file()} == before


def test_an_out_beside_the_labs_folders_is_written(copy):
    for out in (copy / "report.html", copy / "runs" / "report.html"):
        result = runner.invoke(app, ["report", "--root", str(copy), "--out", str(out)], env=ENV)
        assert result.exit_code == 0, result.output
        assert out.read_text("utf-8").startswith("<!DOCTYPE html>")


def test_a_verdict_its_own_numbers_contradict_is_named(copy, tmp_path):
    """A record edited to `actual: 1e308` with `passed: true` kept showed "pass" beside it."""
    (record,) = (copy / "runs" / "causal-attention").glob("*.json")
    data = json.loads(record.read_text("utf-8"))
    first, second = data["metrics"][1], data["metrics"][2]
    first["actual"], first["passed"] = 1e308, True
    second["passed"] = False
    record.write_text(json.dumps(data), "utf-8")
    path = tmp_path / "r.html"
    args = ["report", "--root", str(copy), "--out", str(path), "--json"]
    result = runner.invoke(app, args, env=ENV)
    assert result.exit_code == 0, result.output
    (lab,) = json.loads(result.stdout)["labs"]
    assert lab["problems"] == [
        f"metric {first['name']} (reference) is recorded as passed, but 1e+308 is not "
        f"{first['expected']}: the record was edited",
        f"metric {second['name']} (reference) is recorded as failed, but "
        f"{second['actual']!r} is {second['expected']}: the record was edited",
    ]
    assert "recorded as passed, but 1e+308 is not" in path.read_text("utf-8")


@pytest.mark.parametrize("where", ["record", "figure", "history"])
def test_a_lone_surrogate_is_named_not_an_internal_error(copy, tmp_path, where):
    """JSON's `"\\ud800"` is half a character: the page could not be encoded, and the report
    ended in "internal error: UnicodeEncodeError"."""
    folder = copy / "runs" / "causal-attention"
    (record,) = folder.glob("*.json")
    if where == "record":
        data = json.loads(record.read_text("utf-8"))
        data["known_failures"] = ["x\ud800"]
        (folder / "zz-edited.json").write_text(json.dumps(data), "utf-8")
        says = "the text 'x\\ud800' holds a lone surrogate"
    elif where == "figure":
        (listing,) = folder.glob("*-figures.jsonl")
        lines = [json.loads(line) for line in listing.read_text("utf-8").splitlines()]
        lines[0]["title"] = "t\ud800"
        listing.write_text("".join(json.dumps(line) + "\n" for line in lines), "utf-8")
        _restamp(folder)
        says = "figures.jsonl, line 1: not a figure labctl can draw"
    else:
        (copy / "verify").mkdir()
        (copy / "verify" / "history.jsonl").write_text(json.dumps({"path": "\ud800"}) + "\n")
        says = None
    path = tmp_path / "r.html"
    args = ["report", "--root", str(copy), "--out", str(path), "--json"]
    result = runner.invoke(app, args, env=ENV)
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    (lab,) = document["labs"]
    if says:
        assert any(says in problem for problem in lab["problems"]), lab["problems"]
    else:
        assert document["verify_runs"] == 0
    assert path.read_text("utf-8").startswith("<!DOCTYPE html>")


def test_names_with_an_escape_or_a_newline_are_shown_escaped(one_run, tmp_path, monkeypatch):
    """The root's and a record's names reached the terminal raw: an ESC sequence drove it, a
    newline split a line in two. --json keeps them exact."""
    root = Path(shutil.copytree(one_run, tmp_path / "ev\x1b[31mil"))
    monkeypatch.chdir(tmp_path)  # the report is named relative to it
    folder = root / "runs" / "causal-attention"
    (folder / "zz\x1b[2J\n.json").write_text("junk", "utf-8")
    result = runner.invoke(app, ["report", "--root", str(root)], env=ENV)
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output, result.output
    assert "ev\\x1b[31mil/report.html" in result.stdout
    assert "causal-attention: record zz\\x1b[2J\\x0a.json was not read" in result.stderr
    document = json.loads(runner.invoke(app, ["report", "--root", str(root), "--json"]).stdout)
    assert document["report"].endswith("ev\x1b[31mil/report.html")


def test_a_default_report_file_that_is_a_directory_names_no_option_not_given(copy):
    """It said `--out ROOT/report.html: is a directory`, of an --out never given."""
    (copy / "report.html").mkdir()
    result = runner.invoke(app, ["report", "--root", str(copy), "--json"], env=ENV)
    assert result.exit_code == 2, result.output
    assert json.loads(result.stdout)["error"]["message"] == (
        f"{copy / 'report.html'}: the report's default file is a directory; move it, or name "
        "another file with --out"
    )
