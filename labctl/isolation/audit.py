"""Code that is not the clean room's source, refused in the worker as it is made.

A clean room is source: the static scan, similarity and a person read its `.py`
files, so the code that runs must be compiled from them. The loader's walk refuses a
file that holds bytecode whatever its name (`loader.walk_room`); this audit hook
(`sys.addaudithook`, installed before the room loads) refuses what the room's code
would make of other bytes at run time:

- `marshal.loads` / `marshal.load` (what `SourcelessFileLoader`, a `.pyc` and any
  hand-made bytecode go through), unless the import system itself is reading a
  cached module of the runtime, numpy or the worker (a path on `sys.path` as the
  worker started, never the room);
- `types.CodeType(...)` and `code.replace(...)` (`code.__new__`) called by the
  room's code (`types.coroutine`, the runtime's own, may);
- compiling or executing code from a file that is neither one of the room's `.py`
  files nor the runtime's, numpy's or the worker's (`SourceFileLoader` on the room's
  `impl.txt`, `runpy.run_path`, labctl's reference read from the repository), or
  whose source is the exact text of one of the room's other files
  (`exec(open("impl.txt").read())`);
- `gc.get_objects`, `gc.get_referrers`, `gc.get_referents`: the way to this hook's
  own state.

Python has no call that removes an audit hook, and this one keeps its state in its
own closure, bound when it is installed. A refusal raises `ForbiddenCode` where the
code asked and is recorded (`taken`), so a room that swallows the exception is still
reported, as the import guard's refusals are. Code a room builds from data at run
time (a decoded string) is compiled source, which no check of files can see; a room
that writes the interpreter's memory through ctypes is past any in-process check:
the sandbox is the boundary.

Standard library only: this runs in the process that holds a learner's code.
"""

from __future__ import annotations

import hashlib
import os
import sys
import types
import zipimport
from collections.abc import Callable
from importlib import _bootstrap_external, machinery
from pathlib import Path

REFUSED = "makes code that is not the clean room's source"
# What the hook watches; every other event passes at the cost of one set lookup.
_EVENTS = frozenset(
    {
        "marshal.loads",
        "marshal.load",
        "code.__new__",
        "compile",
        "exec",
        "gc.get_objects",
        "gc.get_referrers",
        "gc.get_referents",
    }
)
# A room file whose whole text is compiled is compared by size, then by digest.
_MAX_COMPARED = 64 << 20


class ForbiddenCode(RuntimeError):
    """Raised where a clean room makes code that is not its source."""


def _other_files(root: Path, sources: frozenset[str]) -> dict[int, list[tuple[str, str]]]:
    """{size: [(shown name, sha256)]} of the room's regular files that are not its sources."""
    found: dict[int, list[tuple[str, str]]] = {}
    pending = [root]
    while pending:
        folder = pending.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                if entry.name != "__pycache__":
                    pending.append(Path(entry.path))
                continue
            if not entry.is_file(follow_symlinks=False) or entry.path in sources:
                continue
            size = entry.stat(follow_symlinks=False).st_size
            if size > _MAX_COMPARED:
                continue
            try:
                with open(entry.path, "rb") as handle:
                    digest = hashlib.sha256(handle.read()).hexdigest()
            except OSError:
                continue
            shown = os.path.relpath(entry.path, root.parent)
            found.setdefault(size, []).append((shown, digest))
    return found


def install(root: Path, sources: list[Path]) -> Callable[[], list[str]]:
    """Refuse, from now on in this process, code that is not the room at `root`'s source
    (`sources`, its `.py` files). Returns `taken`: the refusals since its last call."""
    room = os.path.realpath(root)
    inside = room + os.sep
    own = frozenset(os.path.realpath(p) for p in sources)
    others = _other_files(Path(room), own)
    # The folders of sys.path as the worker started (the runtime, numpy, the worker's own
    # modules), as written and resolved: the process level finds numpy through a link.
    entries = [p for p in sys.path if p]
    trusted = tuple(
        {
            form + os.sep
            for p in entries
            for form in (os.path.normpath(p), os.path.realpath(p))
            if not os.path.realpath(p).startswith(inside) and os.path.realpath(p) != room
        }
    )
    found: list[str] = []
    reported = [0]
    # Bound now: the room may rebind any module attribute before the hook next runs.
    realpath, normpath, getframe = os.path.realpath, os.path.normpath, sys._getframe
    sha256 = hashlib.sha256
    code_type, fspath, str_type = types.CodeType, os.fspath, str
    file_loader_get_data = _bootstrap_external.FileLoader.get_data
    loaders = (machinery.SourceFileLoader, machinery.SourcelessFileLoader)
    zip_type = zipimport.zipimporter
    room_name = Path(room).name

    def where(frame) -> str:
        while frame is not None:
            file = frame.f_code.co_filename
            if file.startswith(inside):
                return f"{room_name}/{file[len(inside) :]}:{frame.f_lineno}"
            frame = frame.f_back
        return room_name

    def refuse(what: str) -> None:
        text = f"{where(getframe(2))}: {REFUSED} ({what})"
        found.append(text)
        raise ForbiddenCode(text)

    def is_trusted(path: object) -> bool:
        if not isinstance(path, str_type):
            return False
        resolved = realpath(path)
        if resolved.startswith(inside):
            return False
        return normpath(path).startswith(trusted) or resolved.startswith(trusted)

    def made_by_trusted_code() -> bool:
        """The code that raised the event is the runtime's, numpy's or the worker's own
        (`types.coroutine` replaces a code object's flags), not the room's."""
        return is_trusted(getframe(2).f_code.co_filename)  # 0: this, 1: the hook

    def importing_a_trusted_module() -> bool:
        """The import system itself is unmarshalling a cached module of a trusted path."""
        frame = getframe(2)
        while frame is not None:
            code = frame.f_code
            if code.co_filename == "<frozen importlib._bootstrap_external>" and (
                code.co_name == "get_code"
            ):
                local = frame.f_locals
                loader = local.get("self")
                path = local.get("bytecode_path") or local.get("path")
                return (
                    type(loader) in loaders
                    and type(loader).get_data is file_loader_get_data
                    and is_trusted(path)
                )
            if code.co_filename == "<frozen zipimport>" and code.co_name == "_unmarshal_code":
                loader = frame.f_locals.get("self")
                return type(loader) is zip_type and is_trusted(loader.archive)
            frame = frame.f_back
        return False

    def named_file(source: object) -> str | None:
        """The room's file (not a source) whose bytes `source` is, if any."""
        if not isinstance(source, bytes | bytearray):
            return None
        candidates = others.get(len(source))
        if not candidates:
            return None
        digest = sha256(source).hexdigest()
        return next((shown for shown, d in candidates if d == digest), None)

    def not_a_source(filename: object) -> str | None:
        """`filename` shown, when it names a file that is neither one of the room's `.py`
        files nor the runtime's, numpy's or the worker's (`<string>` and the like name none)."""
        try:
            name = fspath(filename)
        except TypeError:
            return None
        if isinstance(name, bytes) or (name.startswith("<") and name.endswith(">")):
            return None
        resolved = realpath(name)
        if resolved.startswith(inside):
            return None if resolved in own else f"{room_name}/{resolved[len(inside) :]}"
        return None if is_trusted(name) else name

    def hook(event: str, args: tuple) -> None:
        if event not in _EVENTS:
            return
        if event in ("marshal.loads", "marshal.load"):
            if not importing_a_trusted_module():
                named = named_file(args[0]) if args else None
                refuse(f"{event} of {named}" if named else event)
        elif event == "code.__new__":
            if not made_by_trusted_code():
                refuse("a code object built by hand: types.CodeType or code.replace")
        elif event == "compile":
            named = not_a_source(args[1]) or named_file(args[0])
            if named:
                refuse(f"compiles {named}")
        elif event == "exec":
            code = args[0]
            if isinstance(code, code_type):
                named = not_a_source(code.co_filename)
                if named:
                    refuse(f"runs code from {named}")
        else:
            refuse(f"{event}: the worker's own objects")

    sys.addaudithook(hook)

    def taken() -> list[str]:
        fresh = found[reported[0] :]
        reported[0] = len(found)
        return fresh

    return taken
