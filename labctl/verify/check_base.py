"""What every check of `labctl verify clean-room` shares: its result, how it is listed,
and how it finds the calls it reads (`labctl.verify.checks` gathers the checks)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from labctl.i18n import N_, Msg
from labctl.verify import fixtures as fx
from labctl.verify.observe import FunctionRun, RoomObservation

PASS, FAIL, NOT_RUN = "pass", "fail", "not-run"


@dataclass
class CheckResult:
    function: str
    name: str
    status: str
    message: str  # English, for --json and the evidence records; given as a Msg or a str
    max_error: float | None = None
    tolerance: float | None = None
    margin: float | None = None
    mismatch_fraction: float | None = None
    fixture: str | None = None
    # What the terminal shows, translated there with `_()`: the Msg (or text) given as message.
    shown: str | Msg = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.shown = self.message
        self.message = str(self.message)

    @property
    def passed(self) -> bool:
        return self.status == PASS

    @property
    def failed(self) -> bool:
        return self.status == FAIL

    def to_json(self) -> dict:
        data = {
            "function": self.function,
            "name": self.name,
            "passed": self.passed,
            "status": self.status,
            "max_error": self.max_error,
            "message": self.message,
        }
        for key in ("tolerance", "margin", "mismatch_fraction", "fixture"):
            value = getattr(self, key)
            if value is not None:
                data[key] = value
        return data


def every_function(function: str) -> bool:
    return True


@dataclass(frozen=True)
class Check:
    """A check and when it applies. Listed, not registered by a decorator: mutmut does not
    mutate decorated functions, and the checks are what its runs are for."""

    name: str
    evaluate: Callable
    summary: str
    scope: str = "function"  # "package" or "function"
    applies: Callable[[str], bool] = every_function
    justified: str = ""  # why no catalogued fault proves the check (else empty)
    # Where it applies depends on the contract checked too (v2's bad inputs for softmax):
    # (function, contract) -> bool, else `applies` decides at every version.
    applies_at: Callable[[str, int], bool] | None = None

    def fits(self, function: str, contract: int = 1) -> bool:
        """Does the check apply to `function` checked against `contract`?"""
        if self.applies_at is not None:
            return self.applies_at(function, contract)
        return self.applies(function)

    @property
    def doc(self) -> str:
        return (self.evaluate.__doc__ or "").strip()


def _skipped_reason(run: FunctionRun | None) -> str | None:
    """Why a function's output checks cannot run at all, or None."""
    if run is None:
        return N_("not run")
    if run.not_implemented:
        return N_("not run: not implemented")
    unexposed = run.unexposed
    if unexposed is not None and unexposed.kind == "missing":
        return N_("not run: the package does not expose it")
    if unexposed is not None:
        return N_("not run: not callable")
    return None


def of_run(build, run: FunctionRun):
    """`build` (fixtures or probes) for the run's function, seed and contract; v1's calls
    keep their two arguments."""
    if run.contract == 1:
        return build(run.function, run.seed)
    return build(run.function, run.seed, run.contract)


def returned(run: FunctionRun, with_probes: bool = True):
    """(fixture, outcome) for every call that returned, fixtures then probes."""
    pairs = [(f, run.fixtures.get(f.name)) for f in of_run(fx.fixtures, run)]
    if with_probes:
        pairs += [(f, run.probes.get(f.name)) for f in of_run(fx.probes, run)]
    return [(f, o) for f, o in pairs if o is not None and o.ok]


def files_msg(n: int) -> Msg:
    return Msg("{n} file", n=n) if n == 1 else Msg("{n} files", n=n)


def not_loaded(seen: RoomObservation) -> str:
    if seen.status == "refused":
        return N_("not run: refused by the import policy")
    return N_("not run: the clean room does not load")


def run_or_skip(
    seen: RoomObservation, function: str, check: str
) -> tuple[FunctionRun | None, CheckResult | None]:
    """The function's calls, or the not-run result when its output checks cannot run."""
    run = seen.runs.get(function)
    reason = not_loaded(seen) if not seen.loaded else _skipped_reason(run)
    return run, CheckResult(function, check, NOT_RUN, reason) if reason else None


def num(value: float | None) -> str:
    if value is None:
        return "—"
    if value == 0 or (1e-3 <= abs(value) < 1e4):
        return f"{value:.3g}"
    return f"{value:.1e}"
