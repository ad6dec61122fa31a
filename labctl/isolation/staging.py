"""What a process-level worker must read once it is uid 65534, made readable to it.

Started by root, the worker becomes uid 65534 before any learner code loads, at
either level, and refuses to run a room otherwise (`worker.main`). It must then
still read the Python runtime, numpy, its own modules and the clean room. The
sandbox binds each where that uid reaches it. At the process level labctl stages
what that uid cannot reach:

- the room: always a private, world-readable copy (`bwrap.copy_room`), so a room
  folder of mode 0700, or one under a folder only its owner enters, cannot keep
  the worker at uid 0 (on Gradescope that root worker rewrote `run_autograder`);
- the runtime and numpy, when they lie under a folder only root enters (a pyenv
  under /root, mode 0700): a mirror in a world-readable temporary folder, hard
  links where the file system allows (a copy otherwise, and for a file others may
  not read), made once per process. The worker is started from the mirror's
  interpreter, which finds its standard library beside it. The standard library's
  `site-packages` (third-party code) and `test` package are left out.
"""

from __future__ import annotations

import functools
import os
import shutil
import stat
import sysconfig
from pathlib import Path

from labctl.isolation import bwrap
from labctl.isolation.limits import readable_by_others, staged_folder

# Left out of a mirrored standard library: third-party packages, and its own test suite.
_LEFT_OUT = frozenset({"site-packages", "dist-packages", "test"})


def _place(source: Path, dest: Path) -> None:
    """`dest` becomes `source`'s content: a hard link when others may read it, else a copy
    that they may."""
    mode = source.stat().st_mode
    if mode & stat.S_IROTH:
        try:
            os.link(source, dest)
            return
        except OSError:
            pass
    shutil.copyfile(source, dest)
    dest.chmod(0o755 if mode & stat.S_IXUSR else 0o644)


def _mirror(source: Path, dest: Path, left_out: frozenset[str] = frozenset()) -> None:
    """`source`'s tree at `dest`, folders 0755, links kept as links; iterative."""
    pending = [(source, dest)]
    while pending:
        here, there = pending.pop()
        there.mkdir(parents=True, exist_ok=True)
        there.chmod(0o755)
        for entry in os.scandir(here):
            target = there / entry.name
            if entry.is_symlink():
                target.symlink_to(os.readlink(entry.path))
            elif entry.is_dir(follow_symlinks=False):
                if here == source and entry.name in left_out:
                    continue
                pending.append((Path(entry.path), target))
            elif entry.is_file(follow_symlinks=False):
                _place(Path(entry.path), target)


def _needs_mirror(*paths: Path) -> bool:
    return os.geteuid() == 0 and not all(readable_by_others(p) for p in paths)


@functools.cache
def runtime() -> tuple[str, str]:
    """(the interpreter a process-level worker starts, its standard library): the real ones,
    or, where uid 65534 cannot read them, their mirror's."""
    binary = Path(bwrap.python_binary())
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    if not _needs_mirror(binary, stdlib):
        return str(binary), str(stdlib)
    prefix = binary.parent.parent
    top = staged_folder("runtime")
    (top / "bin").mkdir(mode=0o755)
    _place(binary, top / "bin" / binary.name)
    mirrored = top / stdlib.relative_to(prefix)
    _mirror(stdlib, mirrored, _LEFT_OUT)
    for parent in mirrored.parents:
        if parent == top:
            break
        parent.chmod(0o755)
    return str(top / "bin" / binary.name), str(mirrored)


@functools.cache
def numpy_site() -> tuple[str, str]:
    """(the folder a process-level worker finds numpy in, numpy's folder there): the staged
    worker's `site` (links to numpy), or a mirror of numpy where uid 65534 cannot read it."""
    numpy = bwrap.numpy_dir()
    libs = numpy.parent / "numpy.libs"
    if not _needs_mirror(numpy, *([libs] if libs.is_dir() else [])):
        return str(bwrap.staged_worker() / "site"), str(numpy)
    site = staged_folder("numpy")
    _mirror(numpy, site / "numpy")
    if libs.is_dir():
        _mirror(libs, site / "numpy.libs")
    return str(site), str(site / "numpy")
