"""The runtime guard holds one rule however an import is asked for: the standard library
and numpy, nothing else.

Each case runs in a fresh interpreter that imports numpy and labctl first (as
the worker does), so some modules (ctypes, pickle, importlib, labctl) are
already in `sys.modules` when the clean room asks for them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from labctl.isolation.guard import RULE

DRIVER = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    import numpy
    from labctl.isolation.guard import RuntimeGuard
    from labctl.isolation.loader import load_package

    root = Path(sys.argv[1])
    guard = RuntimeGuard(root)
    guard.install()
    room = load_package(root)
    outcome = {}
    for name in sys.argv[2:]:
        try:
            room.grab(name)
            outcome[name] = "imported"
        except ImportError as exc:
            outcome[name] = type(exc).__name__
    print(json.dumps({"outcome": outcome, "violations": [str(v) for v in guard.violations]}))
    """
)


def _grab_in_a_worker(tmp_path, body: str, names: list[str]) -> dict:
    room = tmp_path / "room"
    room.mkdir()
    (room / "__init__.py").write_text("from .sneaky import grab\n")
    (room / "sneaky.py").write_text(textwrap.dedent(body))
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, str(room), *names],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(done.stdout)


@pytest.mark.parametrize(
    "body",
    [
        # The spelling: nothing for the source scan to see.
        """
        import sys

        def grab(name):
            return getattr(sys.modules["importlib"], "import_" + "module")(name)
        """,
        # The same through the builtins' table.
        """
        def grab(name):
            table = __builtins__ if isinstance(__builtins__, dict) else vars(__builtins__)
            return table["__imp" + "ort__"](name)
        """,
    ],
    ids=["importlib.import_module", "__import__"],
)
def test_every_package_outside_the_policy_is_refused_by_name_loaded_or_not(tmp_path, body):
    # labctl is loaded in the worker, torch installed, the others need not be: each is refused
    # by its name before anything is looked up.
    names = ["labctl", "labctl.reference", "pandas", "scipy", "sklearn", "torch"]
    seen = _grab_in_a_worker(tmp_path, body, names)
    assert seen["outcome"] == dict.fromkeys(names, "ForbiddenImport")
    # Each refusal is recorded with the clean room's file and line, and the module asked for.
    assert len(seen["violations"]) == len(names)
    for name, violation in zip(names, seen["violations"], strict=True):
        assert violation.startswith("room/sneaky.py:") and violation.endswith(f"imports {name}")


# The standard-library modules the policy refused before it was one rule (issue 21, item 5).
ONCE_REFUSED = [
    "code",
    "codeop",
    "concurrent.futures",
    "ctypes",
    "importlib",
    "marshal",
    "multiprocessing",
    "pickle",
    "pty",
    "runpy",
    "shelve",
    "socket",
    "subprocess",
    "zipimport",
]


def test_the_standard_library_and_numpy_stay_importable_dynamically(tmp_path):
    body = """
    import sys

    def grab(name):
        return getattr(sys.modules["importlib"], "import_" + "module")(name)
    """
    names = ["math", "numpy.linalg", "collections.abc", *ONCE_REFUSED]
    seen = _grab_in_a_worker(tmp_path, body, names)
    assert seen["outcome"] == dict.fromkeys(names, "imported")
    assert seen["violations"] == []


def test_a_package_numpy_tries_on_its_own_is_not_the_rooms_import(tmp_path):
    """numpy.f2py tries charset_normalizer and goes on without it: refused, but numpy's try
    is not the room's (a room importing numpy.f2py was refused for charset_normalizer); the
    room asking for it itself still is."""
    body = """
    import sys

    def grab(name):
        return getattr(sys.modules["importlib"], "import_" + "module")(name)
    """
    seen = _grab_in_a_worker(tmp_path, body, ["numpy.f2py", "charset_normalizer"])
    assert seen["outcome"] == {"numpy.f2py": "imported", "charset_normalizer": "ForbiddenImport"}
    assert [v.split(": ", 1)[1] for v in seen["violations"]] == ["imports charset_normalizer"]


def test_the_refusal_states_the_rule(tmp_path):
    room = tmp_path / "room"
    room.mkdir()
    (room / "__init__.py").write_text("def grab(name):\n    return __import__(name)\n")
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; import numpy\n"
            "from labctl.isolation.guard import RuntimeGuard\n"
            "from labctl.isolation.loader import load_package\n"
            "RuntimeGuard(Path(sys.argv[1])).install()\n"
            "try:\n    load_package(Path(sys.argv[1])).grab('scipy')\n"
            "except ImportError as exc:\n    print(exc)\n",
            str(room),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.strip() == f"room/__init__.py:2: imports scipy: {RULE}"
    assert "standard library, numpy and its own modules" in RULE


def test_the_scan_keeps_results_by_text_and_never_the_text(tmp_path):
    """The static scan keeps each file's violations by a digest of its text: the same room
    scanned again gives the same answer, an edited file is read anew, and no learner's text
    (which may be tens of MiB) is held by the cache."""
    from labctl.isolation import guard

    room = tmp_path / "clean_room"
    room.mkdir()
    module = room / "__init__.py"
    module.write_text("import numpy as np\n" + "# padding\n" * 10_000)
    assert guard.scan(room) == guard.scan(room) == []
    module.write_text("import numpy as np\nimport torch\n" + "# padding\n" * 10_000)
    assert [v.what for v in guard.scan(room)] == ["imports torch"]
    assert all(len(key) == 64 for key in guard._SCANNED)


def test_the_same_text_in_rooms_of_other_names_is_parsed_once_and_judged_by_each_name(
    tmp_path, monkeypatch
):
    """The diagnosis scans each fault room in a folder of a new name: the parse is kept by the
    text, while the file's name and the room's own package (which it may import) are each
    room's."""
    from labctl.isolation import guard

    text = "import numpy as np\nimport alpha.helpers\n" + f"# {tmp_path.name}\n"
    for name in ("alpha", "beta"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(text)
    parsed = []
    monkeypatch.setattr(
        guard, "_imports", lambda t, real=guard._imports: parsed.append(t) or real(t)
    )
    assert guard.scan(tmp_path / "alpha") == []  # its own package
    assert [str(v) for v in guard.scan(tmp_path / "beta")] == [
        "beta/__init__.py:2: imports alpha.helpers"
    ]
    assert len(parsed) == 1
    (tmp_path / "beta" / "__init__.py").write_text("def f(:\n")
    assert [str(v) for v in guard.scan(tmp_path / "beta")] == [
        "beta/__init__.py:1: syntax error: invalid syntax"
    ]
