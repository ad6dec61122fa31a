"""`labctl run --set`: parameters checked by each lab's model before anything runs, and a
record made with non-default parameters says so wherever it is shown or submitted."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from labctl import registry
from labctl.cli.main import app
from labctl.errors import UsageError
from labctl.evidence.submit import submit
from labctl.faults import project_clean_room
from labctl.params import describe, resolve_params

# Content, not layout, is tested here: a terminal wide enough that no line wraps.
runner = CliRunner(env={"COLUMNS": "300"})
ROOM = str(project_clean_room())


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _run(workdir, *args, folder="out"):
    out = workdir / folder
    result = runner.invoke(app, ["run", *args, "--out", str(out)])
    return result, out


@pytest.mark.parametrize(
    ("setting", "says"),
    [
        ("nosuch=3", "unknown parameter 'nosuch'"),  # unknown name: the allowed ones listed
        ("T=abc", "not a valid value"),  # bad type
        ("T=1.5", "not a valid value"),  # a float for an integer
        ("T=0", "should be at least 2"),  # out of range, below
        ("T=100000", "should be at most 512"),  # out of range, above
        ("perturbation=nan", "not a valid value"),
        ("gqa.T=4", "lab 'gqa' is not being run"),
        ("T", "NAME=VALUE"),
    ],
)
def test_a_refused_setting_exits_2_and_writes_nothing(workdir, setting, says):
    result, out = _run(workdir, "causal-attention", "--set", setting, "--impl", "reference")
    assert result.exit_code == 2, result.output
    assert says in result.output
    assert not out.exists()


def test_the_refusal_names_the_allowed_names_and_range(workdir):
    result, _ = _run(workdir, "causal-attention", "--set", "nosuch=1")
    assert result.exit_code == 2
    for name in ("B: integer", "T: integer, T ≥ 2, T ≤ 512 (default 8)", "perturbation: number"):
        assert name in result.output
    result, _ = _run(workdir, "causal-attention", "--set", "T=0")
    assert "T: integer, T ≥ 2, T ≤ 512" in result.output


def test_cross_field_rules_are_checked(workdir):
    result, out = _run(workdir, "gqa", "--set", "Hkv=3")
    assert result.exit_code == 2 and "Hkv = 3 must divide H = 8" in result.output
    result, out = _run(workdir, "kv-cache", "--set", "T=8")
    assert result.exit_code == 2 and "must be positive and sum to T = 8" in result.output
    assert not out.exists()


def test_with_several_labs_a_name_applies_to_those_that_have_it():
    labs = list(registry.discover())
    params = resolve_params(labs, ["perturbation=2.5", "causal-attention.T=6"])
    changed = {lab.id for lab in labs if params[lab.id] != lab.params()}
    assert changed == {"causal-attention", "mask-ablation"}
    assert params["causal-attention"].T == 6 and params["mask-ablation"].T == 8
    assert params["mask-ablation"].perturbation == 2.5
    with pytest.raises(UsageError, match="no lab being run has it"):
        resolve_params(labs, ["nosuch=1"])
    with pytest.raises(UsageError, match="unknown parameter 'T'"):
        resolve_params(labs, ["scale-ablation.T=4"])
    # a tuple parameter takes comma-separated integers
    assert resolve_params(labs, ["kv-cache.chunks=4,4,8"])["kv-cache"].chunks == (4, 4, 8)


def test_every_lab_parameter_has_bounds_or_is_described():
    for lab in registry.discover():
        for name, field in lab.params.model_fields.items():
            assert field.description, f"{lab.id}.{name} has no description"
            assert describe(lab.params, name).startswith(f"{name}: ")


def test_a_non_default_run_says_so_everywhere(workdir):
    result, out = _run(workdir, "causal-attention", "--set", "T=5", "--impl", "reference", "--json")
    assert result.exit_code == 0, result.output
    (lab,) = json.loads(result.stdout)["labs"]
    assert lab["params"]["T"] == 5 and lab["params_default"] is False
    assert lab["params_changed"] == ["T"]
    (record_path,) = out.glob("causal-attention/*.json")
    record = json.loads(record_path.read_text())
    assert record["labctl"]["params"]["T"] == 5
    assert record["labctl"]["params_default"] is False
    assert "--set T=5" in record["commands"][0]
    manifest = json.loads((out / "module-manifest-v1.json").read_text())
    assert manifest["modules"]["causal-attention"]["params_default"] is False
    human = runner.invoke(
        app, ["run", "causal-attention", "--set", "T=5", "--impl", "reference", "--out", str(out)]
    )
    assert "non-default parameters: T=5" in human.output
    default, out2 = _run(
        workdir, "causal-attention", "--impl", "reference", "--json", folder="default"
    )
    (lab,) = json.loads(default.stdout)["labs"]
    assert lab["params_default"] is True and lab["params_changed"] == []
    assert (
        "non-default"
        not in runner.invoke(
            app, ["run", "causal-attention", "--impl", "reference", "--out", str(out2)]
        ).output
    )


def test_submit_notes_a_record_made_with_non_default_parameters(workdir):
    result, out = _run(workdir, "causal-attention", "--set", "T=5", "--impl", "reference")
    assert result.exit_code == 0, result.output
    (record_path,) = out.glob("causal-attention/*.json")
    outcome = submit(record_path, workdir / "evidence", timeout_s=5)
    assert any(w.field == "labctl.params_default" for w in outcome.report.warnings)
    default, out2 = _run(workdir, "causal-attention", "--impl", "reference", folder="default")
    (record_path,) = out2.glob("causal-attention/*.json")
    outcome = submit(record_path, workdir / "evidence", timeout_s=5)
    assert not any(w.field == "labctl.params_default" for w in outcome.report.warnings)


def test_submit_notes_a_record_made_with_another_labctl_s_defaults(workdir):
    """A lab's defaults changed since the record was made (mask-ablation's did): said."""
    result, out = _run(workdir, "causal-attention", "--impl", "reference")
    assert result.exit_code == 0, result.output
    (record_path,) = out.glob("causal-attention/*.json")
    data = json.loads(record_path.read_text())
    data["labctl"]["params"]["T"] = 16  # as if made when the default T was 16
    record_path.write_text(json.dumps(data))
    outcome = submit(record_path, workdir / "evidence", timeout_s=5)
    (warning,) = [w for w in outcome.report.warnings if w.field == "labctl.params"]
    assert "T=16 (now 8)" in warning.reason
    assert not any(w.field == "labctl.params_default" for w in outcome.report.warnings)
