"""Helpers for the check tests: observations built by hand, and checks that assert their row.

No worker runs: each test states exactly what a clean room did (`observed`), and every
result a check gives is asserted to be its own row (`named`).
"""

from __future__ import annotations

from pathlib import Path

from labctl.verify import checks
from labctl.verify import fixtures as fx
from labctl.verify.observe import FunctionRun, Outcome, RoomObservation


def named(check_fn):
    """`check_fn`, asserting that every result it gives is its own row: its function, its name."""
    name = next(c.name for c in checks.CHECKS if c.evaluate is check_fn)

    def run(seen, function):
        result = check_fn(seen, function)
        assert (result.function, result.name) == (function, name)
        return result

    return run


def observed(function: str, value_of=fx.reference_output, probes=True, **run_fields):
    """An observation of `function` whose fixtures (and probes) returned `value_of(fixture)`;
    `value_of` may return an Outcome instead of a value; `run_fields` set the FunctionRun's
    other calls (`causal`, `bad`)."""
    run = FunctionRun(function)

    def outcome(fixture):
        value = value_of(fixture)
        return value if isinstance(value, Outcome) else Outcome("value", value=value)

    for fixture in fx.fixtures(function):
        run.fixtures[fixture.name] = outcome(fixture)
    if probes:
        for fixture in fx.probes(function):
            run.probes[fixture.name] = outcome(fixture)
    for name, value in run_fields.items():
        setattr(run, name, value)
    return RoomObservation(root=Path("room"), runs={function: run})
