"""The clean-room import policy: the standard library and numpy, and nothing else.

One rule (`RULE`), which the refusal states: a clean room may import the
Python standard library, numpy and its own modules; any other package is
refused, by name. What code then does with the standard library (files,
processes, the network) is the sandbox's business, not this policy's: the
sandbox is the boundary. Two independent layers hold the rule, so that one
trick does not defeat both:

- `scan` reads the source (AST) and names each import of another package,
  with file and line: an import statement, or `importlib.import_module` /
  `__import__` called with the name written out. A name computed at run
  time is left to the guard.
- `RuntimeGuard` sits on `sys.meta_path` and `builtins.__import__` in the
  process that runs the clean room and refuses any other package however it
  is asked for (`importlib.import_module("tor" + "ch")`, `exec`'d source
  included). It also records each refusal, so a clean room that swallows
  the ImportError is still caught.

Standard library only: this runs beside a learner's code.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import importlib
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from labctl import pysource
from labctl.i18n import N_
from labctl.isolation.loader import PACKAGE_PREFIX, shown_name, source_files

# The one rule, as the refusal, the contract's reading in docs/learners.md and the runtime
# guard's ImportError all state it.
RULE = N_(
    "a clean room may import the Python standard library, numpy and its own modules; "
    "any other package is refused"
)
ALLOWED_THIRD_PARTY = frozenset({"numpy"})
# Calls that import the module they are given by name, as `import` does.
IMPORT_CALLS = frozenset({"__import__", "import_module"})


@dataclass(frozen=True)
class Violation:
    where: str
    what: str

    def __str__(self) -> str:
        return f"{self.where}: {self.what}"


def is_stdlib(top: str) -> bool:
    """Part of the standard library: `sysconfig`'s generated `_sysconfigdata_*` is, unlisted."""
    return top in sys.stdlib_module_names or top.startswith("_sysconfigdata_")


def allowed_top_level(name: str, own: frozenset[str]) -> bool:
    top = name.split(".")[0]
    if top in own or top in ALLOWED_THIRD_PARTY or top.startswith(PACKAGE_PREFIX):
        return True
    return is_stdlib(top)


def own_names(root: Path) -> frozenset[str]:
    """Names a clean room may import absolutely: its own package, by its directory's name."""
    return frozenset() if root.name in ("torch", "labctl", "labs") else frozenset({root.name})


def _imported_by_call(node: ast.Call) -> str | None:
    """The module an `__import__(...)` or `importlib.import_module(...)` call names, when the
    name is written out; None for any other call, or a name computed at run time."""
    func = node.func
    name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
    if name not in IMPORT_CALLS or not node.args:
        return None
    first = node.args[0]
    if isinstance(first, ast.Constant) and isinstance(first.value, str):
        return first.value
    return None


def scan(root: Path) -> list[Violation]:
    """Every statically visible import of a package outside the policy under `root`."""
    own = own_names(root)
    found: list[Violation] = []
    for file in source_files(root):
        shown = shown_name(f"{root.name}/{file.relative_to(root)}")
        found.extend(_scan_file(shown, file.read_text("utf-8", errors="replace"), own))
    return found


# Each file's imports by a digest of its text alone (never the text: a learner's file may be
# tens of MiB). The diagnosis scans the same fault-room modules at every seed it meets, each
# time in a folder of another name, so neither the file's shown name nor the room's own
# names are part of the key: they are applied to the imports found, which is cheap.
_SCANNED: dict[str, tuple[_Import, ...] | Violation] = {}
_SCANNED_MAX = 4096
_SCANNED_LOCK = threading.Lock()


@dataclass(frozen=True)
class _Import:
    line: int
    what: str  # "imports" or "imports from"
    module: str


def _scan_file(shown: str, text: str, own: frozenset[str]) -> list[Violation]:
    key = hashlib.sha256(text.encode("utf-8")).hexdigest()
    with _SCANNED_LOCK:
        found = _SCANNED.get(key)
    if found is None:
        found = _imports(text)
        with _SCANNED_LOCK:
            if len(_SCANNED) >= _SCANNED_MAX:
                del _SCANNED[next(iter(_SCANNED))]
            _SCANNED[key] = found
    if isinstance(found, Violation):
        # Unparsable: the file's own name goes in front of the line the parser stopped at.
        return [Violation(f"{shown}{found.where}", found.what)]
    return [
        Violation(f"{shown}:{i.line}", f"{i.what} {i.module}")
        for i in found
        if not allowed_top_level(i.module, own)
    ]


def _imports(text: str) -> tuple[_Import, ...] | Violation:
    """Every absolute import the text names, or why it cannot be read (`where` holds only
    what follows the file's name)."""
    try:
        tree = pysource.parse(text, "<room>")
    except SyntaxError as exc:
        return Violation(f":{exc.lineno}", f"syntax error: {exc.msg}")
    except pysource.UNPARSABLE as exc:
        # Source nested past what the parser can hold is refused, not a crash of labctl.
        return Violation("", f"cannot be parsed: {type(exc).__name__}")
    found: list[_Import] = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import):
            found.extend(_Import(line, "imports", a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append(_Import(line, "imports from", node.module))
        elif isinstance(node, ast.Call):
            name = _imported_by_call(node)
            if name and not name.startswith("."):
                found.append(_Import(line, "imports", name))
    return tuple(found)


def _numpy_asks(frame) -> bool:
    """Whether the import statement behind `frame` is numpy's own code: an optional package
    numpy tries (`numpy.f2py` tries charset_normalizer) is refused, but it is numpy's try, not
    the room's, and numpy goes on without it."""
    while frame is not None and (
        frame.f_code.co_filename.startswith("<frozen importlib")
        or frame.f_code.co_filename == __file__  # the guard's own __import__
    ):
        frame = frame.f_back
    numpy = sys.modules.get("numpy")
    if frame is None or numpy is None or numpy.__file__ is None:
        return False
    return Path(frame.f_code.co_filename).is_relative_to(Path(numpy.__file__).parent)


class ForbiddenImport(ImportError):
    """Raised by the runtime guard; an ImportError so it surfaces where imports fail."""


class RuntimeGuard:
    """Refuses imports outside the policy in the process that runs a clean room.

    Two hooks: `builtins.__import__` sees every import statement the clean room
    executes, cached modules included; a `sys.meta_path` finder sees every
    module not yet loaded, however it is asked for (`importlib`, `__import__`,
    a standard-library helper). A package outside the policy is refused whoever
    asks (neither numpy nor the standard library needs one); `import_module` is
    wrapped too, since it skips both hooks for a module already loaded (labctl's
    own, in the worker).
    """

    def __init__(self, root: Path):
        self.root = root
        self.own = own_names(root)
        self.violations: list[Violation] = []
        self._original_import = builtins.__import__
        self._original_import_module = importlib.import_module

    def _in_room(self, frame) -> bool:
        return Path(frame.f_code.co_filename).is_relative_to(self.root)

    def _room_frame(self, frame):
        """The innermost frame of the clean room's own code on the stack, if any."""
        while frame is not None and not self._in_room(frame):
            frame = frame.f_back
        return frame

    def _where(self, frame) -> str:
        file = Path(frame.f_code.co_filename)
        if file.is_relative_to(self.root):
            return f"{self.root.name}/{file.relative_to(self.root)}:{frame.f_lineno}"
        return f"{file.name}:{frame.f_lineno}"

    def _refuse(self, frame, what: str):
        violation = Violation(self._where(frame), what)
        self.violations.append(violation)
        raise ForbiddenImport(f"{violation}: {RULE}")

    def find_spec(self, fullname, path=None, target=None):
        if allowed_top_level(fullname, self.own):
            return None
        caller = sys._getframe(1)
        room = self._room_frame(caller)
        if room is not None and not _numpy_asks(caller):
            self._refuse(room, f"imports {fullname}")
        raise ForbiddenImport(f"{fullname}: {RULE}")

    def _guarded_import(self, name, globals=None, locals=None, fromlist=(), level=0):
        caller = sys._getframe(1)
        if level == 0 and self._in_room(caller) and not allowed_top_level(name, self.own):
            self._refuse(caller, f"imports {name}")
        return self._original_import(name, globals, locals, fromlist, level)

    def _guarded_import_module(self, name, package=None):
        caller = sys._getframe(1)
        if (
            not name.startswith(".")
            and self._in_room(caller)
            and not allowed_top_level(name, self.own)
        ):
            self._refuse(caller, f"imports {name}")
        return self._original_import_module(name, package)

    def install(self) -> None:
        sys.meta_path.insert(0, self)
        builtins.__import__ = self._guarded_import
        importlib.import_module = self._guarded_import_module
