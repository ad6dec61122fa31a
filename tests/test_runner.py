"""The lab runner: registry, judging, `labctl list|run`, evidence records and the manifest."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml
from clitools import MASK_RAISES
from typer.testing import CliRunner

from labctl import registry
from labctl.cli.main import app
from labctl.course import PARTS, Section
from labctl.evidence.models import EvidenceRecord
from labctl.evidence.store import EvidenceStore
from labctl.faults import get as get_fault
from labctl.faults import project_clean_room
from labctl.lab import Lab, LabOutput, LabParams, Metric, parse_expected, satisfies
from labctl.runner import implementations, judge, run_lab

# Content, not layout, is tested here: a terminal wide enough that no line wraps.
runner = CliRunner(env={"COLUMNS": "300"})
ROOM = str(project_clean_room())


def run_cli(*args: str):
    return runner.invoke(app, list(args))


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A scratch working directory, so evidence never lands in the repository."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize(
    ("expr", "inside", "outside"),
    [
        ("<=1e-12", [0.0, 1e-12], [2e-12]),
        (">0.01", [0.02], [0.01, -1.0]),
        ("==0", [0.0], [1e-300]),
        ("in [0.9, 1.1]", [0.9, 1.0, 1.1], [0.89, 1.2]),
        (">=0.97", [0.97], [0.96]),
    ],
)
def test_tolerance_expressions(expr, inside, outside):
    assert all(satisfies(v, expr) for v in inside)
    assert not any(satisfies(v, expr) for v in outside)
    assert not satisfies(math.nan, expr)
    assert not satisfies(math.inf, expr)


@pytest.mark.parametrize("bad", ["", "< = 1", "about 1e-3", "in [2, 1]", "<=x"])
def test_bad_tolerance_expressions_are_refused(bad):
    with pytest.raises(ValueError):
        parse_expected(bad)


def test_registry_finds_the_labs_without_importing_torch():
    code = (
        "import sys; from labctl import registry; ids = [l.id for l in registry.discover()]; "
        "print(ids[0], 'torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["causal-attention", "False"]


def test_metric_names_are_unique_and_tolerances_parse():
    table = registry.metric_table()
    assert "future_token_invariance" in table
    for _lab, metric in table.values():
        parse_expected(metric.expected)


def _toy_lab(measure) -> Lab:
    class Params(LabParams):
        n: int = 3

    metrics = (
        Metric("exact", "abs", "==0", "an exact zero"),
        Metric("compared", "abs", "<=1e-10", "a comparison", impls=("both",)),
        Metric("speed", "ratio-of-times", ">1", "a timing", impls=("reference",), timing=True),
    )
    return Lab("toy", "Toy", "?", (Section(PARTS, "§6.13", "h"),), Params, metrics, measure)


def test_judge_fails_unmeasured_metrics_and_timing_never_decides():
    def measure(ctx):
        output = LabOutput()
        output.add("exact", "reference", 0.0)
        output.add("speed", "reference", 0.5)
        return output

    lab = _toy_lab(measure)
    results = judge(lab, measure(None), {"reference", "clean-room", "both"})
    by_key = {(m.name, m.impl): m for m in results}
    assert by_key[("exact", "reference")].passed
    assert not by_key[("exact", "clean-room")].passed
    assert by_key[("exact", "clean-room")].note == "not measured"
    assert not by_key[("compared", "both")].passed
    assert not by_key[("speed", "reference")].passed
    assert not by_key[("speed", "reference")].decides


def test_a_failing_timing_metric_alone_does_not_fail_a_lab():
    def measure(ctx):
        output = LabOutput()
        output.add("exact", "reference", 0.0)
        output.add("speed", "reference", 0.5)
        return output

    with implementations("reference", None) as impls:
        result = run_lab(_toy_lab(measure), 5, impls)
    assert result.passed
    assert [m.passed for m in result.metrics if m.name == "speed"] == [False]


def test_a_lab_that_crashes_fails_by_name():
    def measure(ctx):
        raise ZeroDivisionError("boom")

    with implementations("reference", None) as impls:
        result = run_lab(_toy_lab(measure), 5, impls)
    assert not result.passed
    assert result.error == "lab crashed: ZeroDivisionError: boom"


def test_list_shows_every_lab_and_json_parses():
    human = run_cli("list")
    assert human.exit_code == 0
    assert "causal-attention" in human.output
    listed = json.loads(run_cli("list", "--json").output)
    ids = [lab["id"] for lab in listed["labs"]]
    assert ids == [lab.id for lab in registry.discover()]
    assert listed["tolerances"] == registry.TOLERANCE_TABLE_VERSION == "v4"


def test_unknown_lab_is_a_usage_error_that_lists_the_known_ones(workdir):
    result = run_cli("run", "no-such-lab", "--out", str(workdir / "evidence" / "runs"))
    assert result.exit_code == 2
    assert "unknown lab 'no-such-lab'" in result.output
    assert "causal-attention" in result.output
    assert not (workdir / "evidence").exists()


@pytest.mark.parametrize("ids", [["all", "causal-atention"], ["causal-atention", "all"]])
def test_an_unknown_lab_beside_all_is_refused_not_passed_over(workdir, ids):
    """`run all causal-atention` ran every lab and passed, the typo unsaid."""
    result = run_cli("run", *ids, "--out", str(workdir / "evidence" / "runs"))
    assert result.exit_code == 2, result.output
    assert "unknown lab 'causal-atention'" in result.output
    assert not (workdir / "evidence").exists()


def test_bad_impl_choice_is_refused(workdir):
    result = run_cli("run", "causal-attention", "--impl", "neither")
    assert result.exit_code == 2
    assert "--impl must be one of" in result.output


def test_run_json_is_one_document_and_records_validate(workdir):
    out = workdir / "evidence" / "runs"
    result = run_cli("run", "causal-attention", "--json", "--out", str(out), "--clean-room", ROOM)
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["passed"] is True
    lab = document["labs"][0]
    assert lab["id"] == "causal-attention"
    for metric in lab["metrics"]:
        assert set(metric) >= {"name", "impl", "actual", "expected", "passed"}
        assert metric["impl"] in ("reference", "clean-room", "both")
    yaml_files = sorted(out.glob("causal-attention/*.yaml"))
    json_files = sorted(out.glob("causal-attention/*.json"))
    assert len(yaml_files) == len(json_files) == 1
    from_yaml = EvidenceRecord.model_validate(yaml.safe_load(yaml_files[0].read_text()))
    from_json = EvidenceRecord.model_validate(json.loads(json_files[0].read_text()))
    assert from_yaml == from_json
    assert from_json.seed == 5
    assert from_json.labctl.tolerances == registry.TOLERANCE_TABLE_VERSION
    assert {m.name for m in from_json.metrics} >= {"future_token_invariance", "sdpa_allclose_ratio"}
    environment = from_json.environment
    assert "/" not in environment.platform
    assert environment.device == "cpu"
    artifact = from_json.artifacts[0]
    assert (workdir / artifact.path).is_file()
    manifest = json.loads((out / "module-manifest-v1.json").read_text())
    assert manifest["modules"]["causal-attention"]["record"] == str(json_files[0].relative_to(out))


def test_same_seed_same_values_other_seed_other_values(workdir):
    def values(seed: int) -> dict:
        with implementations("both", Path(ROOM)) as impls:
            result = run_lab(registry.get("causal-attention"), seed, impls)
        return {(m.name, m.impl): m.actual for m in result.metrics if not m.timing}

    first, again, other = values(5), values(5), values(6)
    assert first == again
    assert (
        first[("sdpa_allclose_ratio", "clean-room")] != other[("sdpa_allclose_ratio", "clean-room")]
    )


def test_a_second_run_writes_new_records_and_leaves_the_first_untouched(workdir):
    out = workdir / "evidence" / "runs"
    assert (
        run_cli("run", "causal-attention", "--out", str(out), "--impl", "reference").exit_code == 0
    )
    records = out / "causal-attention"
    first = {p: p.read_bytes() for p in records.rglob("*") if p.is_file()}
    assert (
        run_cli("run", "causal-attention", "--out", str(out), "--impl", "reference").exit_code == 0
    )
    after = {p: p.read_bytes() for p in records.rglob("*") if p.is_file()}
    assert len(after) == 2 * len(first)
    assert all(after[p] == content for p, content in first.items())


def test_the_manifest_loses_nothing_when_runs_race(tmp_path):
    store = EvidenceStore(tmp_path)
    entries = [
        (f"lab-{i}", {"record": f"r{i}", "verified_at": f"2026-01-01T00:00:{i:02d}Z"})
        for i in range(24)
    ]
    threads = [threading.Thread(target=store.point_manifest, args=e) for e in entries]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    modules = store.read_manifest()["modules"]
    assert set(modules) == {name for name, _ in entries}


def test_the_manifest_keeps_the_newest_record(tmp_path):
    store = EvidenceStore(tmp_path)
    store.point_manifest("lab", {"record": "new", "verified_at": "2026-02-01T00:00:00Z"})
    store.point_manifest("lab", {"record": "old", "verified_at": "2026-01-01T00:00:00Z"})
    assert store.read_manifest()["modules"]["lab"]["record"] == "new"


@pytest.mark.parametrize(
    ("fault", "metric"),
    [
        ("mask-reversed", "future_weight_max"),
        ("mask-reversed", "future_token_invariance"),
        ("mask-adds-zero", "future_weight_max"),
        ("no-sqrt-dk", "reference_output_max_error"),
        ("head-seq-confused", "reference_output_max_error"),
    ],
)
def test_causal_attention_fails_on_the_matching_fault(tmp_path, fault, metric):
    room = get_fault(fault).materialize(tmp_path / "room")
    with implementations("both", room) as impls:
        result = run_lab(registry.get("causal-attention"), 5, impls)
    rows = {m.impl: m.passed for m in result.metrics if m.name == metric}
    assert not result.passed
    assert False in rows.values()
    if "reference" in rows:
        assert rows["reference"] is True


def test_a_clean_room_that_hangs_fails_the_lab_not_labctl(workdir):
    room = workdir / "hang"
    room.mkdir()
    (room / "__init__.py").write_text(_hanging_room(), encoding="utf-8")
    result = run_cli(
        "run", "causal-attention", "--clean-room", str(room), "--timeout", "1",
        "--out", str(workdir / "evidence" / "runs"),
    )  # fmt: skip
    assert result.exit_code == 1
    assert "no answer within 1 s" in result.output
    assert "Traceback" not in result.output


def _hanging_room() -> str:
    """A clean room whose causal_mask never returns; everything else is missing."""
    return "def causal_mask(t_q, t_k=None):\n    while True:\n        pass\n"


def test_a_clean_room_importing_torch_is_refused_in_one_line(workdir):
    room = workdir / "sneaky"
    room.mkdir()
    (room / "__init__.py").write_text("x = 1\n__import__('tor' + 'ch')\n")
    result = run_cli("run", "causal-attention", "--clean-room", str(room))
    assert result.exit_code == 1
    assert "sneaky/__init__.py:2: imports torch" in result.output
    assert "Traceback" not in result.output


def _contract_check_output(**env: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", "from labctl.cli.main import main; main()", "contract", "check"],
        capture_output=True,
        text=True,
        cwd=Path(ROOM).parent,
        env={**os.environ, "FORCE_COLOR": "1", **env},
        check=True,
    )
    return done.stdout


def test_no_color_is_honoured():
    colour = re.compile(r"\x1b\[[0-9;]*(3[0-7]|38|9[0-7])[0-9;]*m")
    assert colour.search(_contract_check_output())
    assert not colour.search(_contract_check_output(NO_COLOR="1"))


@pytest.mark.parametrize(
    ("option", "says"),
    [
        (["--timeout", "inf"], "--timeout must be"),
        (["--timeout", "nan"], "--timeout must be"),
        (["--timeout", "-1"], "--timeout must be"),
        (["--timeout", "0"], "--timeout must be"),
        (["--seed", "-1"], "--seed must be an integer from 0"),
        (["--seed", str(2**32)], "--seed must be an integer from 0"),
        (["--impl", "torch"], "--impl must be one of"),
    ],
)
def test_bad_options_exit_2_before_any_lab_runs(workdir, option, says):
    out = workdir / "evidence" / "runs"
    result = run_cli("run", "causal-attention", "--out", str(out), *option)
    assert result.exit_code == 2, result.output
    assert says in result.output
    assert "Traceback" not in result.output
    assert list(workdir.iterdir()) == []


def test_out_that_is_a_file_or_unwritable_is_refused(workdir):
    (workdir / "a-file").write_text("x")
    for out, says in (
        (workdir / "a-file", "is not a directory"),
        (workdir / "a-file" / "below", "is not a directory"),
        (Path("/proc/labctl-test"), "is not writable"),
    ):
        result = run_cli("run", "causal-attention", "--impl", "reference", "--out", str(out))
        assert result.exit_code == 2, result.output
        assert says in result.output
    assert sorted(p.name for p in workdir.iterdir()) == ["a-file"]
    assert (workdir / "a-file").read_text() == "x"


def test_out_dir_holds_records_and_manifest_and_nothing_lands_beside_it(workdir):
    out = workdir / "parent" / "mine"
    result = run_cli("run", "causal-attention", "--impl", "reference", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert [p.name for p in (workdir / "parent").iterdir()] == ["mine"]
    names = sorted(p.name for p in out.iterdir())
    # the manifest's lock is removed once released: no empty .lock file stays
    assert names == ["causal-attention", "module-manifest-v1.json"]
    manifest = json.loads((out / "module-manifest-v1.json").read_text())
    assert (out / manifest["modules"]["causal-attention"]["record"]).is_file()


def test_a_failing_clean_room_keeps_the_reference_numbers(tmp_path):
    room = MASK_RAISES.materialize(tmp_path / "raising")
    lab = registry.get("causal-attention")
    with implementations("both", room) as impls:
        result = run_lab(lab, 5, impls)
    assert not result.passed
    assert "not written yet" in result.error
    reference = {m.name: m for m in result.metrics if m.impl == "reference"}
    assert reference["future_weight_max"].actual == 0.0 and reference["future_weight_max"].passed
    room_rows = [m for m in result.metrics if m.impl == "clean-room"]
    assert room_rows and all(math.isnan(m.actual) and not m.passed for m in room_rows)
    assert [f.impl for f in result.figures if hasattr(f, "matrix")] == ["reference"]


def test_run_all_outside_the_repository_then_template_fill_validates(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    repo.mkdir()
    for args in (["init", "-q"], ["commit", "-q", "--allow-empty", "-m", "start"]):
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True
        )
    monkeypatch.chdir(repo)
    result = run_cli("run", "all", "--out", "../x", "--clean-room", ROOM)
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in repo.iterdir()) == [".git"]
    filled = run_cli("evidence", "template", "--fill", "--root", "../x")
    assert filled.exit_code == 0, filled.output
    assert "outside the repository" in filled.output
    path = repo / "submission.yaml"
    path.write_text(filled.stdout)
    checked = run_cli("evidence", "validate", str(path), "--json")
    assert checked.exit_code == 0, checked.output
    assert json.loads(checked.stdout)["valid"] is True


def test_labs_run_two_at_a_time_in_their_order_a_timed_lab_alone(tmp_path, monkeypatch):
    """The values are those of one lab at a time; a lab that times anything (kv-cache) runs
    with no other lab beside it, before the others (none waits for it beside an idle thread),
    and its result takes its place in the labs' order."""
    from labctl import runner

    real = runner.run_lab
    running: set[str] = set()
    beside: list[set[str]] = []  # the labs running as each one started
    lock = threading.Lock()

    def spy(lab, *args, **kwargs):
        with lock:
            running.add(lab.id)
            beside.append(set(running))
        try:
            threading.Event().wait(0.3)  # time for a second lab to start beside this one
            return real(lab, *args, **kwargs)
        finally:
            with lock:
                running.discard(lab.id)

    monkeypatch.setattr(runner, "run_lab", spy)
    ids = ["entropy", "temperature", "kv-cache", "learned-positions", "decoder-options"]
    report = runner.run_labs(ids, impl="reference", out=tmp_path / "runs")
    assert [r.lab.id for r in report.labs] == ids
    assert max(len(labs) for labs in beside) == 2, beside
    assert all(labs == {"kv-cache"} for labs in beside if "kv-cache" in labs), beside
    assert beside[0] == {"kv-cache"}, beside
    with implementations("reference", None) as impls:
        alone = {lab_id: real(registry.get(lab_id), 5, impls) for lab_id in ids}
    for result in report.labs:
        values = {(m.name, m.impl): m.actual for m in result.metrics if not m.timing}
        one_by_one = alone[result.lab.id].metrics
        assert values == {(m.name, m.impl): m.actual for m in one_by_one if not m.timing}


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_reference_failing_off_its_defaults_is_blamed_on_the_parameters(tmp_path, lang):
    """98 pairs: the scale ablation's variance rows fail for the reference too; the learner is
    told those FAILs are the parameters' doing, with the metrics named."""
    args = ["--lang", lang, "run", "scale-ablation", "--impl", "reference"]
    args += ["--set", "pairs=100", "--set", "pairs_per_block=7", "--out", str(tmp_path / "o")]
    result = CliRunner().invoke(app, args, env={"NO_COLOR": "1", "COLUMNS": "400"})
    assert result.exit_code == 1, result.output
    said = {"en": "the reference itself fails", "zh": "连参考实现也没有通过"}[lang]
    line = next(line for line in result.output.splitlines() if said in line)
    # only those that fail are named (d_k=512 passes at seed 5)
    assert "scaled_score_var[d_k=2]" in line and "d_k=512" not in line
    defaults = CliRunner().invoke(
        app, ["run", "causal-attention", "--impl", "reference", "--out", str(tmp_path / "d")]
    )
    assert defaults.exit_code == 0 and "itself fails" not in defaults.output
