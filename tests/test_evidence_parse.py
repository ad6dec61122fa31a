"""Safe loading of evidence files: one line for anything that is not a document, never a crash."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from labctl.errors import UsageError
from labctl.evidence import parse
from labctl.evidence.parse import MAX_BYTES, load, parse_text

BILLION_LAUGHS = "\n".join(
    [
        'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]',
        "b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]",
        "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]",
        "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]",
        "e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]",
        "f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]",
        "g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]",
        "h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]",
        "i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]",
    ]
)


def write(tmp_path: Path, data: bytes | str, name: str = "sub.yaml") -> Path:
    path = tmp_path / name
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def test_yaml_and_json_read_the_same():
    yaml_data, problem = parse_text("a: 1\nb: [x, 2.5]\n")
    assert problem is None
    json_data, problem = parse_text('{"a": 1, "b": ["x", 2.5]}')
    assert problem is None
    assert yaml_data == json_data == {"a": 1, "b": ["x", 2.5]}


@pytest.mark.parametrize(
    ("text", "value"),
    [("1e-5", 1e-5), ("1E5", 1e5), ("-2.5e-16", -2.5e-16), ("8.881784197001252e-16", 8.9e-16)],
)
def test_exponent_floats_are_numbers(text, value):
    # PyYAML's YAML 1.1 rules read 1e-5 as a string; JSON and YAML 1.2 write it that way.
    data, problem = parse_text(f"x: {text}\n")
    assert problem is None
    assert isinstance(data["x"], float)
    assert data["x"] == pytest.approx(value, rel=0.01)


def test_timestamps_stay_timestamps():
    data, _ = parse_text("t: 2026-01-01T00:00:00Z\n")
    assert isinstance(data["t"], datetime.datetime)


def test_alias_bomb_is_refused_without_expanding():
    data, problem = parse_text(BILLION_LAUGHS)
    assert data is None
    assert problem.field == "file"
    assert "aliases" in problem.reason
    assert "line 2, column" in problem.reason


def test_any_alias_is_refused():
    _, problem = parse_text("a: &x 1\nb: *x\n")
    assert "aliases" in problem.reason


def test_deep_nesting_is_refused():
    _, problem = parse_text("[" * 100_000)
    assert "nested deeper" in problem.reason


def test_node_limit(monkeypatch):
    monkeypatch.setattr(parse, "MAX_NODES", 10)
    _, problem = parse_text("[" + ", ".join(["1"] * 20) + "]")
    assert "more than 10 nodes" in problem.reason


@pytest.mark.parametrize(
    "text",
    [
        "a: !!python/object/apply:os.system ['echo pwned']\n",
        "a: !!python/name:os.system\n",
        "a: !custom 1\n",
    ],
)
def test_tags_never_construct_objects(text):
    data, problem = parse_text(text)
    assert data is None
    assert "could not determine a constructor" in problem.reason


def test_malformed_yaml_names_line_and_column():
    _, problem = parse_text("schema: x\nmetrics: [1,\n  b: }\n")
    assert problem.field == "file"
    assert "line 3, column" in problem.reason


def test_two_documents_are_refused():
    _, problem = parse_text("a: 1\n---\nb: 2\n")
    assert "single document" in problem.reason


def test_control_character_names_line_and_column():
    _, problem = parse_text("a: 1\nb: \x07\n")
    assert "line 2, column 4" in problem.reason


def test_integer_too_long_for_python():
    _, problem = parse_text("seed: " + "9" * 5000 + "\n")
    assert problem.field == "file"
    assert "not readable" in problem.reason


def test_unhashable_key():
    _, problem = parse_text("? [a]\n: 1\n")
    assert "unhashable" in problem.reason


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "empty"),
        (b"  \n\n", "empty"),
        (b"# only a comment\n", "no document"),
        (b"\x00\x01\x02binary", "binary"),
        (b"\xff\xfe\xfa", "not UTF-8"),
    ],
)
def test_not_a_document(tmp_path, data, reason):
    loaded = load(write(tmp_path, data))
    assert loaded.data is None
    assert reason in loaded.problem.reason


def test_huge_file_is_not_read_whole(tmp_path):
    path = write(tmp_path, b"a: 1\n" + b"#" * (MAX_BYTES + 10))
    loaded = load(path)
    assert "larger than" in loaded.problem.reason
    assert loaded.raw == b""


def test_bom_is_accepted(tmp_path):
    loaded = load(write(tmp_path, "\ufeffa: 1\n".encode()))
    assert loaded.problem is None
    assert loaded.data == {"a": 1}


def test_missing_file_and_directory_are_usage_errors(tmp_path):
    with pytest.raises(UsageError, match="no such file"):
        load(tmp_path / "nope.yaml")
    with pytest.raises(UsageError, match="directory"):
        load(tmp_path)
