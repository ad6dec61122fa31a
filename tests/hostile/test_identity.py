"""One learner, one id, one set of files (issue 42): a class folder built to confuse them.

- `Zoë` twice, once NFC and once NFD (as a zip made on macOS spells it): one id, two
  folders. Before, two rows with one id, and the Canvas export silently kept the last.
- `张三` (labctl's own room) and a folder named `learner-<digest of 张三>` (stubs), the
  name labctl gave 张三's files: before, the attacker's folder took 张三's record, feedback
  and Gradescope files (its results.json held 张三's score), and `--only 张三` then
  duplicated rows.
- `José` (NFC folder) whom the TA's files spell in NFD: the submission-times CSV (9 days
  late: before, no penalty), the roster (before, left out of canvas.csv) and the overrides
  (before, refused as naming no learner).
Graded once through CliRunner (no lab metrics, no submission), then again with `--only`.
"""

from __future__ import annotations

import csv
import json
import unicodedata

import pytest
from gradetools import copy_room, rubric_without
from typer.testing import CliRunner

from hostile.attacks import require_sandbox
from labctl.cli.main import app
from labctl.grade.layout import stem
from labctl.verify.stubs import init_clean_room

NFC, NFD = "Zoë", unicodedata.normalize("NFD", "Zoë")
JOSE_NFD = unicodedata.normalize("NFD", "José")
DIGEST_NAME = stem("张三")  # learner-<12 hex digits>: what labctl names 张三's files


def nfd(text: str) -> str:
    return unicodedata.normalize("NFD", text)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    require_sandbox()
    base = tmp_path_factory.mktemp("identity")
    klass = base / "class"
    copy_room(klass / "张三" / "clean_room")
    init_clean_room(klass / DIGEST_NAME / "clean_room")
    copy_room(klass / NFC / "clean_room")
    init_clean_room(klass / NFD / "clean_room")
    copy_room(klass / "José" / "clean_room")
    rubric = base / "rubric.yaml"
    rubric.write_text(
        rubric_without(base, "metric", "submission").read_text()
        + 'due: "2026-03-01T23:59:00+08:00"\n'
        + "late: {unit: day, penalty_percent: 10, cap_percent: 30}\n"
    )
    (base / "times.csv").write_text(
        f"learner,submitted_at\n{JOSE_NFD},2026-03-10T12:00:00+08:00\n"
        "张三,2026-03-01T12:00:00+08:00\n",
        encoding="utf-8",
    )
    (base / "overrides.yaml").write_text(
        "schema: labctl.grade-overrides.v1\noverrides:\n"
        f"  - {{learner: {JOSE_NFD}, points: -1, reason: late README}}\n",
        encoding="utf-8",
    )
    (base / "roster.csv").write_text(
        "learner,Student,ID,SIS User ID,SIS Login ID,Section\n"
        f"{JOSE_NFD},José Ruiz,1,,,A\n张三,Zhang San,2,,,A\n{NFC},Zoë Li,3,,,A\n",
        encoding="utf-8",
    )
    command = ["grade", str(klass), "--out", str(base / "out"), "--rubric", str(rubric)]
    command += ["--jobs", "2", "--submitted-at", str(base / "times.csv")]
    command += ["--export", "canvas", "--roster", str(base / "roster.csv")]
    result = CliRunner().invoke(app, [*command, "--json"])
    assert "Traceback" not in result.output
    assert result.exit_code == 0, result.output
    return base, command, json.loads(result.stdout), result.stderr


def book(base) -> list[dict]:
    with (base / "out" / "gradebook.csv").open(encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_two_folders_of_one_normalised_id_are_both_refused_by_name(graded):
    base, _, doc, stderr = graded
    zoes = [r for r in book(base) if r["learner"] == NFC]
    assert len(zoes) == 2 and {r["status"] for r in zoes} == {"layout-error"}
    assert len({r["files"] for r in zoes}) == 2
    for row in zoes:
        assert "'Zo\\xeb'" in row["diagnosis"] and "'Zoe\\u0308'" in row["diagnosis"]
    # Canvas: no score is picked for an id two folders share; the TA is told.
    canvas = {line[0]: line[-1] for line in csv.reader((base / "out" / "canvas.csv").open())}
    assert canvas["Zoë Li"] == ""
    assert "Zoë has no grade (2 folders share this id)" in " ".join(stderr.split())


def test_a_folder_named_like_a_digest_keeps_its_own_files(graded):
    base, _, _, _ = graded
    rows = {r["learner"]: r for r in book(base)}
    zhang, attacker = rows["张三"], rows[DIGEST_NAME]
    assert zhang["files"] != attacker["files"] and attacker["files"] != DIGEST_NAME
    assert float(zhang["score"]) == float(zhang["max_score"]) > float(attacker["score"])
    for row in (zhang, attacker):
        results = json.loads(
            (base / "out" / "gradescope" / row["files"] / "results.json").read_text()
        )
        assert results["score"] == float(row["score"]), row["learner"]
        record = json.loads((base / "out" / "records" / f"{row['files']}.json").read_text())
        assert record["learner"] == row["learner"]


def test_only_regrades_one_learner_without_duplicating_rows(graded):
    base, command, doc, _ = graded
    again = CliRunner().invoke(app, [*command, "--only", nfd("张三"), "--json"])
    assert again.exit_code == 0, again.output
    second = json.loads(again.stdout)
    assert second["graded"] == ["张三"] and len(second["rows"]) == len(doc["rows"]) == 5
    assert sorted(r["learner"] for r in second["rows"]) == sorted(r["learner"] for r in doc["rows"])


def test_the_tas_files_spelled_in_nfd_reach_the_learner(graded):
    base, command, doc, stderr = graded
    jose = next(r for r in doc["rows"] if r["learner"] == "José")
    # 9 started days late: capped at 30 % (before, an NFD spelling left no penalty).
    assert jose["late"]["penalty_percent"] == 30
    assert jose["score"] == round(jose["max_score"] * 0.7, 2)
    assert "no submission time for José" not in stderr
    canvas = {line[0]: line[-1] for line in csv.reader((base / "out" / "canvas.csv").open())}
    assert canvas["José Ruiz"] == str(jose["score"]).removesuffix(".0")
    # The overrides spell him in NFD too (before: refused, "no learner José").
    again = CliRunner().invoke(
        app, [*command, "--overrides", str(base / "overrides.yaml"), "--json"]
    )
    assert again.exit_code == 0, again.output
    rows = {r["learner"]: r for r in json.loads(again.stdout)["rows"]}
    assert rows["José"]["score"] == round(jose["score"] - 1, 2)
