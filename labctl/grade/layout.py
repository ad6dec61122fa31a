"""The layout of a class to grade, checked before any learner's code runs.

    SUBMISSIONS_DIR/
      <learner-id>/                one folder per learner; its name is the learner id
        clean_room/                the clean-room package (`__init__.py` and its modules)
        submission.yaml|.json      optional: the learner's evidence submission (at most one),
        ...                        with the artifacts it names, inside the learner's folder,
                                   which is then the learner's git repository

A learner id is letters, digits, `.`, `_` and `-` (it names output files). An
entry that does not fit gets a named layout error in its own row; the batch
goes on. The digest of a learner's inputs covers every file under the folder
(names and bytes; `.git/` and `__pycache__/` aside, which tools rewrite) so a
re-run can skip a learner whose inputs did not change.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from labctl.errors import UsageError
from labctl.i18n import Msg, _

PACKAGE_DIR = "clean_room"
SUBMISSION_NAMES = ("submission.yaml", "submission.yml", "submission.json")
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_SKIPPED_DIRS = {".git", "__pycache__"}
# A learner folder larger than this is refused as a layout error rather than hashed for minutes.
MAX_INPUT_BYTES = 64 << 20


@dataclass(frozen=True)
class LayoutError:
    code: str  # not-a-folder | bad-id | no-clean-room | not-a-package | two-submissions | symlink | too-large
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

    @property
    def stem(self) -> str:
        """The learner's name for output files: its id, or a digest when the id is not one."""
        return stem(self.id)


def stem(learner_id: str) -> str:
    if _ID.match(learner_id):
        return learner_id
    return (
        "invalid-" + hashlib.sha256(learner_id.encode("utf-8", "surrogateescape")).hexdigest()[:12]
    )


def _digest(folder: Path) -> tuple[str, LayoutError | None]:
    digest = hashlib.sha256()
    total = 0
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if _SKIPPED_DIRS & set(relative.parts):
            continue
        if path.is_symlink():
            return "", LayoutError(
                "symlink",
                _(
                    Msg(
                        "{path} is a symbolic link; a submission holds plain files only",
                        path=str(relative),
                    )
                ),
            )
        if not path.is_file():
            continue
        total += path.stat().st_size
        if total > MAX_INPUT_BYTES:
            return "", LayoutError(
                "too-large",
                _(Msg("the folder holds more than {mib} MiB", mib=MAX_INPUT_BYTES >> 20)),
            )
        digest.update(relative.as_posix().encode("utf-8") + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest(), None


def check_learner(entry: Path) -> Learner:
    """What the layout of one entry of the class holds, or its named layout error."""
    name = entry.name
    if not _ID.match(name):
        why = _(Msg("{name} is not a learner id", name=repr(name)))
        return Learner(name, entry, error=LayoutError("bad-id", why))
    if entry.is_symlink() or not entry.is_dir():
        return Learner(
            name,
            entry,
            error=LayoutError("not-a-folder", _("not a folder; each learner has a folder")),
        )
    digest, problem = _digest(entry)
    if problem is not None:
        return Learner(name, entry, error=problem)
    room = entry / PACKAGE_DIR
    submissions = [entry / s for s in SUBMISSION_NAMES if (entry / s).is_file()]
    error = None
    if not room.is_dir():
        error = LayoutError("no-clean-room", _(Msg("no {folder}/ folder", folder=PACKAGE_DIR)))
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
    return Learner(
        name,
        entry,
        clean_room=room if error is None else None,
        submission=submissions[0] if submissions and error is None else None,
        error=error,
        inputs_sha256=digest,
    )


def discover(submissions_dir: Path) -> list[Learner]:
    """Every entry of the class, in name order; refuses a folder that is missing or empty."""
    if not submissions_dir.is_dir():
        raise UsageError(
            Msg("{path} is not a folder of learner folders", path=str(submissions_dir))
        )
    entries = sorted(
        (p for p in submissions_dir.iterdir() if not p.name.startswith(".")), key=lambda p: p.name
    )
    if not entries:
        raise UsageError(Msg("{path} holds no learner folders", path=str(submissions_dir)))
    return [check_learner(p) for p in entries]
