"""Load a clean room from any directory as a package, isolated from every other load.

Each load gets a fresh, unique package name, so two directories (or two loads
of one directory) never share modules. Learners often import their own package
by its directory name (`from clean_room.primitives import softmax`); for the
length of the load that name points at the package being loaded, then the
previous owner of the name is put back.

A clean room is source. Before a load (in labctl's process, and again in the
worker) the room is walked, never following a link and never deeper than
MAX_DEPTH folders, and refused when it holds what Python could import without
source or what no source tree holds: bytecode outside `__pycache__/` (by its name,
or by its content whatever its name: a `.pyc` header or a marshalled code object
in a `.bin`), compiled extensions and shared libraries (by name, or an ELF
header), `.pth` files, importable archives, symbolic links, FIFOs, sockets,
devices, and a `.py` file too large to be read as source (`MAX_SOURCE_BYTES`).
The load itself imports `.py` files only, compiled from their source here: a
`__pycache__/` (stale, or planted beside a stub) is never read; what the room's
code makes of other bytes at run time is the worker's audit hook's (`audit`).

Standard library only: this runs in the process that holds a learner's code.
"""

from __future__ import annotations

import dis
import hashlib
import importlib.machinery
import importlib.util
import inspect
import itertools
import json
import keyword
import os
import re
import stat
import sys
import threading
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from labctl.errors import CleanRoomError, UsageError, refusal_text
from labctl.i18n import Msg

PACKAGE_PREFIX = "_labctl_clean_room_"
_counter = itertools.count()
_NEVER_ALIASED = {"numpy", "labctl", "labs", "torch"}
# Deeper than any source tree; a walk stops there instead of recursing on.
MAX_DEPTH = 32
MAX_ENTRIES = 20_000
_LISTED = 10
# What the import system can load that is not source (every loader's suffixes but `.py`),
# what `site` or zipimport reads, and archives a path entry could be.
NOT_SOURCE = frozenset(
    {s for s in importlib.machinery.all_suffixes() if s != ".py"}
    | {".pyc", ".pyo", ".pyd", ".so", ".pth", ".egg-link", ".zip", ".egg", ".whl", ".pyz"}
)
CACHE_DIR = "__pycache__"
# A `.py` file is parsed in labctl's process (the import scan, similarity, where a crash
# sits), and parsing costs hundreds of times the text: `ast.parse` of 1 MB of `a\n` peaked at
# 893 MiB, and a 60 MB file took labctl to 23 GB. A clean room's file is a few hundred lines
# (the project's largest is 11 KiB): past these, the file is refused unread ("too-large").
MAX_SOURCE_BYTES = 128 << 10
MAX_SOURCES_BYTES = 512 << 10  # all the room's `.py` files together
# Every file's bytes are read for bytecode; a room is source and data, copied whole into
# the sandbox up to this (`bwrap.copy_room` refuses more): past it, "too-large" too.
MAX_ROOM_BYTES = 64 << 20
# A marshalled code object, wherever it sits in a file (after a `.pyc` header, inside a
# marshalled tuple or dict): the code type ("c", with or without marshal's reference flag),
# argcount, posonlyargcount and kwonlyargcount (each under 256), the stack size (and, from
# 3.8 to 3.10, nlocals: under 65,536), the flags (any: `from __future__` sets high bits),
# then the bytecode as a bytes object ("s") of an even, non-zero length (checked after).
_CODE_OBJECT = re.compile(
    rb"[\x63\xe3](?:[\x00-\xff]\x00\x00\x00){3}(?:[\x00-\xff]{2}\x00\x00){1,2}"
    rb"[\x00-\xff]{4}[\x73\xf3](?P<length>[\x00-\xff]{4})"
)
_ELF = b"\x7fELF"
_CHUNK = 1 << 20


def unique_name(path: Path) -> str:
    tag = hashlib.sha256(os.fsencode(path)).hexdigest()[:12]
    return f"{PACKAGE_PREFIX}{tag}_{next(_counter)}"


def alias_for(path: Path) -> str | None:
    """The directory's own name, if a learner could import the package by it."""
    name = path.name
    if not name.isidentifier() or keyword.iskeyword(name):
        return None
    if name in sys.stdlib_module_names or name in _NEVER_ALIASED:
        return None
    return name


def where(path: Path, tb) -> str | None:
    """`dir/file.py:line` of the innermost traceback frame inside the clean room."""
    found = None
    for frame in traceback.extract_tb(tb):
        file = Path(frame.filename)
        if file.is_relative_to(path):
            found = f"{path.name}/{file.relative_to(path)}:{frame.lineno}"
    return found


def traceback_of(exc: BaseException):
    """`exc`'s traceback, past any `__traceback__` a room's exception class defines (a
    property that raises would end the worker with a stack of labctl's own)."""
    return BaseException.__dict__["__traceback__"].__get__(exc)


def class_name(value: object) -> str:
    """The name of `value`'s class, past any `__name__` a metaclass of the room's defines."""
    return type.__dict__["__name__"].__get__(type(value), type)


def described(exc: BaseException) -> tuple[str, str]:
    """(class name, text) of a room's exception, as far as they can be read: an exception whose
    `__str__` raises, or whose class's `__name__` does (a metaclass property), is still the
    room's exception, and must not end the worker with a stack of labctl's own."""
    try:
        text = str(exc)
        if not isinstance(text, str):
            raise TypeError
    except BaseException as unreadable:  # the room's code: whatever it raises
        text = f"(its text could not be read: str() raised {class_name(unreadable)})"
    return class_name(exc), text


def syntax_error(file: str, line: int | None, error: str) -> Msg:
    """A syntax error's message; a worker sends its values, not its text, to be shown translated."""
    return Msg("syntax error in {file}:{line}: {error}", file=file, line=line, error=error)


SYNTAX_ERROR = syntax_error("", 0, "")


def import_failed(place: str | None, error: str) -> Msg:
    """Importing the room raised: where (the room's line, when one is known) and what."""
    if place:
        return Msg("importing the clean room failed at {place}: {error}", place=place, error=error)
    return Msg("importing the clean room failed: {error}", error=error)


def failed_import(root: Path, exc: BaseException) -> CleanRoomError:
    """The room at `root` cannot be taken as a package: its code raised `exc`, whatever it is."""
    kind, text = described(exc)
    return CleanRoomError(import_failed(where(root, traceback_of(exc)), f"{kind}: {text}"))


# The loader's messages a worker sends as their values (typed), never as text to show:
# labctl shows one of these templates, translated, and no other.
SENT_TEMPLATES = frozenset(
    {SYNTAX_ERROR.template, import_failed("x", "").template, import_failed(None, "").template}
)


def shown_name(relative: str) -> str:
    """A path inside the room as valid text: a name's undecodable bytes as `\\xNN`."""
    return os.fsencode(relative).decode("utf-8", "backslashreplace")


@dataclass
class RoomFiles:
    """What a walk of a clean room found: its `.py` files, and what a clean room must not hold."""

    sources: list[Path] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)  # (shown path, kind)


def _kind(entry: os.DirEntry, in_cache: bool) -> str | None:
    """Why `entry` (not a folder) has no place in a clean room by its kind and name, or None."""
    if entry.is_symlink():
        return "symlink"
    mode = entry.stat(follow_symlinks=False).st_mode
    if not stat.S_ISREG(mode):
        return "special-file"
    name = entry.name.lower()
    if in_cache and name.endswith(".pyc"):
        return None  # a cache the loader never reads
    if any(name.endswith(suffix) for suffix in NOT_SOURCE):
        return "not-source"
    return None


def content_kind(path: str | os.PathLike) -> str | None:
    """What code a file holds whatever its name: "bytecode" (a `.pyc`, a marshalled code
    object), "not-source" (an ELF binary: an extension or a shared library), or None.
    Read in chunks that overlap by a code object's header, never whole."""
    tail = b""
    try:
        with open(path, "rb", buffering=0) as handle:
            while chunk := handle.read(_CHUNK):
                if not tail and chunk.startswith(_ELF):
                    return "not-source"
                if not tail and chunk[:4] == importlib.util.MAGIC_NUMBER:
                    return "bytecode"
                for match in _CODE_OBJECT.finditer(tail + chunk):
                    length = int.from_bytes(match["length"], "little")
                    if length > 0 and length % 2 == 0:
                        return "bytecode"
                tail = chunk[-32:]
    except OSError:
        return None
    return None


def walk_room(root: Path) -> RoomFiles:
    """Every `.py` file under `root` and every entry refused, without following a link.

    Iterative and bounded (MAX_DEPTH folders deep, MAX_ENTRIES entries), so a
    folder nested past any recursion limit is one refused entry, not a crash.
    """
    found = RoomFiles()
    pending: list[tuple[Path, int]] = [(root, 0)]
    seen = 0
    read = sources = 0
    while pending:
        folder, depth = pending.pop()
        in_cache = folder.name == CACHE_DIR
        try:
            with os.scandir(folder) as entries:
                listed = sorted(entries, key=lambda e: e.name)
        except OSError as exc:
            found.refused.append((shown_name(str(folder.relative_to(root))), exc.strerror or ""))
            continue
        for entry in listed:
            seen += 1
            relative = shown_name(os.path.relpath(entry.path, root))
            if seen > MAX_ENTRIES:
                found.refused.append((relative, "too-many-files"))
                return found
            if entry.is_dir(follow_symlinks=False):
                if depth + 1 >= MAX_DEPTH:
                    found.refused.append((relative, "too-deep"))
                    continue
                pending.append((Path(entry.path), depth + 1))
                continue
            kind = _kind(entry, in_cache)
            if kind is None and not in_cache:
                size = entry.stat(follow_symlinks=False).st_size
                read += size
                is_source = entry.name.endswith(".py")
                sources += size if is_source else 0
                too_large = is_source and (size > MAX_SOURCE_BYTES or sources > MAX_SOURCES_BYTES)
                if too_large or read > MAX_ROOM_BYTES:
                    kind = "too-large"
                else:
                    kind = content_kind(entry.path)
            if kind is not None:
                found.refused.append((relative, kind))
            elif entry.name.endswith(".py") and not in_cache:
                found.sources.append(Path(entry.path))
    found.sources.sort()
    return found


def source_files(root: Path) -> list[Path]:
    """The `.py` files of a clean room, found without following a link (see `walk_room`)."""
    return walk_room(root).sources


def check_source_only(root: Path) -> None:
    """Refuse a room that holds anything but source (see the module docstring)."""
    refused = walk_room(root).refused
    if refused:
        raise not_source(root, refused)


def not_source(root: Path, refused: list[tuple[str, str]]) -> CleanRoomError:
    """The refusal of the room at `root` for its `refused` entries, each named with its kind."""
    listed = "; ".join(f"{path} ({kind})" for path, kind in refused[:_LISTED])
    more = len(refused) - _LISTED
    return CleanRoomError(
        Msg(
            "clean room {room} holds what is not source, refused: {listed}{more}; a clean room "
            "is .py files (and data), no bytecode, binaries, links or special files",
            room=shown_name(root.name),
            listed=listed,
            more=f"; … {more} more" if more > 0 else "",
        )
    )


def resolve_package_dir(path: str | Path) -> Path:
    """Check that `path` is a directory holding `__init__.py` and only source; return it
    resolved."""
    resolved = existing_folder(path)
    if not (resolved / "__init__.py").is_file():
        raise CleanRoomError(
            Msg("clean room {path}: not a package (no __init__.py)", path=str(path))
        )
    check_source_only(resolved)
    return resolved


def existing_folder(path: str | Path) -> Path:
    """`path` resolved, where it names a folder; else the UsageError a command exits 2 with."""
    try:
        resolved = Path(path).resolve()
        found, folder = resolved.exists(), resolved.is_dir()
    except (OSError, RuntimeError) as exc:  # a name too long, a loop of links
        raise UsageError(
            Msg(
                "clean room {path}: cannot be read ({error})",
                path=str(path),
                error=refusal_text(exc),
            )
        ) from None
    if not found:
        raise UsageError(Msg("clean room {path}: no such directory", path=str(path)))
    if not folder:
        raise UsageError(Msg("clean room {path}: not a directory", path=str(path)))
    return resolved


_SYNTAX_ERRORS = (SyntaxError, IndentationError, TabError)
_NUL_BYTES = "the file holds NUL bytes (is it saved as UTF-16? save it as UTF-8)"


class SourceOnlyLoader(importlib.machinery.SourceFileLoader):
    """Compiles the `.py` file itself: no bytecode cache is read or written."""

    def get_code(self, fullname):
        path = self.get_filename(fullname)
        source = self.get_data(path)
        if b"\0" in source:
            # compile() refuses these naming no file and no line
            line = source.count(b"\n", 0, source.index(b"\0")) + 1
            raise SyntaxError(_NUL_BYTES, (path, line, None, None))
        return self.source_to_code(source, path)


# Folders of loaded clean rooms: imports from them find `.py` files only (`_room_finder`).
_ROOTS: set[str] = set()
_HOOK_LOCK = threading.Lock()
_source_finder = importlib.machinery.FileFinder.path_hook((SourceOnlyLoader, [".py"]))


def _in_a_room(entry: str) -> bool:
    return any(entry == r or entry.startswith(r + os.sep) for r in _ROOTS)


def _room_finder(entry: str):
    """The path hook of clean-room folders: a finder that knows `.py` and nothing else."""
    if not _in_a_room(entry):
        raise ImportError("not a clean-room folder")
    return _source_finder(entry)


def _source_only(root: Path) -> None:
    """From now on, imports under `root` load source only, never a cache or a binary."""
    with _HOOK_LOCK:
        _ROOTS.add(str(root))
        if _room_finder not in sys.path_hooks:
            sys.path_hooks.insert(0, _room_finder)
        for entry in [e for e in sys.path_importer_cache if _in_a_room(e)]:
            del sys.path_importer_cache[entry]


def load_package(path: str | Path, in_worker: bool = False) -> ModuleType:
    """Import the package in directory `path` under a unique name and return it.

    `in_worker`: this process holds this one clean room only, in a session of its
    own. The directory's name keeps pointing at this package after the load, so
    an import of it at call time finds the learner's package rather than another
    of that name; and no Ctrl-C reaches it, so a KeyboardInterrupt is the room's
    own, a failed import like any other (elsewhere it is the user's, and goes on).
    Raises CleanRoomError naming the file and line of a syntax error or of the
    failing statement when the package cannot be imported.
    """
    root = resolve_package_dir(path)
    name = unique_name(root)
    _source_only(root)
    init = root / "__init__.py"
    spec = importlib.util.spec_from_file_location(
        name, init, loader=SourceOnlyLoader(name, str(init)), submodule_search_locations=[str(root)]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    alias = alias_for(root)
    saved = _take_names(alias) if alias else {}
    if alias:
        sys.modules[alias] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:
        sys.modules.pop(name, None)
        if isinstance(exc, KeyboardInterrupt) and not in_worker:
            raise
        # The compiler's own syntax errors name their file; one the room raised (of its own
        # class, whose attributes may raise, or naming no file) is a failed import like any.
        if type(exc) in _SYNTAX_ERRORS and isinstance(exc.filename, str):
            file = Path(exc.filename)
            shown = (
                f"{root.name}/{file.relative_to(root)}" if file.is_relative_to(root) else file.name
            )
            raise CleanRoomError(syntax_error(shown, exc.lineno, exc.msg)) from None
        raise failed_import(root, exc) from None
    finally:
        if alias and not in_worker:
            _take_names(alias)
            sys.modules.update(saved)
    return module


def _take_names(alias: str) -> dict[str, ModuleType]:
    """Remove and return `alias` and `alias.*` from sys.modules."""
    # A copy taken at once: another thread may import while this one walks.
    found = sys.modules.copy().items()
    taken = {k: v for k, v in found if k == alias or k.startswith(alias + ".")}
    for key in taken:
        del sys.modules[key]
    return taken


def _jsonable(value) -> object:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return {"repr": repr(value)}
    return value


# What `attribute` gives for a name the module does not have: a room may hold None itself.
ABSENT = object()


def attribute(module: ModuleType, name: str):
    """`module.name`, or ABSENT: a module `__getattr__` of the room's may raise anything, a
    SystemExit or a KeyboardInterrupt too, and the worker must live to say so."""
    try:
        return getattr(module, name, ABSENT)
    except BaseException:
        return ABSENT


def observe_signatures(module: ModuleType, names: tuple[str, ...]) -> dict[str, dict]:
    """What `module` exposes for each name, in the shape `contract.check_signatures` reads."""
    observed: dict[str, dict] = {}
    for fn_name in names:
        # The room's own code answers each of these (a module __getattr__, a __signature__
        # property, a default's __repr__): whatever it raises, a SystemExit too, is a signature
        # that cannot be read, not a crash of the worker whose traceback labctl then showed as
        # the room's output.
        fn = attribute(module, fn_name)
        if fn is ABSENT:
            observed[fn_name] = {"present": False}
            continue
        if not callable(fn):
            observed[fn_name] = {"present": True, "callable": False}
            continue
        try:
            params = []
            for p in inspect.signature(fn).parameters.values():
                entry: dict = {"name": p.name, "kind": p.kind.name}
                if p.default is not inspect.Parameter.empty:
                    entry["default"] = _jsonable(p.default)
                params.append(entry)
            stub = is_stub(fn)
        except BaseException:
            observed[fn_name] = {"present": True, "callable": True, "params": None}
            continue
        observed[fn_name] = {"present": True, "callable": True, "params": params, "stub": stub}
    return observed


def is_stub(fn) -> bool:
    """A function that can only raise NotImplementedError, as `clean-room init` writes it.

    Its code names nothing but NotImplementedError and never returns. Advisory only (what
    `contract check` counts as not written yet): verify's calls are what judge a function.
    """
    code = getattr(fn, "__code__", None)
    if code is None or code.co_names != ("NotImplementedError",):
        return False
    return not any(i.opname.startswith("RETURN") for i in dis.get_instructions(code))
