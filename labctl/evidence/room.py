"""Which clean room a record speaks for: its identity, and whether it is still that room.

A clean room is named by its path and a sha256 over its files: every entry under
it, by relative path, a regular file by the sha256 of its bytes, a symbolic link
by its target (never followed), anything else (a FIFO, a device) by its kind.
`__pycache__` folders are left out, as the sandbox's copy of a room leaves them
out (they never run there): a run in the process fallback writes them into the
learner's room, which would otherwise read as "changed". labctl's own clean
room is recognised by where it lies and by its files: a learner's verbatim copy
of it is labctl's own too. `evidence submit` also refuses a room whose
functions are labctl's own code, in whole or in part, renamed or not: the
base-code detector `grade` uses (`labctl.fingerprints.base`), so both tools
judge a room alike.

Everything here reads files in labctl's process; nothing a room holds is run.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from importlib import util
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from labctl.contract import declared_version
from labctl.errors import CleanRoomError, UsageError
from labctl.evidence.environment import project_root
from labctl.evidence.models import CleanRoomInfo, files_digest
from labctl.evidence.records import shown_path
from labctl.evidence.repository import resolve_inside
from labctl.i18n import N_, Msg, declared
from labctl.isolation.loader import MAX_DEPTH, MAX_ENTRIES, not_source, shown_name
from labctl.textsafe import shown, valid

if TYPE_CHECKING:
    from labctl.evidence.findings import Report

# A clean room is source code; hashing more than this would take minutes (`copy_room` agrees).
MAX_ROOM_BYTES = 64 << 20
_CACHE = "__pycache__"

_OWN = N_(
    "made with labctl's own clean room (or a copy of it), not yours: it is no evidence of your "
    "code; run the labs with --clean-room my_room"
)


def own_room() -> Path:
    """labctl's packaged clean room, the project's answer."""
    return Path(util.find_spec("labctl.clean_room").origin).parent


def _entry_digest(path: Path, mode: int) -> str:
    if stat.S_ISLNK(mode):
        data = b"symlink\0" + os.fsencode(os.readlink(path))
    elif stat.S_ISREG(mode):
        digest = hashlib.sha256()
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        return digest.hexdigest()
    else:
        data = b"special\0" + str(stat.S_IFMT(mode)).encode()
    return hashlib.sha256(data).hexdigest()


def room_files(root: Path) -> dict[str, str]:
    """{relative path: sha256} of every entry under `root`, links not followed."""
    if not root.exists():
        raise UsageError(Msg("clean room {path}: no such directory", path=str(root)))
    if not root.is_dir():
        raise UsageError(Msg("clean room {path}: not a directory", path=str(root)))
    files: dict[str, str] = {}
    total = 0
    # Folder by folder from a list, not by recursion (`os.walk` recursed once per level: a room
    # 1,100 folders deep was a RecursionError), and no deeper than the loader walks.
    pending: list[tuple[Path, int]] = [(root, 0)]
    while pending:
        here, depth = pending.pop()
        for name in sorted(_read(root, here, os.listdir)):
            path = here / name
            mode = _read(root, path, lambda p: p.lstat().st_mode)
            if stat.S_ISDIR(mode):
                if name == _CACHE:
                    continue
                if depth + 1 >= MAX_DEPTH:
                    raise not_source(root, [(shown_name(str(path.relative_to(root))), "too-deep")])
                pending.append((path, depth + 1))
                continue  # a link to a directory is not a directory to lstat
            if len(files) >= MAX_ENTRIES:
                raise not_source(
                    root, [(shown_name(str(path.relative_to(root))), "too-many-files")]
                )
            total += path.lstat().st_size
            if total > MAX_ROOM_BYTES:
                raise CleanRoomError(
                    Msg(
                        "clean room {path} holds more than {mb} MiB; a clean room is source code",
                        path=shown_path(root),
                        mb=MAX_ROOM_BYTES >> 20,
                    )
                )
            digest = _read(root, path, lambda p: _entry_digest(p, mode))  # noqa: B023
            files[valid(path.relative_to(root).as_posix())] = digest
    return files


def _read(root: Path, path: Path, how):  # type: ignore[no-untyped-def]
    """`how(path)`; an entry of the room that cannot be read (a file of mode 000 to a learner
    who is not root, a folder of /proc) refused by name: it was an internal error."""
    try:
        return how(path)
    except OSError as exc:
        name = path.relative_to(root).as_posix() if path != root else "."
        raise CleanRoomError(
            Msg(
                "clean room {path}: cannot read {name} ({error}); a clean room holds only "
                "files you can read",
                path=shown_path(root),
                name=shown(name),
                error=exc.strerror or str(exc),
            )
        ) from None


def is_own(root: Path, files: dict[str, str]) -> bool:
    """`root` is labctl's own clean room: the packaged one, or a copy of its source."""
    own = own_room()
    if root.resolve() == own.resolve():
        return True
    return files == room_files(own)


def own_functions(root: Path) -> list[str]:
    """The contract functions of the room at `root` that are labctl's own clean room's code
    (renamed, re-laid-out or padded: `labctl.fingerprints.base`), read from its files."""
    from labctl.contract import LATEST, function_names
    from labctl.fingerprints.base import PROJECT, base_functions, load_base

    found = base_functions(root, list(function_names(LATEST)), load_base())
    return [f.function for f in found.functions if f.source == PROJECT]


def room_json(room: CleanRoomInfo | None) -> dict | None:
    """A room's identity as `--json` shows it: path, digest, and whether it is labctl's own."""
    return None if room is None else room.model_dump(include={"path", "sha256", "own", "contract"})


def own_room_note(path: str, option: str) -> Msg:
    """What `run` and `verify` say when the room they ran is labctl's own."""
    return Msg(
        "note: {path} is labctl's own clean room (or a copy of it), not yours: its records are "
        "marked own and are no evidence of your code; name your room with {option} my_room",
        path=path,
        option=option,
    )


def repository_path(root: Path) -> str:
    """How a record names the room at `root`: relative to the repository the record is made
    in (the working directory's), with `..` when the room lies outside it, so that `evidence
    submit` finds it from a submission at the repository's top; absolute only where no
    relative path leads there (another drive)."""
    where, top = root.resolve(), project_root()
    try:
        return valid(where.relative_to(top).as_posix())
    except ValueError:
        pass
    try:
        return valid(Path(os.path.relpath(where, top)).as_posix())
    except ValueError:
        return valid(where.as_posix())


def record_notes(info: CleanRoomInfo | None, option: str) -> list[Msg]:
    """What `run` and `verify` say about the room they just recorded, where a submission of
    these records would be refused, or taken only on this machine."""
    if info is None:
        return []
    # the room's folder is a learner's name: a newline in it would forge a line of labctl's
    path = shown(info.path)
    if info.own:
        return [own_room_note(path, option)]
    # found again as `evidence submit` will look for it, from the repository's top
    found, _ = _room_path(info.path, project_root(), project_root())
    if found is None or files_digest(room_files(found)) != info.sha256:
        return [
            Msg(
                "warning: the records name the clean room {path!r}, which leads nowhere "
                "(a name that is not UTF-8?): evidence submit would refuse them; rename the "
                "folder and run again",
                path=info.path,
            )
        ]
    if info.path.startswith("../") or Path(info.path).is_absolute():
        return [
            Msg(
                "note: the clean room {path} lies outside this repository: evidence submit "
                "finds it on this machine, but a class graded with labctl grade takes only "
                "a room inside the folder handed in",
                path=path,
            )
        ]
    return []


def identify(root: Path) -> CleanRoomInfo:
    """The identity a record carries for the clean room at `root`."""
    files = room_files(root)
    own = is_own(root, files)
    return CleanRoomInfo(
        # labctl's own room is never submitted: it is named as shown, not to be found again
        path=shown_path(root) if own else repository_path(root),
        sha256=files_digest(files),
        own=own,
        files=files,
        contract=declared_version(root),
    )


@dataclass(frozen=True)
class Changes:
    changed: tuple[str, ...]
    added: tuple[str, ...]
    removed: tuple[str, ...]

    def __bool__(self) -> bool:
        return bool(self.changed or self.added or self.removed)

    def message(self) -> Msg:
        """The files named, changed first: `changed a.py; added b.py`."""
        parts = []
        if self.changed:
            parts.append(Msg("changed {files}", files=_some(self.changed)))
        if self.added:
            parts.append(Msg("added {files}", files=_some(self.added)))
        if self.removed:
            parts.append(Msg("removed {files}", files=_some(self.removed)))
        shown = parts[0]
        for part in parts[1:]:
            shown = Msg("{first}; {rest}", first=shown, rest=part)
        return shown


_NAMED = 10  # a room named by the wrong path (`.`, `/etc`) listed thousands in one line


def _some(names: tuple[str, ...]) -> str | Msg:
    if len(names) <= _NAMED:
        return ", ".join(names)
    return Msg("{files} and {n} more", files=", ".join(names[:_NAMED]), n=len(names) - _NAMED)


def changes(recorded: dict[str, str], now: dict[str, str]) -> Changes:
    """What differs between a room's files as recorded and as they are now."""
    return Changes(
        changed=tuple(sorted(n for n in recorded.keys() & now.keys() if recorded[n] != now[n])),
        added=tuple(sorted(now.keys() - recorded.keys())),
        removed=tuple(sorted(recorded.keys() - now.keys())),
    )


def _room_path(text: str, root: Path, near: Path | None) -> tuple[Path | None, str | None]:
    """The directory `text` names, or why it is not acceptable.

    With `near` (the folder of the submission file, on the learner's own machine) the room
    may lie anywhere: an absolute path, else relative to `near`, else to the repository
    `root`. Without it (a class graded) it must lie inside `root`, the folder handed in."""
    if near is None:
        resolved, reason = resolve_inside(text, root)
        if reason:
            return None, reason
        if not resolved.is_dir():
            return None, N_("no such directory in the repository")
        return resolved, None
    if "\x00" in text:
        return None, N_("path holds a NUL character")
    given = Path(text)
    for candidate in [given] if given.is_absolute() else [near / given, root / given]:
        try:
            resolved = candidate.resolve()
        except (OSError, RuntimeError):
            continue
        if resolved.is_dir():
            return resolved, None
    return None, N_(
        "no clean room there, beside the submission file or in the repository: give its path "
        "as seen from the submission file, or an absolute one"
    )


def _named(data: object) -> CleanRoomInfo | None:
    try:
        return CleanRoomInfo.model_validate(data["labctl"]["clean_room"])
    except (KeyError, TypeError, ValidationError):
        return None


def named_room(report: Report, root: Path, near: Path | None = None) -> Path | None:
    """The clean room a validated submission names, as its records saw it, or None with the
    reason refused in `report`: none named, labctl's own, not found (`_room_path`: anywhere
    on the learner's machine with `near`, the submission file's folder; inside `root` for a
    class graded), or its files changed since the runs."""
    here = "labctl.clean_room"
    if report.flagged(here) or report.flagged("labctl"):
        return None
    if report.record is None:
        # Refused elsewhere in the record: a room still named well is re-measured, so that
        # every problem shows at once; none is the schema's problem to name.
        info = _named(report.data)
        if info is None:
            return None
    else:
        info = report.record.labctl.clean_room if report.record.labctl else None
    if info is None or isinstance(info, str):
        report.refuse(
            here,
            N_(
                "names no clean room identity (path, sha256, files): run the labs with "
                "--clean-room my_room and fill the template again"
            ),
        )
        return None
    if info.own:
        report.refuse(here, _OWN)
        return None
    resolved, reason = _room_path(info.path, root, near)
    if reason and near is None:
        report.refuse(
            f"{here}.path",
            Msg(
                "{path!r}: {reason}; a graded submission's clean room is the one in the folder "
                "handed in: run the labs on it and fill the template again",
                path=info.path,
                reason=declared(reason),
            ),
        )
        return None
    if reason:
        report.refuse(
            f"{here}.path", Msg("{path!r}: {reason}", path=info.path, reason=declared(reason))
        )
        return None
    now = room_files(resolved)
    if is_own(resolved, now):
        report.refuse(here, _OWN)
        return None
    copied = own_functions(resolved)
    if copied:
        report.refuse(
            here,
            Msg(
                "{functions} of this clean room are labctl's own clean room's code (renamed or "
                "not), not yours: records made with them are no evidence of your code; write "
                "them yourself and run the labs again",
                functions=", ".join(copied),
            ),
        )
        return None
    diff = changes(info.files, now)
    if diff:
        report.refuse(
            here,
            Msg(
                "the clean room changed since these runs: {changes}; run the labs again and "
                "fill the template again",
                changes=diff.message(),
            ),
        )
        return None
    return resolved
