"""Helpers shared by the lab tests: run a lab on a clean room, read its rows, run the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from labctl import faults, reference
from labctl.cli.main import app
from labctl.lab import Lab
from labctl.reference.memory import peak_bytes
from labctl.runner import LabResult, implementations, run_lab

ROOM = faults.project_clean_room()

# Not in the catalogue: a decode that keeps the H repeated K/V heads in its cache instead of
# the Hkv shared ones (repeat_kv before the cache update). Outputs stay right; memory does not.
CACHE_REPEATED = faults.Fault(
    name="kv-cache-repeated-heads",
    function="attention_decode",
    module="transformer_block",
    description="the KV cache holds the H repeated heads, not the Hkv shared ones",
    course="手撕 §05.5, §07.4",
    source="""
    from .primitives import repeat_kv as _repeat_kv

    _correct_decode = attention_decode

    def attention_decode(x_new, past_k, past_v, wq, wk, wv, wo, n_heads, n_kv_heads=None, window=None, rope_theta=None):
        n_rep = n_heads // (n_heads if n_kv_heads is None else n_kv_heads)
        if past_k is not None:
            past_k, past_v = past_k[:, ::n_rep], past_v[:, ::n_rep]
        out, k_all, v_all = _correct_decode(x_new, past_k, past_v, wq, wk, wv, wo, n_heads, n_kv_heads, window, rope_theta)
        return out, _repeat_kv(k_all, n_rep), _repeat_kv(v_all, n_rep)
    """,
)


def run(lab: Lab, room: Path = ROOM, seed: int = 5, impl: str = "both") -> LabResult:
    with implementations(impl, room) as impls:
        return run_lab(lab, seed, impls)


def rows(result: LabResult) -> dict:
    """Each metric row by (name, impl)."""
    return {(m.name, m.impl): m for m in result.metrics}


def at_seed_5(lab: Lab):
    """A module's `seed5` fixture: `lab` run once at seed 5 on both implementations (the
    project's room)."""

    @pytest.fixture(scope="module")
    def seed5() -> LabResult:
        return run(lab)

    return seed5


def passed(result: LabResult) -> dict:
    """The rows of a run that must have passed (no error, every deciding row), by (name, impl)."""
    assert result.error is None and result.passed, result.failures()
    return rows(result)


def values(result: LabResult) -> dict[tuple[str, str], float]:
    """Every non-timing value by (name, impl): what must repeat for a seed."""
    return {(m.name, m.impl): m.actual for m in result.metrics if not m.timing}


def faulty_room(directory: Path, fault: str | faults.Fault) -> Path:
    """The project's clean room with one fault, written under `directory`."""
    fault = faults.get(fault) if isinstance(fault, str) else fault
    return fault.materialize(directory / fault.name)


def cli_run_json(lab_id: str, workdir: Path, monkeypatch) -> tuple[dict, Path]:
    """`labctl run LAB --json` from `workdir`; the lab's JSON and the runs folder."""
    monkeypatch.chdir(workdir)
    out = workdir / "evidence" / "runs"
    args = ["run", lab_id, "--json", "--out", str(out), "--clean-room", str(ROOM)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["passed"] is True
    (lab,) = document["labs"]
    assert lab["id"] == lab_id and lab["passed"] is True
    assert sorted(out.glob(f"{lab_id}/*.json")), "no evidence record written"
    return lab, out


def failing(result: LabResult) -> set[tuple[str, str]]:
    """(name, impl) of every deciding metric row that failed."""
    return {(m.name, m.impl) for m in result.metrics if m.decides and not m.passed}


def wave2_fault(name: str) -> faults.Fault:
    """A fault of the second-wave labs' module, or of the catalogue."""
    from labctl.faults import labs_wave2

    try:
        return labs_wave2.get(name)
    except KeyError:
        return faults.get(name)


class Recorded:
    """The torch reference in this process, noting every call the lab makes.

    `invoke` answers as a clean room's worker does, so calls made for memory are noted
    with the `value_part` they asked for (None: the whole value).
    """

    def __init__(self):
        self.calls: list[tuple[str, tuple, dict]] = []

    def __getattr__(self, fn):
        def call(*args, **kwargs):
            self.calls.append((fn, args, kwargs))
            return getattr(reference, fn)(*args, **kwargs)

        return call

    def invoke(self, fn, *args, measure_memory, echo_args, value_part=None, **kwargs):
        assert measure_memory is True and echo_args is False
        self.calls.append((fn, args, {**kwargs, "value_part": value_part}))
        value, peak = peak_bytes(getattr(reference, fn), *args, **kwargs)
        if value_part is not None:
            value = value[value_part]
        return SimpleNamespace(value=value, peak_bytes=peak)

    def made(self, fn: str) -> list[tuple[tuple, dict]]:
        return [(args, kwargs) for name, args, kwargs in self.calls if name == fn]
