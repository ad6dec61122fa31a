"""The sentences of a diagnosis: a fault named (exactly, or in part, beside another bug), a
failure sent on to the function at fault, or said in the function's own words.

`labctl.verify.diagnosis` decides which applies; each sentence is made here once, and
`--json`, the terminal, the gradebook, feedback and JUnit all carry it. Numbers stay out of it
(`numbers`, in `--json`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from labctl import contract
from labctl.faults import Fault
from labctl.i18n import Msg, declared, listed
from labctl.verify import blame
from labctl.verify.calls import FLOAT32_ROUNDING
from labctl.verify.checks import CheckResult, check_label
from labctl.verify.likeness import Explanation, failed_checks, wrong_calls
from labctl.verify.observe import PACKAGE, FunctionRun, RoomObservation, function_at


@dataclass
class Diagnosis:
    function: str
    kind: str  # fault | dependency | unmatched | not-implemented | missing | load
    message: str  # English, for --json and the evidence records; given as a Msg or a str
    fault: str | None = None
    fault_function: str | None = None
    course: str | None = None
    chain: tuple[str, ...] = ()
    numbers: dict[str, float] = field(default_factory=dict)  # for --json, never in the sentence
    more: tuple[str, ...] = ()  # the other faults named, two bugs (or more) in one function
    # What the terminal shows, translated there with `_()`: the Msg (or text) given as message.
    shown: str | Msg = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.shown = self.message
        self.message = str(self.message)

    def to_json(self) -> dict:
        data = {"function": self.function, "kind": self.kind, "message": self.message}
        if self.fault:
            data.update(fault=self.fault, fault_function=self.fault_function, course=self.course)
        if self.more:
            data["more_faults"] = list(self.more)
        if self.chain:
            data["chain"] = list(self.chain)
        if self.numbers:
            data["numbers"] = dict(self.numbers)
        return data


def _inlined(fault: Fault, function: str) -> str | Msg:
    return (
        ""
        if fault.function == function
        else Msg(" (a fault of {function}, inlined here)", function=fault.function)
    )


def describe(fault: Fault, function: str) -> Msg:
    where = _inlined(fault, function)
    course: Msg | str = declared(fault.course)
    cited = contract.cited_version(fault.course)
    if cited is not None:
        # the contract ships with labctl: say how to open the section cited
        course = Msg(
            "{course} (`labctl contract document --contract {version}`)",
            course=course,
            version=cited,
        )
    return Msg(
        "{function}: matches fault `{fault}`{where}: {description}; see {course}",
        function=function,
        fault=fault.name,
        where=where,
        description=declared(fault.description),
        course=course,
    )


def _checks(names: list[str]) -> str | Msg:
    """Checks named as the failures list names them: in the learner's language."""
    return listed([declared(check_label(name)) for name in names])


def _exactly(function: str, hits: list[tuple[Fault, set[str]]]) -> Diagnosis:
    """Faults that match exactly: the one that leaves the fewest failures unexplained."""
    hits = sorted(hits, key=lambda hit: len(hit[1]))
    first, extra = hits[0]
    message = describe(first, function)
    if extra:
        message = Msg(
            "{message} (it also fails {checks})", message=message, checks=_checks(sorted(extra))
        )
    if len(hits) > 1:
        others = ", ".join(f"`{h.name}`" for h, _ in hits[1:])
        message = Msg("{message} (also matches {others})", message=message, others=others)
    return Diagnosis(function, "fault", message, first.name, first.function, first.course)


def _in_part(
    seen: RoomObservation,
    results: list[CheckResult],
    function: str,
    hits: list[tuple[Fault, Explanation]],
) -> Diagnosis:
    """Two bugs (or more) in one function: each fault that explains a part of its failures,
    named with what to change, the one that explains most first; then what none explains."""
    failed = failed_checks(results, function)
    want = {("check", c) for c in failed} | {
        ("call", n) for n in wrong_calls(seen.runs.get(function))
    }

    def units(explanation: Explanation) -> set[tuple[str, str]]:
        found = {("check", c) for c in explanation.checks} | {
            ("call", n) for n in explanation.calls
        }
        return found & want

    chosen: list[tuple[Fault, Explanation]] = []
    covered: set[tuple[str, str]] = set()
    while True:
        # A fault whose calls meet another bug is named only where a fault named explains them.
        left = [
            h
            for h in hits
            if h not in chosen
            and units(h[1]) - covered
            and {("call", n) for n in h[1].conflicts} <= covered
        ]
        if not left:
            break
        best = max(left, key=lambda h: len(units(h[1]) - covered))  # ties: catalogue order
        chosen.append(best)
        covered |= units(best[1])
    if not chosen:
        return _own(seen, results, function)
    first, found = chosen[0]
    message = describe(first, function)
    twins = [h for h, e in hits if h is not first and units(e) == units(found)]
    if twins:
        others = ", ".join(f"`{h.name}`" for h in twins)
        message = Msg("{message} (also matches {others})", message=message, others=others)
    for fault, _ in chosen[1:]:
        message = Msg(
            "{message}; and it matches fault `{fault}`{where}: {description}; see {course}",
            message=message,
            fault=fault.name,
            where=_inlined(fault, function),
            description=declared(fault.description),
            course=declared(fault.course),
        )
    checks = sorted(c for kind, c in want - covered if kind == "check")
    calls = sorted(n for kind, n in want - covered if kind == "call")
    run = seen.runs.get(function)
    numbers: dict[str, float] = {}
    precision = _precision(results, function, run) if "parity" in checks else None
    if precision is not None:
        # Rounding is a cause of its own beside the faults named: said, never left out.
        rounding, numbers = precision
        message = Msg("{message}; besides, {said}", message=message, said=rounding)
        explained = (
            {"parity", "rows-sum"} if _rows_off_by_rounding(results, function) else {"parity"}
        )
        checks = [c for c in checks if c not in explained]
        calls = []
    if run is not None:
        # What a call it made explains (a stub's raise) is that function's, not said here.
        explained = blame.explain(function, run, checks)
        checks = [c for c in checks if c in explained.own or c not in blame.EXPLAINS]
    # What no fault explains, said in words where a check's failure has words of its own;
    # calls no fault explains, where every check is, said where the words tell more.
    phrases = blame.said_own(function, run, tuple(checks)) if run is not None else []
    if not checks and calls and run is not None:
        failed_here = [c for c in failed if c in blame.SAYS]
        phrases = [
            p for p in blame.said_own(function, run, tuple(failed_here)) if p not in blame.GENERIC
        ]
    for phrase in phrases:
        message = Msg("{message}; besides, {phrase}", message=message, phrase=phrase)
    unsaid = [c for c in checks if c not in blame.SAYS]
    if unsaid:
        message = Msg("{message} (it also fails {checks})", message=message, checks=_checks(unsaid))
    elif calls and not checks and not phrases:
        message = Msg(
            "{message}; on {calls} it goes wrong otherwise, as no catalogued fault explains",
            message=message,
            calls=", ".join(calls),
        )
    return Diagnosis(
        function,
        "fault",
        message,
        first.name,
        first.function,
        first.course,
        more=tuple(f.name for f, _ in chosen[1:]),
        numbers=numbers,
    )


def _not_implemented(seen: RoomObservation, run: FunctionRun) -> Diagnosis:
    """A stub, or a function whose every call reaches another function's stub."""
    order = contract.function_names(contract.LATEST)
    raised_in = {
        function_at(seen.root, o.where)
        for o in [*run.fixtures.values(), *run.probes.values()]
        if o.where
    }
    stubs = sorted(raised_in - {run.function, PACKAGE}, key=order.index)
    if not stubs:
        return Diagnosis(
            run.function,
            "not-implemented",
            Msg("{function}: not implemented yet", function=run.function),
        )
    return Diagnosis(
        run.function,
        "dependency",
        Msg(
            "{function} fails only because it calls a stub: {stubs} (not implemented yet); "
            "fix {first} first",
            function=run.function,
            stubs=", ".join(stubs),
            first=stubs[0],
        ),
        chain=(run.function, *stubs),
    )


def _chain(seen: RoomObservation, results: list[CheckResult], function: str, first) -> list[str]:
    """`function`, the function it called (`first`, a Call), and on down each called function's
    own blame to the one whose failure is its own."""
    chain = [function, first.function]
    while (nxt := blame.blamed(seen, results, chain[-1])) is not None:
        if nxt.function in chain:
            break
        chain.append(nxt.function)
    return chain


def _steps(chain: list[str]) -> Msg:
    steps = Msg("{function} fails", function=chain[-1])
    for b in reversed(chain[1:-1]):
        steps = Msg("{function} fails, which fails because {steps}", function=b, steps=steps)
    return steps


def _sent_on(
    seen: RoomObservation, results: list[CheckResult], function: str, first, others=()
) -> Diagnosis:
    """`function` fails only where it called `first` (a Call), which fails there too: follow
    each called function's own blame down to the one whose failure is its own. `others` are
    the other functions its failures are sent to (two bugs in two of them): each is named."""
    chain = _chain(seen, results, function, first)
    last = seen.runs.get(chain[-1])
    if last is not None and last.not_implemented:
        return Diagnosis(
            function,
            "dependency",
            Msg(
                "{function} fails only because it calls a stub: {stubs} (not implemented yet); "
                "fix {first} first",
                function=function,
                stubs=chain[-1],
                first=chain[-1],
            ),
            chain=tuple(chain),
        )
    more = [_chain(seen, results, function, c) for c in others]
    more = [c for c in more if c[-1] != chain[-1]]
    if not more:
        return Diagnosis(
            function,
            "dependency",
            Msg(
                "{function} fails because {steps}: it is built on it; fix {first} first",
                function=function,
                steps=_steps(chain),
                first=chain[-1],
            ),
            chain=tuple(chain),
        )
    steps = _steps(chain)
    roots = [chain[-1]]
    for other in more:
        steps = Msg("{steps}, and because {more}", steps=steps, more=_steps(other))
        if other[-1] not in roots:
            roots.append(other[-1])
    return Diagnosis(
        function,
        "dependency",
        Msg(
            "{function} fails because {steps}: it is built on them; fix {roots} first",
            function=function,
            steps=steps,
            roots=", ".join(roots),
        ),
        chain=tuple(chain),
    )


def _own(seen: RoomObservation, results: list[CheckResult], function: str) -> Diagnosis:
    """No catalogued fault matches: what goes wrong in the function's own code, in words."""
    failed = sorted(failed_checks(results, function))
    run = seen.runs.get(function)
    # What a call it made explains (a stub's raise on some fixtures) is not said here.
    own = list(blame.explain(function, run, failed).own) if run is not None else []
    own += [c for c in failed if c in blame.OWN_ONLY]
    precision = _precision(results, function, run) if "parity" in own else None
    if precision is not None:
        # Rounding explains the values and rows that miss by float32's digits; what else fails
        # is a cause of its own, said after it, never dropped.
        explained = (
            {"parity", "rows-sum"} if _rows_off_by_rounding(results, function) else {"parity"}
        )
        own = [c for c in own if c not in explained]
        failed = [c for c in failed if c not in explained]
    phrases = blame.said_own(function, run, tuple(own)) if run is not None else []
    others = [c for c in failed if c not in blame.EXPLAINS and c not in blame.OWN_ONLY]
    said: str | Msg | None = None
    if phrases:
        said = phrases[0]
        for phrase in phrases[1:]:
            said = Msg("{said}; {phrase}", said=said, phrase=phrase)
        if others:
            said = Msg("{said}; it also fails {checks}", said=said, checks=_checks(others))
    if precision is not None:
        rounding, numbers = precision
        message = Msg("{function}: {said}", function=function, said=rounding)
        if said is not None:
            message = Msg("{message}; besides, {said}", message=message, said=said)
        elif others:
            message = Msg(
                "{message} (it also fails {checks})", message=message, checks=_checks(others)
            )
        return Diagnosis(function, "precision", message, numbers=numbers)
    if said is None:
        message = Msg(
            "{function}: fails {checks}; no catalogued fault matches it",
            function=function,
            checks=_checks(failed),
        )
    else:
        message = Msg(
            "{function}: {said}; no catalogued fault matches it", function=function, said=said
        )
    return Diagnosis(function, "unmatched", message)


def _precision(
    results: list[CheckResult], function: str, run: FunctionRun | None
) -> tuple[Msg, dict[str, float]] | None:
    """The float32-rounding sentence (without the function's name), when every value the
    function gets wrong is off by float32 rounding only (and the numbers behind it), else
    None."""
    rounding = blame.float32_rounding(function, run) if run is not None else None
    if rounding is None:
        return None
    error, where = rounding
    place = (
        Msg("in its own code")
        if where is None
        else Msg("first in {callee}, which it calls", callee=where)
    )
    said = Msg(
        "its values differ from the reference by float32 rounding: it computes in float32 "
        "inside a float64 path, {place}; keep the input's float dtype through every step "
        "(tables, casts, intermediate arrays)",
        place=place,
    )
    return said, {"relative_error": error}


def _rows_off_by_rounding(results: list[CheckResult], function: str) -> bool:
    """Rows that miss summing to 1 by no more than float32 rounding (or pass)."""
    rows = next((r for r in results if r.function == function and r.name == "rows-sum"), None)
    return rows is None or not rows.failed or (rows.max_error or 0.0) <= FLOAT32_ROUNDING
