"""Helpers shared by the tests of what a learner reads: the CLI in a chosen language with
nothing of this machine's locale, a filled evidence record, a clean room that raises."""

from __future__ import annotations

from typer.testing import CliRunner

from labctl.cli.main import app
from labctl.faults import Fault

# Nothing of this machine's locale leaks into the choice of language.
CLEAN = {"LABCTL_LANG": "", "LC_ALL": "", "LC_MESSAGES": "", "LANG": "", "COLUMNS": "300"}

# The project's clean room with a causal_mask that raises: every lab using it fails.
MASK_RAISES = Fault(
    name="mask-raises",
    function="causal_mask",
    module="primitives",
    description="causal_mask raises",
    course="none",
    source="""
    def causal_mask(t_q, t_k=None):
        raise RuntimeError("not written yet")
    """,
)


def invoke(*args: str, lang: str = "en"):
    """`labctl --lang LANG ARGS`, which must end without a traceback."""
    result = CliRunner().invoke(app, ["--lang", lang, *args], env=CLEAN)
    assert "Traceback" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def filled_record(**fields) -> dict:
    """A valid learn-llm.evidence.v1 record as a mapping; a field given as None is left out."""
    data = {
        "schema": "learn-llm.evidence.v1",
        "module": "t-module",
        "commit": "0" * 40,
        "verified_at": "2026-05-01T10:00:00Z",
        "environment": "python 3.11, numpy 2, torch 2, linux, cpu",
        "seed": 5,
        "commands": ["labctl run causal-attention"],
        "metrics": [{"name": "future_weight_max", "expected": "==0", "actual": 0.0}],
        "artifacts": ["README.md"],
        "cost": {"gross_usd": 0, "credit_usd": 0},
        "licenses": [],
        "known_failures": [],
    }
    for key, value in fields.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return data
