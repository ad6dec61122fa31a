"""Points from facts: a learner's row, computed in the grader's own process.

`observe_learner` (in a worker) returns what verify and the re-measurement
found; this module turns those facts into one row per learner through the
rubric. A learner that could not be observed (a layout error, a hang that hit
the learner's time limit, a grading process that died, a refusal) gets a row
too: every item scores 0 and the row's `status` and `diagnosis` name why. A
room observed that does not load is `not-loaded`, one the import policy refuses is
`refused`, as verify says (every item 0, the reason named).

A check that could not run for a function (`not-run`: an earlier call of that
function hung) is charged to that function's own item only, never to a `check`
item of every function. The rubric's `scoring` says how a function built on a
failing function is charged: `cascade`, like any failing function;
`independent`, not at all when verify localises its failure to the failing
function it is built on (its item names that function and passes).

Base code earns nothing (`labctl.grade.basecode`): a function that is labctl's own
clean room or the course's starting code scores 0, whatever its checks say.

The row's score is its items' points, less the late penalty (a share of them,
`labctl.grade.late`), plus the TA's adjustments (`labctl.grade.overrides`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from labctl.grade import basecode
from labctl.grade.late import Lateness
from labctl.grade.rubric import Item, Rubric
from labctl.i18n import _

# Row statuses: `graded` (the learner's code was observed; its items say how it did), or
# the named failure that stopped the observation.
GRADED = "graded"
NOT_LOADED = "not-loaded"
FAILURES = ("layout-error", "hang", "crash", "refused")
# What a list of checks or diagnoses aims at: whole ones that fit, the rest named (`listed`).
_LIST_CHARS = 600
# No message is longer (a room's own text inside one is capped, but their number is not);
# a diagnosis sentence longer than the list's aim is kept whole below it.
_MESSAGE_CHARS = 2000


@dataclass
class ItemResult:
    id: str
    kind: str
    target: str | None
    points: float
    max_points: float
    visibility: str
    passed: bool
    message: str
    hidden: bool = False

    def to_json(self) -> dict:
        return {
            "id": self.id,
            "kind": self.kind,
            "target": self.target,
            "points": self.points,
            "max_points": self.max_points,
            "visibility": self.visibility,
            "passed": self.passed,
            "message": self.message,
        }


@dataclass
class Row:
    learner: str
    status: str
    diagnosis: str
    isolation: str | None
    items: list[ItemResult] = field(default_factory=list)
    late: Lateness | None = None
    adjustments: list[dict] = field(default_factory=list)  # {"points", "reason"}
    wall_time_s: float | None = None  # what observing the learner took (None: not known)
    output_bytes: int = 0  # what the learner's room printed in all
    base_code: dict | None = None  # `labctl.grade.basecode`: which functions are base code

    @property
    def items_score(self) -> float:
        return round(sum(i.points for i in self.items), 6)

    def adjusted(self, points: float) -> float:
        """`points` less the late penalty (its share of them), plus the adjustments."""
        percent = self.late.penalty_percent if self.late else 0.0
        extra = sum(a["points"] for a in self.adjustments)
        return round(points * (1 - percent / 100) + extra, 6)

    @property
    def late_penalty(self) -> float:
        percent = self.late.penalty_percent if self.late else 0.0
        return round(self.items_score * percent / 100, 6)

    @property
    def score(self) -> float:
        return self.adjusted(self.items_score)

    @property
    def max_score(self) -> float:
        return round(sum(i.max_points for i in self.items), 6)


def _short(text: str) -> str:
    """`text`, or as many of its words as fit and "…": never cut inside a word."""
    if len(text) <= _MESSAGE_CHARS:
        return text
    head = text[: _MESSAGE_CHARS - 1]
    return (head.rsplit(" ", 1)[0] if " " in head else head) + "…"


def _result(item: Item, passed: bool, message: str) -> ItemResult:
    return ItemResult(
        item.id,
        item.kind,
        item.target,
        item.points if passed else 0.0,
        item.points,
        item.visibility,
        passed,
        _short(message),
        item.hidden,
    )


def _failing(checks: list[dict], keep) -> list[dict]:
    return [c for c in checks if keep(c) and c["status"] != "pass"]


def _function(item: Item, rubric: Rubric, verify: dict) -> tuple[bool, str]:
    scored = set(rubric.function_checks(item))
    bad = _failing(verify["checks"], lambda c: c["function"] == item.target and c["name"] in scored)
    if verify["status"] != "loaded":
        return False, verify["message"]
    if not bad:
        return True, _("passes every check")
    if rubric.scoring == "independent":
        found = next(
            (
                d
                for d in verify["diagnosis"]
                if d["function"] == item.target and d["kind"] == "dependency"
            ),
            None,
        )
        if found is not None:
            return True, _("not charged (scoring: independent): {why}").format(why=found["message"])
    failed = [c for c in bad if c["status"] == "fail"]
    # The diagnosis's own sentence first (the line JUnit shows), unless it may speak of what
    # an item not shown yet checks: it has a clause for each check the function fails.
    said = next((d["message"] for d in verify["diagnosis"] if d["function"] == item.target), "")
    unseen = {i.target for i in rubric.items if i.hidden}
    fails = {
        c["name"]
        for c in verify["checks"]
        if c["function"] == item.target and c["status"] == "fail"
    }
    if fails & unseen or any(target in said for target in unseen):
        said = ""
    head = f"{said}\n" if said else ""
    checks = [(c["name"], f"{c['name']}: {c['message']}") for c in failed or bad]
    return False, head + listed(checks, _LIST_CHARS - len(head))


def listed(parts: list[tuple[str, str]], limit: int = _LIST_CHARS) -> str:
    """Every (name, text) part whole, or as many whole ones as fit in `limit` characters and
    the names of the rest: a learner is never shown some failing checks with the rest
    dropped silently."""
    whole = "; ".join(text for _name, text in parts)
    if len(whole) <= limit:
        return whole
    kept: list[str] = []
    for count, (_name, text) in enumerate(parts):
        rest = [name for name, _text in parts[count:]]
        more = _("and {n} more: {names}").format(n=len(rest), names=", ".join(rest))
        if len("; ".join([*kept, text, more])) > limit and kept:
            return "; ".join([*kept, more])
        kept.append(text)
    return "; ".join(kept)


def _check(item: Item, verify: dict) -> tuple[bool, str]:
    if verify["status"] != "loaded":
        return False, verify["message"]
    mine = [c for c in verify["checks"] if c["name"] == item.target]
    failed = sorted({c["function"] for c in mine if c["status"] == "fail"})
    if failed:
        return False, _("{check} does not pass for: {functions}").format(
            check=item.target, functions=", ".join(failed)
        )
    # Not run for a function: its own item is charged for that, not this one.
    unrun = [c for c in mine if c["status"] == "not-run"]
    if mine and len(unrun) == len(mine):
        return False, _("{check} could not run for any function").format(check=item.target)
    if not unrun:
        return True, _("{check} passes for every function").format(check=item.target)
    return True, _("{check} passes for every function it ran for; not run for {functions}").format(
        check=item.target,
        functions="; ".join(f"{c['function']} ({c['message']})" for c in unrun[:3]),
    )


def _package(verify: dict) -> tuple[bool, str]:
    if verify["status"] != "loaded":
        return False, verify["message"]
    bad = _failing(verify["checks"], lambda c: c["name"] in ("loads", "import-policy"))
    if bad:
        return False, "; ".join(c["message"] for c in bad)
    return True, _("loads and keeps the import policy")


def _metric(item: Item, verify: dict) -> tuple[bool, str]:
    row = next((m for m in verify["metrics"] if m["name"] == item.target), None)
    if row is None:
        return False, _("{metric} was not measured").format(metric=item.target)
    if row.get("actual") is None:
        return False, row.get("note") or _("{metric} was not measured").format(metric=item.target)
    text = _("{metric} = {actual:.6g} (expected {expected})").format(
        metric=item.target, actual=row["actual"], expected=row["expected"]
    )
    return bool(row.get("passed")), text


def _submission(facts: dict) -> tuple[bool, str]:
    found = facts.get("submission")
    if found is None:
        return False, _("no submission (submission.yaml or submission.json)")
    if found["accepted"]:
        return True, _("{file}: valid, every claim reproduced").format(file=found["file"])
    problems = "; ".join(f"{p['field']}: {p['reason']}" for p in found["problems"][:3])
    return False, _("{file} refused: {problems}").format(file=found["file"], problems=problems)


def _diagnosis(verify: dict) -> str:
    if verify["status"] != "loaded":
        return verify["message"]
    found = [
        (d["function"], d["message"]) for d in verify["diagnosis"] if d["kind"] != "not-implemented"
    ]
    stubs = [d["function"] for d in verify["diagnosis"] if d["kind"] == "not-implemented"]
    if stubs:
        said = _("not implemented yet: {functions}").format(functions=", ".join(stubs))
        found.insert(0, ("", said))
    # Whole sentences, and the functions of those that do not fit named: never cut mid-word.
    return listed(found)


def score(learner: str, rubric: Rubric, facts: dict) -> Row:
    """The row of a learner whose code was observed (`facts` from `observe_learner`)."""
    if facts.get("error"):
        return failed_row(
            learner, rubric, "refused", facts["error"]["message"], facts.get("isolation")
        )
    verify = facts["verify"]
    status = {"refused": "refused", "unloadable": NOT_LOADED}.get(verify["status"], GRADED)
    row = Row(learner, status, _short(_diagnosis(verify)), facts.get("isolation"))
    base = facts.get("base_code") if status == GRADED else None
    for item in rubric.items:
        if item.kind == "function":
            passed, message = _function(item, rubric, verify)
        elif item.kind == "check":
            passed, message = _check(item, basecode.without_base(verify, base))
        elif item.kind == "package":
            passed, message = _package(verify)
        elif item.kind == "metric":
            passed, message = _metric(item, verify)
        else:
            passed, message = _submission(facts)
        passed, message = basecode.charge(item, passed, message, verify, base)
        row.items.append(_result(item, passed, message))
    return observed(row, facts)


def observed(row: Row, facts: dict | None) -> Row:
    """`row` with what its observation cost: the time, and how much the room printed."""
    if facts:
        row.wall_time_s = facts.get("wall_time_s")
        row.output_bytes = (facts.get("verify") or {}).get("output_bytes", 0)
        if row.status == GRADED:
            row.base_code = facts.get("base_code")
    return row


def failed_row(
    learner: str, rubric: Rubric, status: str, why: str, isolation: str | None = None
) -> Row:
    """Every item 0: the learner could not be observed, for the reason `why` (a named failure)."""
    row = Row(learner, status, _short(f"{status}: {why}"), isolation)
    why = _("not graded: {status}").format(status=status)
    row.items = [_result(item, False, why) for item in rubric.items]
    return row
