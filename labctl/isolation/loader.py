"""Load a clean room from any directory as a package, isolated from every other load.

Each load gets a fresh, unique package name, so two directories (or two loads
of one directory) never share modules. Learners often import their own package
by its directory name (`from clean_room.primitives import softmax`); for the
length of the load that name points at the package being loaded, then the
previous owner of the name is put back.

Standard library only: this runs in the process that holds a learner's code.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import itertools
import json
import keyword
import sys
import traceback
from pathlib import Path
from types import ModuleType

from labctl.errors import CleanRoomError, UsageError
from labctl.i18n import Msg

PACKAGE_PREFIX = "_labctl_clean_room_"
_counter = itertools.count()
_NEVER_ALIASED = {"numpy", "labctl", "labs", "torch"}


def unique_name(path: Path) -> str:
    tag = hashlib.sha256(str(path).encode("utf-8")).hexdigest()[:12]
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


def syntax_error(file: str, line: int | None, error: str) -> Msg:
    """A syntax error's message; a worker sends its values, not its text, to be shown translated."""
    return Msg("syntax error in {file}:{line}: {error}", file=file, line=line, error=error)


SYNTAX_ERROR = syntax_error("", 0, "")


def resolve_package_dir(path: str | Path) -> Path:
    """Check that `path` is a directory holding `__init__.py`; return it resolved."""
    resolved = Path(path).resolve()
    if not resolved.exists():
        raise UsageError(Msg("clean room {path}: no such directory", path=str(path)))
    if not resolved.is_dir():
        raise UsageError(Msg("clean room {path}: not a directory", path=str(path)))
    if not (resolved / "__init__.py").is_file():
        raise CleanRoomError(
            Msg("clean room {path}: not a package (no __init__.py)", path=str(path))
        )
    return resolved


def load_package(path: str | Path, keep_alias: bool = False) -> ModuleType:
    """Import the package in directory `path` under a unique name and return it.

    With `keep_alias` the directory's name keeps pointing at this package after
    the load (a process that holds one clean room only), so an import of it at
    call time finds the learner's package rather than another of that name.
    Raises CleanRoomError naming the file and line of a syntax error or of the
    failing statement when the package cannot be imported.
    """
    root = resolve_package_dir(path)
    name = unique_name(root)
    spec = importlib.util.spec_from_file_location(
        name, root / "__init__.py", submodule_search_locations=[str(root)]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    alias = alias_for(root)
    saved = _take_names(alias) if alias else {}
    if alias:
        sys.modules[alias] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        sys.modules.pop(name, None)
        file = Path(exc.filename or "")
        shown = f"{root.name}/{file.relative_to(root)}" if file.is_relative_to(root) else file.name
        raise CleanRoomError(syntax_error(shown, exc.lineno, exc.msg)) from None
    except BaseException as exc:
        sys.modules.pop(name, None)
        if isinstance(exc, KeyboardInterrupt):
            raise
        place = where(root, exc.__traceback__)
        at = f" at {place}" if place else ""
        raise CleanRoomError(
            f"importing the clean room failed{at}: {type(exc).__name__}: {exc}"
        ) from None
    finally:
        if alias and not keep_alias:
            _take_names(alias)
            sys.modules.update(saved)
    return module


def _take_names(alias: str) -> dict[str, ModuleType]:
    """Remove and return `alias` and `alias.*` from sys.modules."""
    taken = {k: v for k, v in sys.modules.items() if k == alias or k.startswith(alias + ".")}
    for key in taken:
        del sys.modules[key]
    return taken


def _jsonable(value) -> object:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return {"repr": repr(value)}
    return value


def observe_signatures(module: ModuleType, names: tuple[str, ...]) -> dict[str, dict]:
    """What `module` exposes for each name, in the shape `contract.check_signatures` reads."""
    observed: dict[str, dict] = {}
    for fn_name in names:
        fn = getattr(module, fn_name, None)
        if fn is None:
            observed[fn_name] = {"present": False}
            continue
        if not callable(fn):
            observed[fn_name] = {"present": True, "callable": False}
            continue
        try:
            parameters = inspect.signature(fn).parameters.values()
        except (TypeError, ValueError):
            observed[fn_name] = {"present": True, "callable": True, "params": None}
            continue
        params = []
        for p in parameters:
            entry: dict = {"name": p.name, "kind": p.kind.name}
            if p.default is not inspect.Parameter.empty:
                entry["default"] = _jsonable(p.default)
            params.append(entry)
        observed[fn_name] = {"present": True, "callable": True, "params": params}
    return observed
