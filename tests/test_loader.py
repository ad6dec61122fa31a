"""labctl.loader: a clean room from any directory, isolated from every other load."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from labctl import clean_room as installed_clean_room
from labctl import contract
from labctl.errors import CleanRoomError, UsageError
from labctl.isolation import loader

REPO = Path(__file__).resolve().parents[1]


def write_package(root: Path, files: dict[str, str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, source in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source).lstrip("\n"), encoding="utf-8")
    return root


def named_room(parent: Path, value: str, name: str = "clean_room") -> Path:
    """A package called `name` whose helpers.py holds VALUE, imported both ways."""
    return write_package(
        parent / name,
        {
            "helpers.py": f"VALUE = {value!r}\nSTATE = []\n",
            "__init__.py": f"""
                from .helpers import VALUE as RELATIVE
                from {name}.helpers import VALUE as ABSOLUTE
                import {name}.helpers as helpers_by_name
                from . import helpers

                def softmax(x, axis=-1):
                    return RELATIVE
            """,
        },
    )


def test_loads_from_any_directory(tmp_path):
    room = write_package(
        tmp_path / "some" / "where" / "my_room",
        {
            "__init__.py": "from .impl import softmax\n",
            "impl.py": "def softmax(x, axis=-1):\n    return x\n",
        },
    )
    module = loader.load_package(room)
    assert module.__name__.startswith(loader.PACKAGE_PREFIX)
    assert module.softmax(41) == 41
    assert Path(module.__file__) == room / "__init__.py"
    assert sys.modules[module.__name__] is module
    assert f"{module.__name__}.impl" in sys.modules


def test_accepts_a_string_path(tmp_path):
    room = write_package(tmp_path / "room", {"__init__.py": "X = 1\n"})
    assert loader.load_package(str(room)).X == 1


def test_two_clean_rooms_of_the_same_name_are_isolated(tmp_path):
    a = loader.load_package(named_room(tmp_path / "a", "from a"))
    b = loader.load_package(named_room(tmp_path / "b", "from b"))
    assert (a.RELATIVE, a.ABSOLUTE, a.helpers_by_name.VALUE) == ("from a", "from a", "from a")
    assert (b.RELATIVE, b.ABSOLUTE, b.helpers_by_name.VALUE) == ("from b", "from b", "from b")
    assert a.helpers is a.helpers_by_name
    assert a.helpers is not b.helpers
    assert a.softmax(None) == "from a" and b.softmax(None) == "from b"
    a.helpers.STATE.append(1)
    assert b.helpers.STATE == []


def test_the_directory_name_is_given_back_after_a_load(tmp_path):
    before = sys.modules.get("clean_room")
    loader.load_package(named_room(tmp_path, "mine"))
    assert sys.modules.get("clean_room") is before
    assert "clean_room.helpers" not in sys.modules


def test_in_worker_leaves_the_name_on_the_loaded_package(tmp_path, monkeypatch):
    # in_worker is for a process holding one clean room; undo it for the other tests.
    saved = {k: v for k, v in sys.modules.items() if k == "room_x" or k.startswith("room_x.")}
    module = loader.load_package(named_room(tmp_path, "kept", name="room_x"), in_worker=True)
    try:
        assert sys.modules["room_x"] is module
        assert sys.modules["room_x.helpers"].VALUE == "kept"
    finally:
        loader._take_names("room_x")
        sys.modules.update(saved)


def test_loading_the_same_directory_twice_gives_distinct_modules(tmp_path):
    room = named_room(tmp_path, "same")
    first, second = loader.load_package(room), loader.load_package(room)
    assert first is not second
    assert first.__name__ != second.__name__
    assert first.helpers is not second.helpers
    first.helpers.STATE.append("edited")
    assert second.helpers.STATE == []
    assert first.softmax is not second.softmax


def test_the_project_clean_room_loads_and_matches_the_contract():
    module = loader.load_package(REPO / "clean_room")
    assert module is not installed_clean_room
    assert module.__name__.startswith(loader.PACKAGE_PREFIX)
    observed = loader.observe_signatures(module, contract.function_names())
    assert contract.check_signatures(observed) == []


def test_syntax_error_names_file_and_line(tmp_path):
    room = write_package(
        tmp_path / "room",
        {
            "__init__.py": "from . import helpers\n",
            "helpers.py": "X = 1\n\ndef broken(:\n    pass\n",
        },
    )
    with pytest.raises(CleanRoomError, match=r"syntax error in room/helpers\.py:3"):
        loader.load_package(room)


def test_syntax_error_in_init_names_file_and_line(tmp_path):
    room = write_package(tmp_path / "room", {"__init__.py": "A = 1\nB = = 2\n"})
    with pytest.raises(CleanRoomError, match=r"room/__init__\.py:2"):
        loader.load_package(room)


def test_exception_at_import_names_file_and_line(tmp_path):
    room = write_package(
        tmp_path / "room",
        {
            "__init__.py": "from .helpers import X\n",
            "helpers.py": "import math\n\nX = math.pi\nraise RuntimeError('boom at import')\n",
        },
    )
    with pytest.raises(CleanRoomError) as caught:
        loader.load_package(room)
    message = str(caught.value)
    assert "room/helpers.py:4" in message
    assert "RuntimeError" in message and "boom at import" in message


def test_import_of_a_missing_module_is_a_clean_room_error(tmp_path):
    room = write_package(
        tmp_path / "room", {"__init__.py": "import numpy\nimport no_such_module_xyz\n"}
    )
    with pytest.raises(CleanRoomError, match=r"room/__init__\.py:2.*ModuleNotFoundError"):
        loader.load_package(room)


def test_a_failed_load_does_not_leave_the_package_behind(tmp_path):
    room = write_package(tmp_path / "room", {"__init__.py": "raise ValueError('no')\n"})
    before = set(sys.modules)
    with pytest.raises(CleanRoomError):
        loader.load_package(room)
    assert not {k for k in set(sys.modules) - before if k.startswith(loader.PACKAGE_PREFIX)}


def test_missing_directory_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="no such directory"):
        loader.load_package(tmp_path / "nowhere")


def test_a_file_is_not_a_directory(tmp_path):
    file = tmp_path / "room.py"
    file.write_text("X = 1\n")
    with pytest.raises(UsageError, match="not a directory"):
        loader.load_package(file)


def test_directory_without_init_is_a_clean_room_error(tmp_path):
    room = write_package(tmp_path / "room", {"attention.py": "X = 1\n"})
    with pytest.raises(CleanRoomError, match=r"no __init__\.py"):
        loader.load_package(room)


@pytest.mark.parametrize(
    ("name", "alias"),
    [
        ("clean_room", "clean_room"),
        ("json", None),
        ("numpy", None),
        ("labctl", None),
        ("my-room", None),
        ("class", None),
        ("room2", "room2"),
    ],
)
def test_alias_for(tmp_path, name, alias):
    assert loader.alias_for(tmp_path / name) == alias


def test_observe_signatures_shape(tmp_path):
    room = write_package(
        tmp_path / "room",
        {
            "__init__.py": """
                def softmax(x, axis=-1):
                    return x

                def causal_mask(t_q, *, t_k=None):
                    return t_q

                def merge_heads(*args, **kwargs):
                    return args

                def rope(x, positions, theta=object()):
                    return x

                split_heads = 3
                repeat_kv = max
            """
        },
    )
    module = loader.load_package(room)
    names = (
        "softmax",
        "causal_mask",
        "merge_heads",
        "rope",
        "split_heads",
        "repeat_kv",
        "rms_norm",
    )
    observed = loader.observe_signatures(module, names)
    assert set(observed) == set(names)
    assert observed["softmax"] == {
        "present": True,
        "callable": True,
        "params": [
            {"name": "x", "kind": "POSITIONAL_OR_KEYWORD"},
            {"name": "axis", "kind": "POSITIONAL_OR_KEYWORD", "default": -1},
        ],
        "stub": False,
    }
    assert observed["causal_mask"]["params"] == [
        {"name": "t_q", "kind": "POSITIONAL_OR_KEYWORD"},
        {"name": "t_k", "kind": "KEYWORD_ONLY", "default": None},
    ]
    assert [p["kind"] for p in observed["merge_heads"]["params"]] == [
        "VAR_POSITIONAL",
        "VAR_KEYWORD",
    ]
    theta = observed["rope"]["params"][2]
    assert theta["name"] == "theta" and theta["default"]["repr"].startswith("<object object")
    assert observed["split_heads"] == {"present": True, "callable": False}
    assert observed["repeat_kv"] == {"present": True, "callable": True, "params": None}
    assert observed["rms_norm"] == {"present": False}
    json.dumps(observed)  # JSON all the way down: it crosses the wire as is
    deviations = {d.function for d in contract.check_signatures(observed)}
    assert {"softmax"} & deviations == set()
    assert {"causal_mask", "merge_heads", "split_heads", "repeat_kv", "rms_norm"} <= deviations


@pytest.mark.parametrize(
    "source", ["X = 1\n".encode("utf-16"), b"X = 1\nY = 2\x00\n"], ids=["utf-16", "nul"]
)
def test_a_file_with_nul_bytes_is_named_with_what_is_wrong(tmp_path, source):
    """compile() names no file for these: the message read `syntax error in :None`."""
    room = write_package(tmp_path / "room", {"__init__.py": "from . import ffn\n"})
    (room / "ffn.py").write_bytes(source)
    line = 1 if source.startswith(b"\xff") else 2
    with pytest.raises(CleanRoomError, match=rf"room/ffn\.py:{line}: the file holds NUL bytes"):
        loader.load_package(room)


def test_a_room_that_raises_base_exceptions_as_it_is_read_is_its_own_failure(tmp_path):
    """A module `__getattr__` raising SystemExit, a `__signature__` raising KeyboardInterrupt,
    a `__doc__` (read as the worker wraps the function) raising GeneratorExit: what the worker
    reads of the room is a name absent, a signature unread, a load failed, never its crash."""
    from labctl.isolation.worker import Worker

    room = write_package(
        tmp_path / "room",
        {
            "__init__.py": """
                class _Odd:
                    def __call__(self, x, axis=-1):
                        return x

                    @property
                    def __signature__(self):
                        raise KeyboardInterrupt

                class _Undocumented:
                    def __call__(self, x, w1, b1, w2, b2):
                        return x

                    @property
                    def __doc__(self):
                        raise GeneratorExit

                softmax = _Odd()
                relu_ffn = _Undocumented()

                def __getattr__(name):
                    raise SystemExit(3)
            """,
        },
    )
    module = loader.load_package(room)
    observed = loader.observe_signatures(module, ("softmax", "rope"))
    assert observed == {
        "softmax": {"present": True, "callable": True, "params": None},
        "rope": {"present": False},
    }
    worker = Worker(privileges="")
    worker.root = room.resolve()
    worker.hold(module, ("softmax",))
    reply = worker.call({"function": "rope"})
    assert reply["error"] == {"kind": "missing", "message": "not exposed by the package"}
    with pytest.raises(CleanRoomError, match=r"importing the clean room failed.*GeneratorExit"):
        worker.hold(module, ("relu_ffn",))
