"""The layout of a class to grade, checked before any learner's code runs.

    SUBMISSIONS_DIR/
      <learner-id>/                one folder per learner; its name is the learner id
        clean_room/                the clean-room package (`__init__.py` and its modules),
                                   or those files at the folder's top (a flat upload, when no
                                   folder beside them is a package too)
        submission.yaml|.json      optional: the learner's evidence submission (at most one),
        ...                        with the artifacts it names, inside the learner's folder,
                                   which is then the learner's git repository

A learner id is the folder's name as a platform hands it out, NFC-normalised:
letters, marks and digits of any script, single spaces ("Mary Ann Lee") and
`._-'’,()@+`, starting with a letter or digit. An entry that does not fit gets a
named layout error in its own row (a name that is not even UTF-8 included, shown
escaped); so do two folders whose names are one id once normalised (NFC and NFD
spellings of "Zoë"), both of them; the batch goes on. Output files are named by
the id itself only when it is a plain ASCII name that no other learner's file name
can be (not `learner-<hex>`, not the same as another's but for case); otherwise by a
digest of the folder's real name, which the gradebook's `files` column maps back. A
file at the top is no learner: it is listed as ignored. The digest of a learner's inputs
covers every file under the folder (names and bytes; of `.git/` only the
commit's payload, HEAD, refs and objects; `__pycache__/` aside, which tools
rewrite) so a re-run can skip a learner whose inputs did not change.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import stat
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from labctl import textsafe
from labctl.errors import CleanRoomError, UsageError
from labctl.i18n import Msg, _
from labctl.isolation.loader import check_source_only

PACKAGE_DIR = "clean_room"
SUBMISSION_NAMES = ("submission.yaml", "submission.yml", "submission.json")
# A learner id: letters, marks and digits of any script (NFC), single spaces and the
# punctuation of names and e-mail addresses; an output file is named by the id itself only
# when it is plain ASCII, which every file system and zip tool carries.
ID_PUNCTUATION = "._-'\u2019,()@+"
MAX_ID_LENGTH = 128
_ASCII_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
# The names labctl gives files by digest: a folder named so is digested too, never sharing
# another learner's files.
_DIGEST_STEM = re.compile(r"^(learner|invalid)-[0-9a-f]{12}$")
CACHE, GIT = b"__pycache__", b".git"
# Of `.git/`, what the submission's commit is made of; its config, hooks, index and logs
# are not inputs (tools rewrite them, and none of them changes what was handed in).
_GIT_PAYLOAD = {b"HEAD", b"packed-refs", b"refs", b"objects"}
# A learner folder larger than this is refused as a layout error rather than hashed for minutes.
MAX_INPUT_BYTES = 64 << 20
MAX_ENTRIES = 100_000
MAX_DEPTH = 64


@dataclass(frozen=True)
class LayoutError:
    # not-a-folder | bad-id | no-clean-room | not-a-package | two-submissions | not-source
    # | symlink | special-file | too-deep | too-large | unreadable | ambiguous | same-id
    code: str
    message: str

    def to_json(self) -> dict:
        return {"code": self.code, "message": self.message}


@dataclass(frozen=True)
class Learner:
    """One entry of the class: its id, folder and what the layout check found."""

    id: str
    folder: Path
    clean_room: Path | None = None
    submission: Path | None = None
    error: LayoutError | None = None
    inputs_sha256: str = ""
    room_sha256: str = ""  # the clean room's files alone: two learners' rooms alike
    digested: bool = False  # its files are named by digest whatever its id (`survey`)

    @property
    def stem(self) -> str:
        """The learner's name for output files: its id, or a digest of the folder's real name
        (its bytes: two names shown alike stay apart) when the id is not one."""
        return stem(os.fsdecode(self.folder.name), self.digested)


def _id_character(c: str) -> bool:
    return unicodedata.category(c)[0] in "LMN" or c in ID_PUNCTUATION


def learner_id(name: str) -> str | None:
    """The learner id a folder's name gives (NFC-normalised), or None when it gives none."""
    text = unicodedata.normalize("NFC", name)
    if not text or len(text) > MAX_ID_LENGTH or not text[0].isalnum() or "  " in text:
        return None
    if text.endswith(" "):
        return None
    return text if all(c == " " or _id_character(c) for c in text) else None


def stem(name: str, digested: bool = False) -> str:
    """Output files' name for the folder `name`: a plain ASCII id itself, else (or when
    `digested`) a digest of the name's real bytes (two names that normalise alike stay
    apart; a name shaped like a digest's never takes another learner's)."""
    if _ASCII_ID.match(name) and not _DIGEST_STEM.match(name) and not digested:
        return name
    prefix = "learner-" if learner_id(name) else "invalid-"
    return prefix + hashlib.sha256(os.fsencode(name)).hexdigest()[:12]


def _counted(parts: list[bytes]) -> bool:
    """Whether a file is part of the inputs: not a cache, and of `.git` only its payload."""
    if CACHE in parts:
        return False
    if GIT in parts:
        after = parts[parts.index(GIT) + 1 :]
        return bool(after) and after[0] in _GIT_PAYLOAD
    return True


def _problem(code: str, message: Msg) -> tuple[str, str, LayoutError]:
    return "", "", LayoutError(code, _(message))


def _in_room(relative: tuple[bytes, ...], flat: bool) -> tuple[bytes, ...] | None:
    """`relative`'s path inside the clean room, or None when it is not the room's: under
    clean_room/, or for a flat upload every file but the repository's and the submission."""
    if not flat:
        return relative[1:] if relative[0] == os.fsencode(PACKAGE_DIR) else None
    outside = {b".git", *(os.fsencode(n) for n in SUBMISSION_NAMES)}
    return None if relative[0] in outside else relative


def _digest(folder: Path, flat: bool = False) -> tuple[str, str, LayoutError | None]:
    """(inputs digest, clean-room digest, problem) of a learner's folder.

    The walk is iterative and bounded (MAX_DEPTH, MAX_ENTRIES, MAX_INPUT_BYTES),
    never follows a link and never opens what is not a regular file: a link, a
    FIFO, a socket or a device anywhere (`.git/` and `__pycache__/` included) is
    the named problem. Names are hashed as bytes, so any name is fine.
    """
    pending: list[tuple[str, tuple[bytes, ...]]] = [(str(folder), ())]
    files: list[tuple[tuple[bytes, ...], str]] = []
    total = entries = 0
    while pending:
        path, parts = pending.pop()
        try:
            with os.scandir(path) as listing:
                found = list(listing)
        except OSError as exc:
            where = textsafe.name(b"/".join(parts)) or "."
            return _problem(
                "unreadable", Msg("{path} cannot be read: {error}", path=where, error=exc.strerror)
            )
        for entry in found:
            relative = (*parts, os.fsencode(entry.name))
            shown = textsafe.name(b"/".join(relative))
            entries += 1
            if entries > MAX_ENTRIES:
                return _problem(
                    "too-large", Msg("the folder holds more than {n} entries", n=MAX_ENTRIES)
                )
            if entry.is_symlink():
                return _problem(
                    "symlink",
                    Msg(
                        "{path} is a symbolic link; a submission holds plain files only",
                        path=shown,
                    ),
                )
            if entry.is_dir(follow_symlinks=False):
                if len(relative) >= MAX_DEPTH:
                    return _problem(
                        "too-deep",
                        Msg(
                            "{path} is nested deeper than {depth} folders",
                            path=shown[:200],
                            depth=MAX_DEPTH,
                        ),
                    )
                pending.append((entry.path, relative))
                continue
            info = entry.stat(follow_symlinks=False)
            if not stat.S_ISREG(info.st_mode):
                return _problem(
                    "special-file",
                    Msg(
                        "{path} is a FIFO, socket or device; a submission holds plain files only",
                        path=shown,
                    ),
                )
            if not _counted(list(relative)):
                continue
            total += info.st_size
            if total > MAX_INPUT_BYTES:
                return _problem(
                    "too-large",
                    Msg("the folder holds more than {mib} MiB", mib=MAX_INPUT_BYTES >> 20),
                )
            files.append((relative, entry.path))
    inputs, room = hashlib.sha256(), hashlib.sha256()
    for relative, path in sorted(files):
        content = hashlib.sha256(_read(path)).digest()
        inputs.update(b"/".join(relative) + b"\0" + content)
        inside = _in_room(relative, flat)
        if inside is not None:
            room.update(b"/".join(inside) + b"\0" + content)
    return inputs.hexdigest(), room.hexdigest(), None


def _read(path: str) -> bytes:
    """A regular file's bytes; O_NOFOLLOW and O_NONBLOCK, should it have become anything else."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as handle:
        return handle.read(MAX_INPUT_BYTES + 1)


def check_learner(entry: Path) -> Learner:
    """What the layout of one entry of the class holds, or its named layout error."""
    name = learner_id(entry.name) or textsafe.name(entry.name)
    if learner_id(entry.name) is None:
        why = _(
            Msg(
                "{name} is not a learner id: use letters and digits (any script), single "
                "spaces and {punctuation}, starting with a letter or digit, at most {most} "
                "characters",
                name=repr(name),
                punctuation=" ".join(ID_PUNCTUATION),
                most=MAX_ID_LENGTH,
            )
        )
        return Learner(name, entry, error=LayoutError("bad-id", why))
    if entry.is_symlink() or not entry.is_dir():
        return Learner(
            name,
            entry,
            error=LayoutError("not-a-folder", _("not a folder; each learner has a folder")),
        )
    flat = _flat(entry)
    digest, room_digest, problem = _digest(entry, flat is True)
    if problem is not None:
        return Learner(name, entry, error=problem)
    room = entry if flat is True else entry / PACKAGE_DIR
    submissions = [entry / s for s in SUBMISSION_NAMES if (entry / s).is_file()]
    error = None
    if isinstance(flat, LayoutError):
        error = flat
    elif not room.is_dir():
        error = LayoutError(
            "no-clean-room",
            _(Msg("no {folder}/ folder, and no __init__.py at the top", folder=PACKAGE_DIR)),
        )
    elif not (room / "__init__.py").is_file():
        error = LayoutError(
            "not-a-package",
            _(Msg("{folder}/ has no __init__.py; it must be a package", folder=PACKAGE_DIR)),
        )
    elif len(submissions) > 1:
        error = LayoutError(
            "two-submissions",
            _(
                Msg(
                    "more than one of {names}; keep exactly one",
                    names=", ".join(SUBMISSION_NAMES),
                )
            ),
        )
    else:
        try:
            check_source_only(room)
        except CleanRoomError as exc:
            error = LayoutError("not-source", _(exc.message))
    return Learner(
        name,
        entry,
        clean_room=room if error is None else None,
        submission=submissions[0] if submissions and error is None else None,
        error=error,
        inputs_sha256=digest,
        room_sha256=room_digest if error is None else "",
    )


def _flat(entry: Path) -> bool | LayoutError:
    """Whether the learner uploaded the room's files flat, at the folder's top (Gradescope's
    file upload does): no clean_room/ folder, an `__init__.py` at the top, and no folder
    beside it that is a package too, which would leave the room ambiguous."""
    if (entry / PACKAGE_DIR).exists() or not (entry / "__init__.py").is_file():
        return False
    packages = sorted(
        child.name
        for child in entry.iterdir()
        if child.name not in (".git", "__pycache__")
        and not child.is_symlink()
        and child.is_dir()
        and (child / "__init__.py").is_file()
    )
    if not packages:
        return True
    return LayoutError(
        "ambiguous",
        _(
            Msg(
                "__init__.py at the top beside the package {folder}/: put the clean room in "
                "{room}/ so it is clear which one to grade",
                folder=textsafe.name(packages[0]),
                room=PACKAGE_DIR,
            )
        ),
    )


@dataclass(frozen=True)
class Ignored:
    """An entry of the class folder that is no learner: a file, a FIFO, a socket, a device."""

    name: str
    kind: str  # file | special-file | hidden-folder

    def to_json(self) -> dict:
        return {"name": self.name, "kind": self.kind}


def survey(submissions_dir: Path) -> tuple[list[Learner], list[Ignored]]:
    """Every learner of the class in name order, and the entries that are no learner.

    Refuses a folder that is missing or holds no learner. A folder (or a link,
    which is never followed) is a learner, with its row, unless its name starts with a
    dot (`.git`, `.ipynb_checkpoints`: no platform hands out such an id); that and
    anything else at the top (a stray file, a FIFO, …) is listed as ignored and never
    opened.
    """
    if not submissions_dir.is_dir():
        raise UsageError(
            Msg("{path} is not a folder of learner folders", path=str(submissions_dir))
        )
    with os.scandir(submissions_dir) as listing:
        entries = sorted(listing, key=lambda e: e.name)
    learners, ignored = [], []
    for entry in entries:
        if entry.is_symlink() or entry.is_dir(follow_symlinks=False):
            if entry.name.startswith("."):
                ignored.append(Ignored(textsafe.name(entry.name), "hidden-folder"))
                continue
            learners.append(check_learner(Path(entry.path)))
        else:
            regular = stat.S_ISREG(entry.stat(follow_symlinks=False).st_mode)
            ignored.append(
                Ignored(textsafe.name(entry.name), "file" if regular else "special-file")
            )
    if not learners:
        raise UsageError(Msg("{path} holds no learner folders", path=str(submissions_dir)))
    return _apart(learners), ignored


def _apart(learners: list[Learner]) -> list[Learner]:
    """One learner, one id, one set of files: folders whose names are one id once normalised
    are each refused by name; files whose names differ only in case (one file on macOS or
    Windows) are named by digest."""
    ids: dict[str, list[Learner]] = {}
    stems: dict[str, int] = {}
    for learner in learners:
        ids.setdefault(learner.id, []).append(learner)
        key = learner.stem.casefold()
        stems[key] = stems.get(key, 0) + 1
    found = []
    for learner in learners:
        same = ids[learner.id]
        if len(same) > 1:
            names = ", ".join(ascii(os.fsdecode(other.folder.name)) for other in same)
            why = Msg(
                "{count} folders are the one learner id {id} once NFC-normalised ({names}): "
                "each is refused; rename them apart",
                count=len(same),
                id=repr(learner.id),
                names=names,
            )
            learner = dataclasses.replace(
                learner,
                clean_room=None,
                submission=None,
                room_sha256="",
                error=LayoutError("same-id", _(why)),
            )
        if stems[learner.stem.casefold()] > 1:
            learner = dataclasses.replace(learner, digested=True)
        found.append(learner)
    return found


def discover(submissions_dir: Path) -> list[Learner]:
    """Every learner of the class, in name order (see `survey`)."""
    return survey(submissions_dir)[0]
