"""Base code earns nothing: the grading rule, applied to a row's items from its facts.

Before a learner's row is scored, the batch reads the learner's clean room
(`labctl.fingerprints.base`: its files, never its code run) and records which of
its contract functions are base code (labctl's own clean room, or a `--base`
folder of the course's starting code, as is or rewritten) in the facts
(`facts["base_code"]`). Then:

- a `function` item whose function is base code earns nothing, and says why;
- a `check` item is judged on the functions that are not base code; it earns
  nothing when every function it checked is;
- when every function the room defines is base code (the room is base code as a
  whole), its `package` and `metric` items earn nothing either: the package that
  loads, and the metrics measured, are the base's;
- the `submission` item follows `evidence submit` (`labctl.evidence.room`),
  which refuses a room with labctl's own functions.

The row keeps the verdict (`Row.base_code`), which the gradebook, the feedback,
the summary, the terminal table and the Canvas export name.
"""

from __future__ import annotations

from pathlib import Path

from labctl.fingerprints.base import PROJECT, Base, base_functions
from labctl.grade.rubric import Item
from labctl.i18n import N_, Msg, _

OWN = N_("labctl's own clean room")


def observe(room: Path, base: Base, functions: list[str]) -> dict:
    """The base-code facts of the clean room at `room`."""
    return base_functions(room, functions, base).to_json()


def _names(facts: dict | None) -> dict[str, dict]:
    return {f["function"]: f for f in (facts or {}).get("functions", [])}


def charge(item: Item, passed: bool, message: str, verify: dict, facts: dict | None):
    """(passed, message) of `item` once the base-code rule is applied."""
    found = _names(facts)
    if not found:
        return passed, message
    if item.kind == "function" and item.target in found:
        at = found[item.target]
        # Whose code it is, for the learner: never a grader's folder path.
        said = (
            N_(
                "base code: {function} ({file}, lines {first}-{last}) is labctl's own clean "
                "room's code, not yours: it earns no points"
            )
            if at["source"] == PROJECT
            else N_(
                "base code: {function} ({file}, lines {first}-{last}) is the course's starting "
                "code, not yours: it earns no points"
            )
        )
        where = {"file": at["file"], "first": at["lines"][0], "last": at["lines"][1]}
        return False, _(said).format(function=item.target, **where)
    if item.kind == "check":
        ran = {c["function"] for c in verify["checks"] if c["name"] == item.target}
        if ran and ran <= found.keys():
            said = Msg("{check}: every function it checks is base code", check=item.target)
            return False, _(said)
    if item.kind in ("package", "metric") and facts.get("whole"):
        return False, _(Msg("base code: the whole clean room is base code: it earns no points"))
    return passed, message


def functions(facts: dict | None) -> frozenset[str]:
    """The functions that are base code (a `check` item gives them no share)."""
    return frozenset(_names(facts))


def flag(facts: dict | None) -> str:
    """The gradebook's flag: each base-code function and whose code it is."""
    found = (facts or {}).get("functions", [])
    if not found:
        return ""
    by_source: dict[str, list[str]] = {}
    for f in found:
        by_source.setdefault(f["source"], []).append(f["function"])
    whole = _("the whole clean room: ") if facts.get("whole") else ""
    return whole + "; ".join(
        f"{', '.join(names)} ({_(OWN) if source == PROJECT else source})"
        for source, names in by_source.items()
    )


def learner_json(facts: dict) -> dict:
    """What the learner's feedback says of it: the functions, their files and lines, and
    whose code they are (labctl's own, or the course's: no grader's folder path)."""
    return {
        "whole": bool(facts.get("whole")),
        "functions": [
            {
                "function": f["function"],
                "file": f["file"],
                "lines": f["lines"],
                "source": "labctl" if f["source"] == PROJECT else "course",
            }
            for f in facts.get("functions", [])
        ],
    }
