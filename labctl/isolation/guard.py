"""The clean-room import policy: the standard library and numpy only.

Two independent layers, so that one trick does not defeat both:

- `scan` reads the source (AST) and names each forbidden import, each dynamic
  import (`__import__`, `importlib.import_module`, `exec`, `eval`) and each
  way to run code outside the process, with file and line.
- `RuntimeGuard` sits on `sys.meta_path` in the process that runs the clean
  room and refuses any import outside the policy, however it is spelled
  (`importlib.import_module("tor" + "ch")` included). It also records each
  refusal, so a clean room that swallows the ImportError is still caught.

Standard library only: this runs beside a learner's code.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from labctl.isolation.loader import PACKAGE_PREFIX, shown_name, source_files

# Standard-library modules that run or load code outside the policy: a clean
# room has no use for them, and each is a way to reach torch out of sight.
FORBIDDEN_STDLIB = frozenset(
    {
        "subprocess",
        "ctypes",
        "multiprocessing",
        "concurrent",
        "runpy",
        "importlib",
        "imp",
        "zipimport",
        "pickle",
        "marshal",
        "shelve",
        "code",
        "codeop",
        "pty",
        "socket",
    }
)
ALLOWED_THIRD_PARTY = frozenset({"numpy"})
DYNAMIC_CALLS = frozenset({"__import__", "exec", "eval", "compile", "breakpoint"})
PROCESS_CALLS = frozenset(
    {"system", "popen", "fork", "forkpty", "posix_spawn", "posix_spawnp"}
    | {f"exec{s}" for s in ("l", "le", "lp", "lpe", "v", "ve", "vp", "vpe")}
    | {f"spawn{s}" for s in ("l", "le", "lp", "lpe", "v", "ve", "vp", "vpe")}
)


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
    return is_stdlib(top) and top not in FORBIDDEN_STDLIB


def own_names(root: Path) -> frozenset[str]:
    """Names a clean room may import absolutely: its own package, by its directory's name."""
    return frozenset() if root.name in ("torch", "labctl", "labs") else frozenset({root.name})


def _call_name(node: ast.Call) -> tuple[str | None, str]:
    func = node.func
    if isinstance(func, ast.Name):
        return None, func.id
    if isinstance(func, ast.Attribute):
        owner = func.value.id if isinstance(func.value, ast.Name) else None
        return owner, func.attr
    return None, ""


# CPython before 3.11.8 keeps the AST converter's recursion counter in state shared by
# threads (gh-106905): two parses at once (verify and faults scan rooms in threads) can
# fail with "AST constructor recursion depth mismatch". One parse at a time.
_PARSING = threading.Lock()


def scan(root: Path) -> list[Violation]:
    """Every statically visible breach of the import policy under `root`."""
    own = own_names(root)
    found: list[Violation] = []
    for file in source_files(root):
        shown = shown_name(f"{root.name}/{file.relative_to(root)}")
        try:
            with _PARSING:
                tree = ast.parse(file.read_text("utf-8", errors="replace"), filename=str(file))
        except SyntaxError as exc:
            found.append(Violation(f"{shown}:{exc.lineno}", f"syntax error: {exc.msg}"))
            continue
        except (RecursionError, MemoryError, SystemError, ValueError) as exc:
            # Source nested past what the parser can hold is refused, not a crash of labctl.
            found.append(Violation(shown, f"cannot be parsed: {type(exc).__name__}"))
            continue
        for node in ast.walk(tree):
            at = f"{shown}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Import):
                found.extend(
                    Violation(at, f"imports {a.name}")
                    for a in node.names
                    if not allowed_top_level(a.name, own)
                )
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if not allowed_top_level(node.module, own):
                    found.append(Violation(at, f"imports from {node.module}"))
            elif isinstance(node, ast.Call):
                owner, name = _call_name(node)
                if owner is None and name in DYNAMIC_CALLS:
                    found.append(Violation(at, f"calls {name}(), which can import or run anything"))
                elif owner in ("importlib", "imp") or name == "import_module":
                    found.append(Violation(at, f"imports dynamically with {owner or ''}.{name}()"))
                elif owner in ("os", "posix", "pty") and name in PROCESS_CALLS:
                    found.append(Violation(at, f"starts a process with {owner}.{name}()"))
    return found


class ForbiddenImport(ImportError):
    """Raised by the runtime guard; an ImportError so it surfaces where imports fail."""


# Frames of the import system itself, skipped when asking who asked for an import.
_MACHINERY = ("<frozen importlib._bootstrap", importlib.__file__)


class RuntimeGuard:
    """Refuses imports outside the policy in the process that runs a clean room.

    Two hooks: `builtins.__import__` sees every import statement the clean room
    executes, cached modules included; a `sys.meta_path` finder sees every
    module not yet loaded, however it is asked for (`importlib`, `__import__`,
    a standard-library helper). A third-party module is refused whoever asks
    (neither numpy nor the standard library needs one); a forbidden
    standard-library module only when the clean room itself asks, since numpy
    and the standard library use some of them internally.
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

    def _importer(self, frame):
        """The nearest frame that is not the import machinery itself."""
        while frame is not None and frame.f_code.co_filename.startswith(_MACHINERY):
            frame = frame.f_back
        return frame

    def _where(self, frame) -> str:
        file = Path(frame.f_code.co_filename)
        if file.is_relative_to(self.root):
            return f"{self.root.name}/{file.relative_to(self.root)}:{frame.f_lineno}"
        return f"{file.name}:{frame.f_lineno}"

    def _refuse(self, frame, what: str, exc_type=ForbiddenImport):
        violation = Violation(self._where(frame), what)
        self.violations.append(violation)
        raise exc_type(f"{violation}: a clean room may import only the standard library and numpy")

    def find_spec(self, fullname, path=None, target=None):
        if allowed_top_level(fullname, self.own):
            return None
        caller = sys._getframe(1)
        room = self._room_frame(caller)
        top = fullname.split(".")[0]
        third_party = not is_stdlib(top)
        importer = self._importer(caller)
        if room is not None and (third_party or (importer is not None and self._in_room(importer))):
            self._refuse(room, f"imports {fullname}")
        if third_party:
            raise ForbiddenImport(f"{fullname} is outside the clean-room import policy")
        return None

    def _guarded_import(self, name, globals=None, locals=None, fromlist=(), level=0):
        caller = sys._getframe(1)
        if level == 0 and self._in_room(caller) and not allowed_top_level(name, self.own):
            self._refuse(caller, f"imports {name}")
        return self._original_import(name, globals, locals, fromlist, level)

    def _guarded_import_module(self, name, package=None):
        # import_module skips both hooks for a module numpy already loaded (ctypes, pickle,
        # marshal, importlib itself): the finder is not asked, and __import__ is not called.
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
        for module in (os, sys.modules.get("posix")):
            for name in PROCESS_CALLS:
                if module is not None and hasattr(module, name):
                    setattr(module, name, self._refuse_process(name))

    def _refuse_process(self, name: str):
        def refuse(*args, **kwargs):
            room = self._room_frame(sys._getframe(1)) or sys._getframe(1)
            self._refuse(room, f"starts a process with os.{name}()", PermissionError)

        return refuse
