"""Settings whose largest arrays exceed a learner's laptop are refused before anything runs."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

import labctl.lab as lab_module
from labctl import registry
from labctl.cli.main import app

runner = CliRunner(env={"COLUMNS": "300"})

# Each within its bounds, together many GiB (the tester's causal-attention case asked for 16).
REFUSED = {
    "causal-attention": ["B=64", "H=64", "T=512", "D=1024"],
    "gqa": ["B=64", "T=512", "C=1024", "H=64", "Hkv=64"],
    "kv-cache": ["B=64", "T=512", "C=1024", "H=64", "Hkv=64", "chunks=512"],
    "residual-ablation": ["B=64", "T=512", "C=1024", "H=64", "F=4096"],
    "mask-ablation": ["B=64", "H=64", "T=512", "D=1024"],
    "scale-ablation": ["pairs=200000", "rows=100000", "keys=4096"],
    "tiled-attention": ["memory_lengths=4096,65536"],
}


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("lab", sorted(REFUSED))
def test_settings_past_the_memory_limit_are_refused_naming_the_product(workdir, lab):
    sets = [arg for setting in REFUSED[lab] for arg in ("--set", setting)]
    result = runner.invoke(app, ["run", lab, "--impl", "reference", *sets])
    assert result.exit_code == 2, result.output
    assert " = " in result.output and "exceed the 1 GiB" in result.output, result.output
    assert list(workdir.iterdir()) == []


@pytest.mark.parametrize("lab", sorted(REFUSED))
def test_the_defaults_stay_under_a_third_of_the_memory_limit(monkeypatch, lab):
    monkeypatch.setattr(lab_module, "MEMORY_LIMIT", lab_module.MEMORY_LIMIT // 3)
    registry.get(lab).params()
