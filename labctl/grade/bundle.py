"""`labctl grade bundle OUT.zip`: a Gradescope autograder with labctl and the rubric inside.

Gradescope unpacks the zip into `/autograder/source`, runs `setup.sh` once
when it builds the image, and `run_autograder` for each submission, which
must leave `/autograder/results/results.json`. Here:

- `setup.sh` installs Python and bubblewrap (the sandbox) with apt (not git:
  labctl reads a learner's repository as files, `labctl.evidence.gitrepo`), then
  labctl from `labctl-src/` (this labctl's own package, so the grader and the
  autograder run the same code) with a CPU-only torch;
- `run_autograder` runs `labctl grade gradescope` on `/autograder/submission`
  with `rubric.yaml` (the rubric, baked in) and the options given to `bundle`,
  in the language `bundle` ran in (`labctl --lang zh grade bundle`): the text
  Gradescope shows learners (`output`, and the fallback below) is in it.
  Gradescope's `submission_metadata.json` is passed on when there is one: its
  `created_at` is when the learner handed in, and its due dates (the assignment's, the
  learner's own with an extension) rule over the rubric's `due:` (`labctl.grade.late`).
  `AUTOGRADER_ROOT` and `LABCTL` override `/autograder` and the labctl it
  runs, so the script can be tried outside Gradescope. Only labctl's own
  results count: a results.json already there is removed first, labctl writes
  into a private folder of the run, and run_autograder moves it into place
  only when labctl exits 0. Should labctl fail or be killed, run_autograder
  writes a 0-point results.json that names the exit code or the signal.
- learner code never runs as root, nor outside a sandbox: `run_autograder` passes
  `--require-sandbox`, so on an image where bubblewrap cannot start (or a layer of
  it is missing) labctl runs nothing and leaves a 0-point results.json that says
  why (`sandbox_refusal`). A bundle built with `--allow-process-isolation` leaves
  it out: the learner's code then runs at the process level, as uid 65534, which
  is not a security boundary (the grader chose it, by name).
"""

from __future__ import annotations

import io
import json
import shlex
import stat
import zipfile
from importlib import metadata
from pathlib import Path

import yaml

import labctl
from labctl.errors import UsageError
from labctl.grade.rubric import Rubric
from labctl.i18n import N_, Msg, _, declared, language

SETUP = """#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder image (Ubuntu).
set -euo pipefail
apt-get update
apt-get install -y --no-install-recommends python3 python3-venv python3-pip bubblewrap
python3 -m venv /autograder/venv
/autograder/venv/bin/pip install --upgrade pip
# The labs and the reference run on the CPU: the CPU build of torch is enough.
/autograder/venv/bin/pip install --index-url https://download.pytorch.org/whl/cpu "torch{torch}"
/autograder/venv/bin/pip install /autograder/source/labctl-src
"""

RUN = """#!/usr/bin/env bash
# Gradescope runs this for each submission; it must leave results/results.json.
set -uo pipefail
ROOT="${{AUTOGRADER_ROOT:-/autograder}}"
LABCTL="${{LABCTL:-$ROOT/venv/bin/labctl}}"
RESULTS="$ROOT/results/results.json"
mkdir -p "$ROOT/results"
# Only a results.json labctl wrote counts: one already there is removed, and labctl writes
# into a folder of this run's own that only this script moves from, once labctl succeeded.
rm -rf -- "$RESULTS"
PRIVATE="$(mktemp -d "$ROOT/results/.labctl-XXXXXXXX")" || PRIVATE=""
# When the learner handed in is Gradescope's word (created_at), never the submission's own.
METADATA=()
if [ -f "$ROOT/submission_metadata.json" ]; then
    METADATA=(--submission-metadata "$ROOT/submission_metadata.json")
fi
code=1
if [ -n "$PRIVATE" ]; then
    "$LABCTL" --lang {lang} grade gradescope "$ROOT/submission" \\
        --rubric "$ROOT/source/rubric.yaml" \\
        --results "$PRIVATE/results.json" \\
        --work "$ROOT/results/labctl" {options} ${{METADATA[@]+"${{METADATA[@]}}"}}
    code=$?
fi
if [ "$code" -eq 0 ] && [ -f "$PRIVATE/results.json" ] && [ ! -L "$PRIVATE/results.json" ]; then
    mv -f -- "$PRIVATE/results.json" "$RESULTS"
else
    written="$(mktemp "$ROOT/results/.fallback-XXXXXXXX")"
    if [ "$code" -gt 128 ]; then
        signal="$(kill -l "$((code - 128))" 2>/dev/null || echo "$((code - 128))")"
        printf '%s\\n' {killed} > "$written"
    else
        printf '%s\\n' {failed} > "$written"
    fi
    mv -f -- "$written" "$RESULTS"
fi
[ -n "$PRIVATE" ] && rm -rf -- "$PRIVATE"
exit 0
"""

_PYPROJECT = """[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "labctl"
version = "{version}"
requires-python = ">=3.10"
dependencies = {dependencies}

[project.scripts]
labctl = "labctl.cli.main:main"

[tool.setuptools.packages.find]
include = ["labctl*"]

[tool.setuptools.package-data]
labctl = ["data/*.json", "data/*.yaml", "i18n/locale/*/LC_MESSAGES/*"]
"""


def _dependencies() -> list[str]:
    try:
        required = metadata.requires("labctl") or []
    except metadata.PackageNotFoundError:
        required = []
    return [r for r in required if "extra ==" not in r]


def _torch_pin() -> str:
    torch = next((d for d in _dependencies() if d.startswith("torch")), "torch")
    return torch[len("torch") :].strip()


def _fallback(killed: bool) -> str:
    """The results.json run_autograder writes when labctl fails, as a shell word with $code
    (or, when a signal stopped labctl, $signal) in it."""
    marker = "\0"
    if killed:
        message = Msg(
            "The autograder could not grade this submission (labctl was stopped by signal "
            "{signal}). Please tell your instructor.",
            signal=marker,
        )
    else:
        message = Msg(
            "The autograder could not grade this submission (labctl exit code {code}). "
            "Please tell your instructor.",
            code=marker,
        )
    document = json.dumps({"score": 0, "output": _(message), "tests": []}, ensure_ascii=False)
    before, after = document.split(json.dumps(marker)[1:-1])
    variable = '"$signal"' if killed else '"$code"'
    return shlex.quote(before) + variable + shlex.quote(after)


NO_SANDBOX = N_(
    "This autograder runs your code only inside a sandbox, and there is none on this machine "
    "({reason}): nothing was run, so nothing was graded. Please tell your instructor."
)


def sandbox_refusal() -> bytes | None:
    """The 0-point results.json for a machine without a working sandbox with every layer
    (what `grade gradescope --require-sandbox` leaves instead of running learner code), or
    None where the sandbox works."""
    from labctl.isolation import sandbox_status

    status = sandbox_status()
    if status.works and not status.missing:
        return None
    if not status.works:
        reason: str | Msg = status.reason
    else:
        missing = [x for x in status.layers if not x.works]
        reason = Msg(
            "the sandbox lacks {layers}",
            layers="; ".join(f"{x.name}: {_(x.reason)}" for x in missing),
        )
    message = _(declared(NO_SANDBOX, reason=reason))
    document = {"score": 0, "output": message, "tests": []}
    return json.dumps(document, ensure_ascii=False).encode("utf-8")


def _add(archive: zipfile.ZipFile, name: str, data: bytes, executable: bool = False) -> None:
    info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
    mode = 0o755 if executable else 0o644
    info.external_attr = (stat.S_IFREG | mode) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    archive.writestr(info, data)


def bundle(
    out: Path,
    rubric: Rubric,
    timeout_s: float,
    learner_timeout_s: float,
    memory_mb: int,
    isolation: str,
    allow_process: bool = False,
) -> list[str]:
    """Write the autograder zip to `out`; return the names it holds. Its `run_autograder`
    runs learner code only in a working sandbox unless `allow_process`."""
    if out.suffix.lower() != ".zip":
        raise UsageError(Msg("{path}: the autograder is a .zip file", path=str(out)))
    if out.exists() and out.is_dir():
        raise UsageError(Msg("{path} is a folder; give a .zip file name", path=str(out)))
    if isolation == "process" and not allow_process:
        raise UsageError(
            Msg(
                "--isolation process runs learner code outside a sandbox on Gradescope: "
                "say so with --allow-process-isolation"
            )
        )
    options = shlex.join(
        [
            "--timeout",
            f"{timeout_s:g}",
            "--learner-timeout",
            f"{learner_timeout_s:g}",
            "--memory-mb",
            str(memory_mb),
            "--isolation",
            isolation,
            *([] if allow_process else ["--require-sandbox"]),
        ]
    )
    package = Path(labctl.__file__).resolve().parent
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        _add(archive, "setup.sh", SETUP.format(torch=_torch_pin()).encode(), executable=True)
        run = RUN.format(
            options=options,
            lang=language(),
            failed=_fallback(killed=False),
            killed=_fallback(killed=True),
        )
        _add(archive, "run_autograder", run.encode("utf-8"), executable=True)
        rubric_text = yaml.safe_dump(rubric.dump(), sort_keys=False, allow_unicode=True)
        _add(archive, "rubric.yaml", rubric_text.encode("utf-8"))
        pyproject = _PYPROJECT.format(
            version=labctl.__version__, dependencies=repr(_dependencies()).replace("'", '"')
        )
        _add(archive, "labctl-src/pyproject.toml", pyproject.encode("utf-8"))
        for path in sorted(package.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                name = "labctl-src/labctl/" + path.relative_to(package).as_posix()
                _add(archive, name, path.read_bytes())
        names = archive.namelist()
    from labctl.evidence.store import replace_atomically

    out.parent.mkdir(parents=True, exist_ok=True)
    replace_atomically(out, buffer.getvalue())
    return names
