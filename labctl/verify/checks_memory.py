"""The check of what makes a function what it is beyond its values: tiled_attention's memory.

The contract says tiled_attention computes "over key blocks of block_size with an online
softmax, never holding a (Tq, Tk) score array"; a tiled_attention that calls full attention
has full attention's values, so every other check passes it. This one measures it as the
tiled-attention lab does (`labctl.labs.tiled_attention`: one head, T = 4096, D = 16,
float32, blocks of 64, the worker's peak resident memory read by labctl from outside the
worker), checks the measured call's output against the reference before its peak counts,
and divides by the most the lab counts for full attention (four (T, T) float32 arrays), so
that the room's own full attention is not called: the bound is the lab's metric's.
"""

from __future__ import annotations

from labctl.i18n import N_, Msg
from labctl.verify import fixtures as fx
from labctl.verify.check_base import FAIL, NOT_RUN, PASS, Check, CheckResult, run_or_skip
from labctl.verify.compare import compare_value
from labctl.verify.observe import MEASURED, FunctionRun, RoomObservation


def _bound() -> tuple[str, float]:
    """The lab's memory metric's expected (`<=0.1`) and the bound it sets."""
    from labctl.lab import tolerance_key
    from labctl.labs import tiled_attention as lab

    expected = lab.LAB.metric(f"tiled_memory_ratio[T={lab.MEMORY_T}]").expected
    return expected, tolerance_key(expected)[-1]


def _wrong_already(run: FunctionRun) -> bool:
    """Some fixture's call raised or returned another value than the reference's: a wrong
    output at the measured call is that failure again, not one of memory."""
    for fixture in fx.fixtures(run.function, run.seed, run.contract):
        outcome = run.fixtures.get(fixture.name)
        if outcome is None or not outcome.ok:
            return True
        compared = compare_value(run.function, outcome.value, fx.reference_output(fixture))
        if isinstance(compared, str) or not compared.ok:
            return True
    return False


def check_memory(seen: RoomObservation, function: str) -> CheckResult:
    """The peak memory of tiled_attention is a tile's, not full attention's.

    Measured in the room's worker at the tiled-attention lab's size, its output checked on
    query rows drawn from the seed (a call that answers np.empty counts no memory: a failure
    where every fixture is right, not run where the fixtures already fail on values), and
    divided by four (T, T) float32 arrays, the most the lab counts for full attention.
    Catches: a tiled_attention that calls scaled_dot_product_attention, or builds the whole
    score array and slices it into blocks. Fault: `tiled-full-attention`. Not run for a room
    with no worker to measure (labctl's own fault rooms, in its process).
    """
    from labctl.lab import satisfies
    from labctl.labs import tiled_attention as lab

    run, skipped = run_or_skip(seen, function, "memory")
    if skipped:
        return skipped
    measured = run.memory
    if measured is None:
        return CheckResult(function, "memory", NOT_RUN, N_("not run: no worker to measure"))
    outcome = measured.outcome
    if outcome.kind == "skipped":
        return CheckResult(function, "memory", NOT_RUN, outcome.describe())
    if not outcome.ok:
        return CheckResult(
            function,
            "memory",
            FAIL,
            Msg(
                "the measured call (T = {T}) {problem}", T=lab.MEMORY_T, problem=outcome.describe()
            ),
        )
    call = measured.call
    if call.peak is None and _wrong_already(run):
        return CheckResult(
            function,
            "memory",
            NOT_RUN,
            N_("not run: its outputs differ from the reference's on the fixtures already"),
        )
    if call.peak is None:
        # Right on every fixture, wrong only where its memory is measured: it spotted the call.
        return CheckResult(function, "memory", FAIL, call.why, max_error=call.error)
    expected, bound = _bound()
    full = lab.full_cap(lab.MEMORY_T)
    ratio = call.peak / full
    common = dict(max_error=ratio, tolerance=bound, margin=ratio / bound)
    said = dict(
        peak=call.peak / 2**20,
        full=full / 2**20,
        ratio=ratio,
        T=lab.MEMORY_T,
        expected=expected,
    )
    if not satisfies(ratio, expected):
        return CheckResult(
            function,
            "memory",
            FAIL,
            Msg(
                "peak memory {peak:.1f} MiB at T = {T}, {ratio:.2f} of full attention's "
                "{full:.0f} MiB (expected {expected}): it holds what full attention holds",
                **said,
            ),
            **common,
        )
    return CheckResult(
        function,
        "memory",
        PASS,
        Msg(
            "peak memory {peak:.1f} MiB at T = {T}, {ratio:.2f} of full attention's {full:.0f} "
            "MiB (expected {expected})",
            **said,
        ),
        **common,
    )


CHECKS: list[Check] = [
    Check(
        "memory",
        check_memory,
        "peak memory a tile's, not full attention's",
        applies=lambda f: f in MEASURED,
    ),
]
