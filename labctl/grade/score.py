"""Points from facts: a learner's row, computed in the grader's own process.

`observe_learner` (in a worker) returns what verify and the re-measurement
found; this module turns those facts into one row per learner through the
rubric. A learner that could not be observed (a layout error, a hang that hit
the learner's time limit, a grading process that died, a refusal) gets a row
too: every item scores 0 and the row's `status` and `diagnosis` name why. A
room observed that does not load is `not-loaded`, one the import policy refuses is
`refused`, as verify says (every item 0, the reason named).

A check that could not run for a function (`not-run`: an earlier call of that
function hung) is charged to that function only: its own item, and its share of a
`check` item, never the whole `check` item. The rubric's `scoring` says how a
function built on a failing function is charged: `cascade`, like any failing
function; `independent`, not at all when verify localises its failure to the
failing function it is built on (its item names that function and passes).

Points only for work: a `check` item's points are shared among the functions the
check applies to, and a function earns its share only when it passes that check and
its own function item passes (under the rubric's `scoring`): a function that raises
`ValueError` on every input "refuses bad input" but earns nothing for it. A room
over its time budget (`over-budget`) keeps the points of what ran: only the functions
and metrics the budget left unrun lose theirs.

Base code earns nothing (`labctl.grade.basecode`): a function that is labctl's own
clean room or the course's starting code scores 0, whatever its checks say.

The row's score is its items' points, less the late penalty (a share of them,
`labctl.grade.late`), plus the TA's adjustments (`labctl.grade.overrides`), to the
cent: every output shows this one number (`points_text`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from labctl.grade import basecode
from labctl.grade.late import Lateness
from labctl.grade.rubric import Item, Rubric
from labctl.i18n import Msg, _

# Row statuses: `graded` (the learner's code was observed; its items say how it did), or
# the named failure that stopped the observation.
GRADED = "graded"
NOT_LOADED = "not-loaded"
FAILURES = ("layout-error", "hang", "crash", "refused")
# The verify statuses whose room ran: its checks say how each function did.
_RAN = ("loaded", "over-budget")
# Scores, penalties and shares are kept to the cent, so every output shows the same number.
_CENTS = 2
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
    due_at: str | None = None  # the learner's due date: the rubric's, or an extension
    wall_time_s: float | None = None  # what observing the learner took (None: not known)
    output_bytes: int = 0  # what the learner's room printed in all
    base_code: dict | None = None  # `labctl.grade.basecode`: which functions are base code

    @property
    def items_score(self) -> float:
        return round(sum(i.points for i in self.items), 6)

    def penalty(self, points: float) -> float:
        """The late penalty on `points`: its share of them, to the cent."""
        percent = self.late.penalty_percent if self.late else 0.0
        return round(points * percent / 100, _CENTS)

    def adjusted(self, points: float) -> float:
        """`points` less the late penalty (its share of them), plus the adjustments."""
        extra = sum(a["points"] for a in self.adjustments)
        return round(points - self.penalty(points) + extra, _CENTS)

    @property
    def late_penalty(self) -> float:
        return self.penalty(self.items_score)

    @property
    def score(self) -> float:
        return self.adjusted(self.items_score)

    @property
    def max_score(self) -> float:
        return round(sum(i.max_points for i in self.items), 6)


def points_text(value: float) -> str:
    """A score as every table shows it (gradebook, JUnit, Canvas): to the cent, no exponent."""
    text = f"{round(value, 6):.6f}".rstrip("0").rstrip(".")
    return "0" if text in ("", "-0") else text


def _short(text: str) -> str:
    """`text`, or as many of its words as fit and "…": never cut inside a word."""
    if len(text) <= _MESSAGE_CHARS:
        return text
    head = text[: _MESSAGE_CHARS - 1]
    return (head.rsplit(" ", 1)[0] if " " in head else head) + "…"


def _result(item: Item, passed: bool, message: str, points: float | None = None) -> ItemResult:
    """The item's result: all its points when passed, none otherwise, unless `points` says
    what share of them was earned (a `check` item)."""
    return ItemResult(
        item.id,
        item.kind,
        item.target,
        (item.points if passed else 0.0) if points is None else points,
        item.points,
        item.visibility,
        passed,
        _short(message),
        item.hidden,
    )


def _failing(checks: list[dict], keep) -> list[dict]:
    return [c for c in checks if keep(c) and c["status"] != "pass"]


def _unrun(verify: dict, function: str) -> str | None:
    """Why `function` was not run at all (the room's time budget ran out first), or None."""
    if function not in verify.get("over_budget", ()):
        return None
    return _(Msg("not run: over the time budget of {budget:g} s", budget=verify["budget_s"]))


def _function(item: Item, rubric: Rubric, verify: dict) -> tuple[bool, str]:
    scored = set(rubric.function_checks(item))
    bad = _failing(verify["checks"], lambda c: c["function"] == item.target and c["name"] in scored)
    if verify["status"] not in _RAN:
        return False, verify["message"]
    unrun = _unrun(verify, item.target)
    if unrun is not None:
        return False, unrun
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


def _works(function: str, rubric: Rubric, verify: dict) -> bool:
    """Whether `function` was seen to work: its function item (the rubric's, or one scoring
    what a function item would by default) passes under the rubric's `scoring`."""
    item = next(
        (i for i in rubric.items if i.kind == "function" and i.target == function),
        None,
    ) or Item(id="share", kind="function", target=function, points=1)
    return _function(item, rubric, verify)[0]


def _check(
    item: Item, rubric: Rubric, verify: dict, base: frozenset[str] = frozenset()
) -> tuple[bool, str, float]:
    """(passed, message, points): each function the check applies to earns its share of the
    item when it passes the check and its own function item passes, and is not base code."""
    if verify["status"] not in _RAN:
        return False, verify["message"], 0.0
    mine = [c for c in verify["checks"] if c["name"] == item.target]
    functions = list(dict.fromkeys(c["function"] for c in mine))
    status = {c["function"]: c for c in mine}
    ran = [f for f in functions if status[f]["status"] != "not-run"]
    if not ran:
        return False, _("{check} could not run for any function").format(check=item.target), 0.0
    failed = [f for f in ran if status[f]["status"] == "fail"]
    unrun = [f for f in functions if f not in ran]
    idle = [f for f in ran if f not in failed and not _works(f, rubric, verify)]
    based = [f for f in ran if f not in failed and f not in idle and f in base]
    earned = len(functions) - len(failed) - len(unrun) - len(idle) - len(based)
    points = round(item.points * earned / len(functions), _CENTS)
    if earned == len(functions):
        return True, _("{check} passes for every function").format(check=item.target), points
    parts = []
    if failed:
        parts.append(
            _("{check} does not pass for: {functions}").format(
                check=item.target, functions=", ".join(failed)
            )
        )
    if idle:
        parts.append(
            _("no share where the function fails its own checks: {functions}").format(
                functions=", ".join(idle)
            )
        )
    if based:
        parts.append(_("no share for base code: {functions}").format(functions=", ".join(based)))
    if unrun:
        parts.append(
            _("not run for: {functions}").format(
                functions="; ".join(
                    f"{f} ({_unrun(verify, f) or status[f]['message']})" for f in unrun[:3]
                )
                + (f"; +{len(unrun) - 3}" if len(unrun) > 3 else "")
            )
        )
    head = _("{earned} of {total} functions earn their share").format(
        earned=earned, total=len(functions)
    )
    return False, f"{head}: " + "; ".join(parts), points


def _package(verify: dict) -> tuple[bool, str]:
    if verify["status"] not in _RAN:
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
    if not found["accepted"]:
        problems = "; ".join(f"{p['field']}: {p['reason']}" for p in found["problems"][:3])
        return False, _("{file} refused: {problems}").format(file=found["file"], problems=problems)
    # Reproduced at the seed the learner wrote, which the learner knew: the room must also do
    # the work at labctl's own seed, as `evidence submit` requires (verify passes there, and
    # every claimed metric measured there meets its tolerance).
    verify = facts["verify"]
    claimed = {r["name"] for r in found["reproduced"]}
    short = [m["name"] for m in verify["metrics"] if m["name"] in claimed and not m.get("passed")]
    if not verify["passed"] or short:
        failing = sorted({c["function"] for c in verify["checks"] if c["status"] != "pass"})
        return False, _(
            "{file}: its claims reproduce at the seed it names, but not labctl's own seed: {what}"
        ).format(file=found["file"], what=", ".join(failing + short) or verify["message"])
    return True, _("{file}: valid, every claim reproduced").format(file=found["file"])


def _diagnosis(verify: dict) -> str:
    if verify["status"] != "loaded":  # over the budget: which functions it left unrun
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
    if status != GRADED:
        # The cause once, in the row's diagnosis; each item only says it was not graded.
        row.items = [_result(item, False, _not_graded(status)) for item in rubric.items]
        return observed(row, facts)
    base = facts.get("base_code")
    for item in rubric.items:
        points = None
        if item.kind == "function":
            passed, message = _function(item, rubric, verify)
        elif item.kind == "check":
            passed, message, points = _check(item, rubric, verify, basecode.functions(base))
        elif item.kind == "package":
            passed, message = _package(verify)
        elif item.kind == "metric":
            passed, message = _metric(item, verify)
        else:
            passed, message = _submission(facts)
        charged = basecode.charge(item, passed, message, verify, base)
        if charged != (passed, message) and points is not None:
            points = 0.0  # a check of base code alone: no share to earn
        passed, message = charged
        row.items.append(_result(item, passed, message, points))
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
    row.items = [_result(item, False, _not_graded(status)) for item in rubric.items]
    return row


def _not_graded(status: str) -> str:
    return _("not graded: {status}").format(status=status)
