"""Safe loading of evidence files: one line for anything that is not a document, never a crash."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
import yaml

from labctl import inputfile
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


# -- exact messages and limits at their bounds (issue 13's mutation runs) ----------------------


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("\x1b[2J", "\\x1b[2J"),  # ESC: a terminal sequence
        ("a\x7fb", "a\\x7fb"),  # DEL
        ("\x85", "\\x85"),  # a C1 control
        ("\xad", "\\xad"),  # a format character below U+0100
        ("\u202eevil", "\\u202eevil"),  # a bidi override
        ("\u2028\u2029", "\\u2028\\u2029"),  # line and paragraph separators
        ("\u0600", "\\u0600"),  # a format character from U+0100 on
        ("é 中文 ok\u00a0", "é 中文 ok\u00a0"),  # printable text, a no-break space
    ],
)
def test_hidden_characters_are_written_as_escapes(text, shown):
    assert parse.escaped(text) == shown


def test_a_problem_reads_as_field_claim_and_reason_and_escapes_everything():
    plain = parse.Problem("seed", "is negative")
    assert str(plain) == "seed: is negative"
    assert plain.to_json() == {"field": "seed", "reason": "is negative"}
    inside = parse.Problem("metrics[0].actual", "0.5 is too large", "w_max", "clean-room")
    assert str(inside) == "metrics[0] (w_max, clean-room): actual 0.5 is too large"
    assert inside.to_json() == {
        "field": "metrics[0].actual",
        "reason": "0.5 is too large",
        "metric": "w_max",
        "impl": "clean-room",
    }
    row = parse.Problem("metrics[2]", "claimed twice", "w_max", None)
    assert str(row) == "metrics[2] (w_max): claimed twice"
    assert row.to_json() == {"field": "metrics[2]", "reason": "claimed twice", "metric": "w_max"}
    hostile = parse.Problem("a\x1b", "b\u202e", "c\x07", "d\x00")
    assert (hostile.field, hostile.reason, hostile.metric, hostile.impl) == (
        "a\\x1b",
        "b\\u202e",
        "c\\x07",
        "d\\x00",
    )


def test_one_line_joins_every_run_of_whitespace():
    assert parse.one_line("a\n  b\t\tc \r\n") == "a b c"
    assert parse.one_line(ValueError("x\ny")) == "x y"


def _nested(levels: int) -> str:
    return "[" * levels + "]" * levels


def test_nesting_is_refused_past_max_depth_only_and_siblings_do_not_add_up():
    data, problem = parse_text(_nested(parse.MAX_DEPTH))
    assert problem is None and data is not None
    _, problem = parse_text(_nested(parse.MAX_DEPTH + 1))
    assert problem.reason == (
        f"malformed YAML/JSON at line 1, column {parse.MAX_DEPTH + 1}: "
        f"nested deeper than {parse.MAX_DEPTH} levels"
    )
    siblings = "[" + ", ".join([_nested(parse.MAX_DEPTH - 1)] * 3) + "]"
    assert parse_text(siblings)[1] is None


def test_node_limit_at_its_bound(monkeypatch):
    monkeypatch.setattr(parse, "MAX_NODES", 5)
    assert parse_text("[1, 2, 3, 4]") == ([1, 2, 3, 4], None)  # the list and 4 items: 5 nodes
    _, problem = parse_text("[1, 2, 3, 4, 5]")
    assert problem.reason == "malformed YAML/JSON at line 1, column 14: more than 5 nodes"


def test_an_alias_is_named_where_it_stands():
    _, problem = parse_text("a: &x 1\nb: *x\n")
    assert problem.reason == (
        "malformed YAML/JSON at line 2, column 4: aliases (*name) are not allowed in evidence"
    )


def test_a_duplicate_key_names_the_first_and_the_second_place():
    _, problem = parse_text("a: 1\nb:\n  c: 2\n  c: 3\n")
    assert problem.reason == (
        "malformed YAML/JSON at line 4, column 3: duplicate key 'c' (first at line 3)"
    )
    _, problem = parse_text('{"seed": 1, "seed": 2}')
    assert "duplicate key 'seed' (first at line 1)" in problem.reason
    assert parse_text("a: 1\nb: {a: 2}\n") == ({"a": 1, "b": {"a": 2}}, None)


def test_reader_errors_and_unconvertible_values_say_where_and_what():
    _, problem = parse_text("a: 1\nbb: x\x07\n")
    assert problem.reason == (
        "malformed YAML/JSON at line 2, column 6: character U+0007 is not allowed"
    )
    _, problem = parse_text("seed: " + "9" * 5000 + "\n")
    assert problem.reason == (
        "not readable: ValueError: Exceeds the limit (4300 digits) for integer string "
        "conversion: value has 5000 digits; use sys.set_int_max_str_digits() to increase the limit"
    )


def test_decode_names_the_first_byte_that_is_not_utf8():
    assert parse.decode(b"ab\xffcd") == (
        None,
        parse.Problem("file", "not UTF-8 text (byte 0xff at offset 2)"),
    )
    assert parse.decode(b"a\x00") == (
        None,
        parse.Problem("file", "binary data (NUL bytes), not a YAML or JSON text"),
    )
    assert parse.decode(b"\xef\xbb\xbfa: 1") == ("a: 1", None)
    assert parse.decode(b" \n\t") == (None, parse.Problem("file", "empty"))


def test_the_size_limit_is_inclusive(tmp_path):
    path = write(tmp_path, b"a: 1\n")
    assert parse.read_bytes(path, limit=5) == b"a: 1\n"
    assert parse.read_bytes(path, limit=4) is None
    loaded = load(path, limit=4)
    assert (loaded.data, loaded.raw) == (None, b"")
    assert loaded.problem == parse.Problem("file", "larger than the 4 byte limit")
    assert load(path, limit=5).data == {"a": 1}


def test_a_load_keeps_the_bytes_of_a_file_it_could_not_read_as_a_document(tmp_path):
    loaded = load(write(tmp_path, b"a: [1,\n"))
    assert loaded.raw == b"a: [1,\n" and loaded.data is None
    assert loaded.problem.reason.startswith("malformed YAML/JSON at line 2, column 1: ")
    assert load(write(tmp_path, b"\xff", "b.yaml")).raw == b"\xff"


def test_special_files_are_usage_errors_named_by_kind(tmp_path):
    import os
    import socket

    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    with pytest.raises(UsageError, match=r"pipe.yaml: is a FIFO, not a regular file$"):
        load(fifo)
    sock_path = tmp_path / "s.yaml"
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(sock_path))
        with pytest.raises(UsageError, match=r"s.yaml: (is a socket|cannot read)"):
            load(sock_path)
    finally:
        sock.close()
    with pytest.raises(UsageError, match=r"null: is a character device, not a regular file$"):
        load(Path(os.devnull))
    dangling = tmp_path / "gone.yaml"
    dangling.symlink_to(tmp_path / "nowhere")
    with pytest.raises(UsageError, match=r"gone.yaml: cannot read \(No such file or directory\)"):
        load(dangling)
    with pytest.raises(UsageError, match=r"nope.yaml: no such file$"):
        load(tmp_path / "nope.yaml")
    with pytest.raises(UsageError) as refused:
        load(tmp_path)
    assert str(refused.value) == f"{tmp_path}: is a directory, not an evidence file"


def test_file_kinds_are_named():
    import stat

    assert inputfile.kind(stat.S_IFDIR) == "a directory"
    assert inputfile.kind(stat.S_IFIFO) == "a FIFO"
    assert inputfile.kind(stat.S_IFCHR) == "a character device"
    assert inputfile.kind(stat.S_IFBLK) == "a block device"
    assert inputfile.kind(stat.S_IFSOCK) == "a socket"
    assert inputfile.kind(stat.S_IFDOOR if hasattr(stat, "S_IFDOOR") else 0) == ("a special file")


def test_a_problem_deeper_inside_a_claim_splits_at_the_claim_only():
    deep = parse.Problem("metrics[0].x[1].y", "r", "m", "i")
    assert str(deep) == "metrics[0] (m, i): x[1].y r"


def test_a_duplicate_key_is_found_past_an_unhashable_one():
    _, problem = parse_text("? [a]\n: 1\nb: 1\nb: 2\n")
    assert problem.reason.endswith("duplicate key 'b' (first at line 3)")


class _Handle:
    """A file handle that records how much was asked of it, and can fail."""

    def __init__(self, handle, asked, fail=None):
        self._handle, self._asked, self._fail = handle, asked, fail

    def read(self, size=-1):
        self._asked.append(size)
        if self._fail:
            raise self._fail
        return self._handle.read(size)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._handle.close()


def test_a_file_is_never_read_past_one_byte_over_the_limit(tmp_path, monkeypatch):
    import os

    asked: list = []
    real = os.fdopen
    monkeypatch.setattr(inputfile.os, "fdopen", lambda fd, mode: _Handle(real(fd, mode), asked))
    path = write(tmp_path, b"x" * 100)
    assert parse.read_bytes(path, limit=10) is None
    assert asked == [11]


def test_a_read_that_fails_is_a_usage_error_with_the_system_s_reason(tmp_path, monkeypatch):
    import errno
    import os

    failure = OSError(errno.EIO, "Input/output error")
    real = os.fdopen
    monkeypatch.setattr(
        inputfile.os, "fdopen", lambda fd, mode: _Handle(real(fd, mode), [], failure)
    )
    path = write(tmp_path, b"a: 1\n")
    with pytest.raises(UsageError) as refused:
        parse.read_bytes(path)
    assert str(refused.value) == f"{path}: cannot read (Input/output error)"


def test_a_load_names_its_path_whatever_it_found(tmp_path):
    for data in (b"a: 1\n", b"\xff", b"a: [\n", b"x" * 20):
        path = write(tmp_path, data)
        assert load(path, limit=10).path == path


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("a\x07: 1\nb: 2\nc: 3\n", "line 1, column 2"),  # newlines after it do not count
        ("\n\x07", "line 2, column 1"),  # a newline at the very start counts
        ("a: 1\nb: 2\nc: \x07", "line 3, column 4"),  # the column runs from the last newline
    ],
)
def test_a_control_character_is_placed_by_line_and_column(text, where):
    data, problem = parse_text(text)
    assert data is None and problem.field == "file"
    assert problem.reason == f"malformed YAML/JSON at {where}: character U+0007 is not allowed"


def test_a_parser_error_gives_its_context_and_its_problem():
    _, problem = parse_text("a: [1, 2\nb: 3\n")
    assert problem.reason == (
        "malformed YAML/JSON at line 2, column 2: while parsing a flow sequence, "
        "expected ',' or ']', but got ':'"
    )


def test_a_document_of_comments_only_is_a_problem_of_the_file():
    assert parse_text("# nothing\n") == (
        None,
        parse.Problem("file", "no document (empty, or only comments)"),
    )


@pytest.mark.parametrize(
    ("raised", "reason"),
    [
        (yaml.YAMLError("odd\n  thing"), "malformed YAML/JSON: odd thing"),
        (ValueError("v" * 300), "not readable: ValueError: " + "v" * 200),
        (RecursionError("deep"), "not readable: RecursionError: deep"),
    ],
)
def test_errors_no_document_raises_today_are_still_one_line(monkeypatch, raised, reason):
    """PyYAML's other errors, and exceptions with long messages: the handlers stay one line."""

    def fail(self):
        raise raised

    monkeypatch.setattr(parse.EvidenceLoader, "get_single_data", fail)
    assert parse_text("a: 1\n") == (None, parse.Problem("file", reason))


@pytest.mark.parametrize("where", ["open", "read"])
def test_an_os_error_without_errno_text_is_named_by_its_message(tmp_path, monkeypatch, where):
    path = write(tmp_path, b"a: 1\n")
    failure = OSError("the disk said no")
    if where == "open":

        def refused_open(*args):
            raise failure

        monkeypatch.setattr(inputfile.os, "open", refused_open)
    else:
        real = inputfile.os.fdopen
        monkeypatch.setattr(
            inputfile.os, "fdopen", lambda fd, mode: _Handle(real(fd, mode), [], failure)
        )
    with pytest.raises(UsageError) as refused:
        parse.read_bytes(path)
    assert str(refused.value) == f"{path}: cannot read (the disk said no)"


@pytest.mark.parametrize(
    ("raised", "reason"),
    [
        (yaml.MarkedYAMLError(problem="a problem with no place"), "a problem with no place"),
        (yaml.MarkedYAMLError(), "malformed"),
    ],
)
def test_a_yaml_error_with_no_place_or_text_is_still_one_named_problem(monkeypatch, raised, reason):
    """PyYAML's own errors all carry a mark; a constructor's need not."""

    def refusing(self):
        raise raised

    monkeypatch.setattr(parse.EvidenceLoader, "get_single_data", refusing)
    data, problem = parse_text("a: 1\n")
    assert data is None
    assert str(problem) == f"file: malformed YAML/JSON: {reason}"


def test_a_problem_keeps_its_reason_in_english_and_shows_it_translated():
    from labctl.i18n import Msg, set_language

    problem = parse.Problem(
        "seed", Msg("{seed} is negative; seeds are non-negative integers", seed=-1)
    )
    previous = set_language("zh")
    try:
        assert problem.reason == "-1 is negative; seeds are non-negative integers"
        assert problem.shown_line() == "seed: -1 是负数；种子是非负整数"
        escaped = parse.Problem(
            "x", Msg("{name} is negative; seeds are non-negative integers", name="a\x1bb")
        )
        assert escaped.shown_line().startswith("x: a\\x1bb ")  # escaped as the reason is
    finally:
        set_language(previous)
