"""A clean room is source by content, read within bounds, walked without recursion.

Each attack is its own room, the project's clean room with one change:

- bytecode in files whose names say nothing (`impl.bin` loaded by
  `SourcelessFileLoader`, a marshalled dict in `weights.dat`): it passed verify 19/19
  and graded 92/100, unseen by the scan and similarity. Refused by name, by content;
- code made at run time from other bytes: `marshal.loads` of a literal, a room file's
  text compiled (`exec(open("impl.txt").read())`, `SourceFileLoader` on `impl.txt`), a
  code object built by hand. The worker's audit hook refuses each where it is made, and
  the refusal is reported even when the room swallows it;
- a `.py` file past the documented size (60 MB took `ast.parse` to 23 GB): refused unread,
  by name, by verify and by similarity;
- a room nested 1,100 folders deep: a RecursionError in `run --clean-room` and
  `evidence submit`, now the `too-deep` refusal verify already gave.

Verify runs at both isolation levels where the worker is involved; refusals made in
labctl's process before any worker starts are shown at one.
"""

from __future__ import annotations

import json
import marshal
import py_compile
import shutil
import textwrap
from pathlib import Path

import pytest
from gradetools import ROOM, append, copy_room, git
from typer.testing import CliRunner

from hostile.attacks import require_sandbox
from hostile.odd_rooms import nest, unnest
from labctl import contract
from labctl.cli.main import app
from labctl.errors import ImportPolicyError
from labctl.grade.similarity import compare
from labctl.isolation import loader
from labctl.isolation.sandbox import CleanRoom
from labctl.verify.stubs import init_clean_room

LEVELS = ("sandbox", "process")
REFUSED = "makes code that is not the clean room's source"
# The project's softmax, taken from its own source, as the hidden code.
SOFTMAX = textwrap.dedent(
    """
    import numpy as np

    def softmax(x, axis=-1):
        shifted = x - np.max(x, axis=axis, keepdims=True)
        e = np.exp(shifted)
        return e / np.sum(e, axis=axis, keepdims=True)
    """
)
DEPTH = 1_100


def verify(room: Path, level: str, *extra: str) -> tuple[int, str]:
    if level == "sandbox":
        require_sandbox()
    result = CliRunner().invoke(
        app,
        [
            "verify",
            "clean-room",
            "--path",
            str(room),
            "--no-metrics",
            "--json",
            "--isolation",
            level,
            "--timeout",
            "10",
            "--out",
            str(room.parent / "evidence"),
            *extra,
        ],
    )
    assert "Traceback" not in result.output, result.output
    json.loads(result.stdout)
    return result.exit_code, result.stdout


def stub_softmax_room(dest: Path) -> Path:
    """The project's room with softmax a stub in its source: the real one hides elsewhere."""
    room = copy_room(dest)
    append(room, "primitives", "def softmax(x, axis=-1):\n    raise NotImplementedError")
    return room


def hidden(room: Path, code: str) -> Path:
    """`code` run at the end of the room's `__init__.py`, where it rebinds softmax."""
    with (room / "__init__.py").open("a", encoding="utf-8") as handle:
        handle.write("\n\n" + textwrap.dedent(code).strip() + "\n")
    return room


# -- bytecode in files named anything -------------------------------------------------


def _pyc_of(source: str, dest: Path) -> Path:
    source_file = dest.with_suffix(".src.py")
    source_file.write_text(source, encoding="utf-8")
    py_compile.compile(str(source_file), cfile=str(dest), doraise=True)
    source_file.unlink()
    return dest


@pytest.mark.parametrize("level", LEVELS)
def test_bytecode_in_a_bin_file_loaded_sourceless_is_refused_by_name(tmp_path, level):
    room = stub_softmax_room(tmp_path / "clean_room")
    _pyc_of(SOFTMAX, room / "impl.bin")
    hidden(
        room,
        """
        import importlib.machinery as _m, importlib.util as _u, pathlib as _p
        _loader = _m.SourcelessFileLoader("_impl", str(_p.Path(__file__).parent / "impl.bin"))
        _module = _u.module_from_spec(_u.spec_from_loader("_impl", _loader))
        _loader.exec_module(_module)
        softmax = _module.softmax
        """,
    )
    code, shown = verify(room, level)
    assert code == 1 and "impl.bin (bytecode)" in shown, shown[:2000]


def test_a_marshalled_table_of_code_in_a_data_file_is_refused_by_name(tmp_path):
    room = stub_softmax_room(tmp_path / "clean_room")
    functions = compile(SOFTMAX, "softmax", "exec")
    (room / "weights.dat").write_bytes(marshal.dumps({"softmax": functions, "scale": 1.0}))
    code, shown = verify(room, "process")  # refused in labctl's process: no worker starts
    assert code == 1 and "weights.dat (bytecode)" in shown, shown[:2000]


def test_an_elf_binary_under_any_name_is_refused(tmp_path):
    room = copy_room(tmp_path / "clean_room")
    shutil.copyfile("/bin/true", room / "helper.dat")
    code, shown = verify(room, "process")
    assert code == 1 and "helper.dat (not-source)" in shown, shown[:2000]


# -- code made at run time ------------------------------------------------------------

RUNTIME = {
    "marshal-literal": (
        f"""
        import marshal as _marshal, types as _types
        _code = _marshal.loads({marshal.dumps(compile(SOFTMAX, "impl", "exec"))!r})
        _space = {{}}
        exec(_code, _space)
        softmax = _space["softmax"]
        """,
        "marshal.loads",
    ),
    "exec-a-text-file": (
        """
        import pathlib as _p
        _space = {}
        exec(open(_p.Path(__file__).parent / "impl.txt").read(), _space)
        softmax = _space["softmax"]
        """,
        "compiles clean_room/impl.txt",
    ),
    "source-loader-on-a-text-file": (
        """
        import importlib.machinery as _m, importlib.util as _u, pathlib as _p
        _loader = _m.SourceFileLoader("_impl", str(_p.Path(__file__).parent / "impl.txt"))
        _module = _u.module_from_spec(_u.spec_from_loader("_impl", _loader))
        _loader.exec_module(_module)
        softmax = _module.softmax
        """,
        "compiles clean_room/impl.txt",
    ),
    "code-built-by-hand": (
        """
        _spare = softmax.__code__.replace(co_name="softmax_again")
        """,
        "a code object built by hand",
    ),
    "swallowed": (
        """
        import marshal as _marshal
        try:
            _marshal.loads(b"\\xe3" + bytes(40))
        except Exception:
            pass
        """,
        "marshal.loads",
    ),
}


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("name", sorted(RUNTIME))
def test_code_made_at_run_time_from_other_bytes_is_refused_where_it_is_made(tmp_path, name, level):
    if level == "sandbox":
        require_sandbox()
    code, said = RUNTIME[name]
    room = stub_softmax_room(tmp_path / "clean_room")
    (room / "impl.txt").write_text(SOFTMAX, encoding="utf-8")
    hidden(room, code)
    with pytest.raises(ImportPolicyError) as refused:
        CleanRoom(room, timeout_s=20, isolation=level).dispose()
    assert REFUSED in str(refused.value) and said in str(refused.value), str(refused.value)
    assert "clean_room/__init__.py:" in str(refused.value)


@pytest.mark.parametrize("level", LEVELS)
def test_the_rooms_own_source_and_the_standard_library_still_load(tmp_path, level):
    """The hook's control: a room that imports modules late, uses dataclasses, namedtuple,
    exec of its own strings and compile() passes its calls."""
    if level == "sandbox":
        require_sandbox()
    room = copy_room(tmp_path / "clean_room")
    hidden(
        room,
        """
        import collections as _c, dataclasses as _d
        _Pair = _c.namedtuple("_Pair", "a b")
        @_d.dataclass
        class _Box:
            x: int
        exec(compile("_late = 1", "<late>", "exec"))
        """,
    )
    import numpy as np

    with CleanRoom(room, timeout_s=20, isolation=level) as clean:
        out = clean.call("softmax", np.zeros((2, 3)))
        assert np.allclose(out, 1 / 3)
        assert clean.violations == []


# -- a source file past its size ------------------------------------------------------


def test_a_source_file_past_the_documented_size_is_refused_unread(tmp_path):
    room = copy_room(tmp_path / "clean_room")
    padding = "# " + "x" * 98 + "\n"
    count = loader.MAX_SOURCE_BYTES // len(padding) + 1
    with (room / "primitives.py").open("a", encoding="utf-8") as handle:
        handle.write(padding * count)
    code, shown = verify(room, "process")  # refused before any worker starts
    assert code == 1 and "primitives.py (too-large)" in shown, shown[:2000]
    init_clean_room(tmp_path / "stubs" / "clean_room")
    found = compare({"big": room, "stubs": tmp_path / "stubs" / "clean_room"})
    rooms = found.to_json()["rooms"]
    assert rooms["big"]["refused"] == ["primitives.py (too-large)"], rooms["big"]
    assert "refused" not in rooms["stubs"]
    # The contract declaration is read under the same bound.
    assert contract._MAX_INIT_BYTES == loader.MAX_SOURCE_BYTES


def test_sources_past_the_rooms_total_are_refused(tmp_path):
    room = copy_room(tmp_path / "clean_room")
    part = "# " + "y" * 98 + "\n"
    each = loader.MAX_SOURCE_BYTES // len(part) - 1  # every file under the per-file bound
    for i in range(loader.MAX_SOURCES_BYTES // (each * len(part)) + 1):
        (room / f"extra_{i}.py").write_text(part * each, encoding="utf-8")
    code, shown = verify(room, "process")
    assert code == 1 and "(too-large)" in shown, shown[:2000]


# -- a room nested 1,100 folders deep -------------------------------------------------


@pytest.fixture
def deep_room(tmp_path):
    room = copy_room(tmp_path / "clean_room")
    nest(room / "notes", DEPTH)
    yield room
    unnest(room / "notes", DEPTH)


def test_run_names_a_room_nested_past_any_recursion_limit(deep_room, tmp_path):
    result = CliRunner().invoke(
        app,
        ["run", "causal-attention", "--clean-room", str(deep_room), "--json", "--impl", "both"],
    )
    assert "Traceback" not in result.output and "RecursionError" not in result.output
    assert result.exit_code == 1, result.output
    assert "(too-deep)" in json.loads(result.stdout)["error"]["message"]


def test_verify_names_a_room_nested_past_any_recursion_limit(deep_room):
    code, shown = verify(deep_room, "process")
    assert code == 1 and "(too-deep)" in shown


def test_evidence_submit_names_a_room_nested_past_any_recursion_limit(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    repo.mkdir()
    room = copy_room(repo / "clean_room")
    append(room, "primitives", "# written by the learner")
    git("init", "-q", cwd=repo)
    git("add", "clean_room", cwd=repo)
    git("commit", "-q", "-m", "init", cwd=repo)
    monkeypatch.chdir(repo)
    runner = CliRunner()
    ran = runner.invoke(app, ["run", "causal-attention", "--clean-room", "clean_room"])
    assert ran.exit_code == 0, ran.output
    filled = runner.invoke(app, ["evidence", "template", "--fill"])
    (repo / "submission.yaml").write_text(filled.stdout, encoding="utf-8")
    nest(room / "notes", DEPTH)
    try:
        result = runner.invoke(app, ["evidence", "submit", "submission.yaml", "--json"])
    finally:
        unnest(room / "notes", DEPTH)
    assert "Traceback" not in result.output and "RecursionError" not in result.output
    assert result.exit_code == 1, result.output
    assert "(too-deep)" in result.stdout


def test_the_project_room_is_still_source(tmp_path):
    """The content check's control: labctl's own room and the stubs hold no bytecode."""
    assert loader.walk_room(ROOM).refused == []
    init_clean_room(tmp_path / "stubs")
    assert loader.walk_room(tmp_path / "stubs").refused == []


def test_thousands_of_forbidden_imports_are_a_refusal_not_a_crash(tmp_path):
    """3,000 import lines the static scan refuses (45 KB, within a source's size): the
    message joined every one and was a RecursionError; the first 200 are named."""
    room = copy_room(tmp_path / "clean_room")
    (room / "extra.py").write_text("".join(f"import torch{i}\n" for i in range(3000)))
    code, shown = verify(room, "process")
    document = json.loads(shown)
    assert code == 1 and document["status"] == "refused", shown[:500]
    assert "extra.py:200: imports torch199" in shown and "extra.py:201:" not in shown
