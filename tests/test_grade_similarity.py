"""`labctl grade --similarity` as MOSS does it: base code removed, matches per file, ranked.

The class: five rooms written independently (`similarityrooms`: loops, einsum,
helpers, a class of checks, float32 internals), a copy of the einsum room with
its names changed, and two learners who handed in labctl's own clean room. The
copy must be the top pair; the two copies of labctl's room share only base code.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from gradetools import rubric_without
from honestrooms import own_copy
from similarityrooms import EINSUM, LOOPS, STYLES, renamed, write_room
from typer.testing import CliRunner

from labctl.cli.main import app
from labctl.fingerprints.base import Base
from labctl.grade import similarity
from labctl.grade.similarity import compare
from labctl.grade.similarity_report import document
from labctl.verify.stubs import init_clean_room


@pytest.fixture(scope="module")
def rooms(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("similarity")
    found = {name: write_room(root / name, code) for name, code in STYLES.items()}
    found["copier"] = write_room(root / "copier", renamed(EINSUM))
    for name in ("own-a", "own-b"):
        found[name] = own_copy(root / name)
    return found


def _pair_names(result) -> list[frozenset]:
    return [frozenset((p.a, p.b)) for p in result.pairs]


def test_the_renamed_copy_is_the_top_pair_and_labctls_own_room_is_base(rooms):
    result = compare(rooms, threshold=0.0)
    names = _pair_names(result)
    assert names[0] == frozenset(("copier", "einsum"))
    top = result.pairs[0]
    assert top.a_share == top.b_share == 1.0
    # labctl's own room, handed in twice, is all base: no fingerprint left, no pair.
    assert result.rooms["own-a"].base_share == result.rooms["own-b"].base_share == 1.0
    assert frozenset(("own-a", "own-b")) not in names
    # Independent rooms share little beyond the base (measured: 13% at most).
    assert all(max(p.a_share, p.b_share) < 0.3 for p in result.pairs[1:])
    # The default threshold lists the copy alone.
    assert _pair_names(compare(rooms)) == [frozenset(("copier", "einsum"))]


def test_without_the_base_removed_labctls_room_would_rank_above_the_copy(rooms, monkeypatch):
    """The fault the base removal fixes: shared starting code outranks a real copy."""
    monkeypatch.setattr(similarity, "load_base", lambda extra: Base())
    names = _pair_names(compare(rooms, threshold=0.0))
    assert names.index(frozenset(("own-a", "own-b"))) < names.index(frozenset(("copier", "einsum")))


def test_matches_are_given_per_file_with_line_ranges_inside_that_file(rooms):
    top = compare(rooms).pairs[0]
    assert [(f.a_file, f.b_file) for f in top.files] == [
        ("transformer_block.py", "transformer_block.py")
    ]
    lengths = {
        name: len((rooms[name] / "transformer_block.py").read_text().splitlines())
        for name in (top.a, top.b)
    }
    regions = top.files[0].regions
    assert regions and sum(r.fingerprints for r in regions) >= top.shared
    for region in regions:
        assert 1 <= region.a_lines[0] <= region.a_lines[1] <= lengths[top.a]
        assert 1 <= region.b_lines[0] <= region.b_lines[1] <= lengths[top.b]
    # The copy's regions lie where the learner's code is, not in the stubs' header.
    einsum_text = (rooms["einsum"] / "transformer_block.py").read_text().splitlines()
    side = "a_lines" if top.a == "einsum" else "b_lines"
    first = min(getattr(r, side)[0] for r in regions)
    assert "def softmax" in "\n".join(einsum_text[first - 2 : first + 2])


def test_a_base_folder_given_by_the_grader_never_counts(tmp_path):
    """Two learners who only filled in the same starter file of the course: a pair without
    --base, none with it."""
    starter = write_room(tmp_path / "starter", LOOPS)
    for name in ("ann", "bob"):
        shutil.copytree(starter, tmp_path / name)
    rooms = {"ann": tmp_path / "ann", "bob": tmp_path / "bob"}
    assert _pair_names(compare(rooms)) == [frozenset(("ann", "bob"))]
    with_base = compare(rooms, base=[starter])
    assert with_base.pairs == []
    assert with_base.rooms["ann"].base_share == 1.0
    assert str(starter) in with_base.to_json()["base"]


def test_the_stubs_are_base_code(tmp_path):
    rooms = {}
    for name in ("ann", "bob"):
        init_clean_room(tmp_path / name)
        rooms[name] = tmp_path / name
    result = compare(rooms, threshold=0.0)
    assert result.pairs == [] and result.rooms["ann"].base_share == 1.0


def test_the_same_rooms_give_the_same_document(rooms):
    assert compare(rooms).to_json() == compare(dict(reversed(rooms.items()))).to_json()


def test_learner_code_in_the_html_view_is_inert(tmp_path):
    attack = dict(EINSUM)
    attack["causal_mask"] = attack["causal_mask"].replace(
        "    t_k = t_q",
        '    note = "</script><script>alert(1)</script><img src=x onerror=alert(2)>"\n    t_k = t_q',
    )
    rooms = {
        "ann</h1><script>alert(3)</script>": write_room(tmp_path / "ann", attack),
        "bob": write_room(tmp_path / "bob", renamed(attack)),
    }
    result = compare(rooms)
    assert len(result.pairs) == 1
    page = document(result)
    assert "<script" not in page.lower() and "<img" not in page.lower()
    assert "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "default-src &#x27;none&#x27;" in page or "default-src 'none'" in page
    assert "ann&lt;/h1&gt;" in page


def test_the_cli_writes_the_report_and_a_run_without_similarity_removes_it(tmp_path):
    klass = tmp_path / "class"
    for name in ("ann", "bob"):
        init_clean_room(klass / name / "clean_room")
        write_room(klass / name / "tmp", EINSUM if name == "ann" else renamed(EINSUM))
        shutil.rmtree(klass / name / "clean_room")
        (klass / name / "tmp").rename(klass / name / "clean_room")
    rubric = rubric_without(tmp_path, "metric", "submission")
    out = tmp_path / "out"
    args = ["grade", str(klass), "--out", str(out), "--rubric", str(rubric), "--jobs", "1"]
    first = CliRunner().invoke(app, [*args, "--similarity", "--json"])
    assert first.exit_code == 0, first.output
    doc = json.loads(first.stdout)
    assert [(p["a"], p["b"]) for p in doc["similarity"]["pairs"]] == [("ann", "bob")]
    assert json.loads((out / "similarity.json").read_text()) == doc["similarity"]
    assert "similarity.html" in doc["files"] and (out / "similarity.html").is_file()
    shown = CliRunner().invoke(app, [*args, "--similarity"])
    assert shown.exit_code == 0, shown.output
    said = " ".join(shown.stdout.split())
    assert "similar: ann ~ bob: 44 lines of ann and 54 lines of bob match beyond the base" in said
    # the stubs' lines (what each function must refuse) place the function; any lines will do
    shared = r"shared functions: scaled_dot_product_attention \(transformer_block.py \d+-\d+ ~"
    assert re.search(shared, said), said
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0, again.output
    assert not (out / "similarity.json").exists() and not (out / "similarity.html").exists()


def test_a_base_that_is_not_a_folder_is_a_usage_error(tmp_path):
    klass = tmp_path / "class"
    init_clean_room(klass / "ann" / "clean_room")
    result = CliRunner(env={"COLUMNS": "300"}).invoke(
        app,
        [
            "grade",
            str(klass),
            "--out",
            str(tmp_path / "out"),
            "--similarity",
            "--base",
            str(tmp_path / "nope"),
        ],
    )
    assert result.exit_code == 2
    assert "--base" in result.output and "is not a folder" in result.output
