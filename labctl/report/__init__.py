"""`labctl report`: one self-contained HTML file built from the evidence records on disk.

`collect` reads the records and their figure artifacts, `drawing` plans the figures and
has `plots` draw them with matplotlib (imported only here), in parallel where it can, `html`
writes the document. Nothing is fetched to build it or to open it.
"""

from __future__ import annotations

import os
from pathlib import Path

from labctl.errors import UsageError
from labctl.evidence.environment import now_iso
from labctl.evidence.store import replace_atomically
from labctl.i18n import Msg
from labctl.outpaths import check_out_file

DEFAULT_NAME = "report.html"


def _not_evidence(target: Path, root: Path) -> None:
    """`--out` names no file of the evidence under `root`: `--out` naming a run record (or any
    file in a lab's folder, verify's, the submissions, the manifest) replaced it with the
    report, evidence lost. A file beside the labs' folders is no evidence (`report.html`)."""
    from labctl.evidence.store import MANIFEST_NAME
    from labctl.report.collect import VERIFY

    runs = root / "runs" if (root / "runs").is_dir() else root
    kept = [(runs, 2), (root / VERIFY, 1), (root / "submissions", 1), (root / "quiz", 1)]
    try:
        where = target.resolve()
        inside = any(
            len(where.relative_to(folder.resolve()).parts) >= depth for folder, depth in kept
            if folder.resolve() in where.parents
        ) or where == (root / MANIFEST_NAME).resolve()  # fmt: skip
    except (OSError, RuntimeError):
        return  # a path that cannot be resolved is no file of the evidence
    if inside:
        raise UsageError(
            Msg(
                "--out {path}: a file of the evidence under {root}; the report would replace "
                "it: name a file outside the labs' and verify's folders",
                path=str(target),
                root=str(root),
            )
        )


def build_report(root: Path, out: Path | None = None) -> tuple[Path, dict]:
    """Write the report of the evidence under `root` to `out` (default `root/report.html`);
    return where it is and a summary (labs, verdicts, figures drawn)."""
    from labctl.report import html
    from labctl.report.collect import collect

    target = out if out is not None else root / DEFAULT_NAME
    if out is not None:
        check_out_file(target)
        _not_evidence(target, root)
    evidence = collect(root)
    # Written into --root when no --out is named: a missing --root is named first, as itself.
    if out is None and target.is_dir():
        # check_out_file would name `--out`, an option the learner never gave
        raise UsageError(
            Msg(
                "{path}: the report's default file is a directory; move it, or name another "
                "file with --out",
                path=str(target),
            )
        )
    check_out_file(target)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError(
            Msg("labctl report draws with matplotlib: pip install 'labctl[report]'")
        ) from None
    text = html.document(evidence, now_iso)
    replace_atomically(target, text.encode("utf-8"))
    # a temporary file is created private; a report is for reading, like any file made here
    mask = os.umask(0)
    os.umask(mask)
    target.chmod(0o666 & ~mask)
    summary = {
        "report": str(target),
        "labs": [
            {
                "id": run.lab_id,
                "passed": run.passed,
                "params_default": not run.changed_params,
                "figures": sum(1 for f in run.figures if f.kind != "note"),
                "problems": run.problems,
            }
            for run in evidence.runs
        ],
        "verify_runs": len(evidence.verify_history),
        "unread": [
            {"path": str(u.path), "why": u.why, "on_run": u.on_run} for u in evidence.unread
        ],
    }
    return target, summary
