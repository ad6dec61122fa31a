"""`labctl evidence submit`: a filled template from a real run is accepted; every bad one is refused.

Each test works in its own copy of a small git repository (tmp_path) in which
the labs ran once, so the commit and artifact checks have a repository and
nothing is ever written into this repository's own `evidence/`. The course
module needs five labs; while some are not written yet, the catalogue uses a
test module that requires the two metrics causal-attention measures, and the
five-metric flow is skipped with a reason.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
import threading
from pathlib import Path

import pytest
import yaml
from gittools import git, working_directory
from honestrooms import honest_fault, honest_room
from similarityrooms import parenthesise, rename_locals, rewrite_room
from typer.testing import CliRunner

from labctl import registry
from labctl.cli.main import app
from labctl.evidence import modules
from labctl.evidence import submit as submit_module
from labctl.evidence.findings import Report
from labctl.evidence.models import files_digest
from labctl.evidence.modules import DEFAULT_MODULE, MODULES
from labctl.evidence.room import identify, own_room, room_files
from labctl.evidence.submit import _claims
from labctl.lab import Lab, Metric
from labctl.runner import run_labs

TEST_MODULE = modules.Module(
    id="t-causal-attention",
    title="test module: the metrics causal-attention measures",
    section="tests",
    required=("future_token_invariance", "reference_output_max_error"),
)
TWO_LABS = modules.Module(
    id="t-two-labs",
    title="test module: metrics of two labs",
    section="tests",
    required=("future_token_invariance", "scale_ablation_max_weight_delta"),
)
COURSE = MODULES[0]


def labs_for(names: tuple[str, ...]) -> list[str]:
    table = registry.metric_table()
    wanted = {table[n][0].id for n in names if n in table}
    return [lab.id for lab in registry.discover() if lab.id in wanted]


def learner_room(dest: Path) -> Path:
    """A learner's room (`honestrooms`: labctl's rewritten, as a learner writes the same
    formulas), with a line of its own."""
    honest_room(dest)
    with (dest / "primitives.py").open("a") as handle:
        handle.write("\n# written by the learner\n")
    return dest


@pytest.fixture(scope="module")
def golden(tmp_path_factory) -> Path:
    """A git repository in which causal-attention (and scale-ablation) ran once, on seed 5.

    The course module's other labs run only in the one test that needs them: one
    of them trains, which takes a while.
    """
    root = tmp_path_factory.mktemp("golden")
    (root / "README.md").write_text("learner repository\n")
    learner_room(root / "my_room")
    git("init", "-q", cwd=root)
    git("add", "README.md", "my_room", cwd=root)
    git("commit", "-q", "-m", "init", cwd=root)
    with working_directory(root):
        needed = labs_for(TEST_MODULE.required + TWO_LABS.required)
        report = run_labs(
            needed, seed=5, impl="both", out=Path("evidence/runs"), clean_room=Path("my_room")
        )
    assert any(lab.lab.id == "causal-attention" and lab.passed for lab in report.labs)
    return root


@pytest.fixture
def repo(golden, tmp_path, monkeypatch) -> Path:
    """A fresh copy of the golden repository as the working directory, with the test module."""
    target = tmp_path / "repo"
    shutil.copytree(golden, target, symlinks=True)
    monkeypatch.chdir(target)
    monkeypatch.setattr(modules, "MODULES", (*MODULES, TEST_MODULE))
    return target


# What `submit` re-measured, by the claims' labs and implementations, seed and room content:
# for `measured_once`.
_MEASURED: dict = {}


@pytest.fixture
def measured_once(monkeypatch):
    """The claims re-measured once for this module, for the tests whose subject is what
    `submit` decides from the measurements, not the measuring: every repository here is a
    copy of the golden one, so its room (the same files) re-measured at the same seed gives
    the same rows. The first such test measures in a sandboxed room of its own, as `submit`
    always does; its repeats (forty, each a room started and a lab run twice) were this
    module's largest cost. A room of other files, or another seed, is measured anew."""
    real = submit_module._measure

    def once(claims, seed, clean_room, timeout_s, isolation):
        room = None if clean_room is None else files_digest(room_files(clean_room))
        labs = tuple(sorted({(c.lab.id, c.impl) for c in claims}))
        key = (labs, seed, room, timeout_s, isolation)
        if key not in _MEASURED:
            _MEASURED[key] = real(claims, seed, clean_room, timeout_s, isolation)
        return _MEASURED[key]

    monkeypatch.setattr(submit_module, "_measure", once)


def invoke(*args: str):
    # content, not layout, is tested here: a terminal wide enough that no line wraps
    result = CliRunner(env={"COLUMNS": "300"}).invoke(app, list(args))
    assert "Traceback" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def filled(module: str = TEST_MODULE.id) -> str:
    result = invoke("evidence", "template", "--module", module, "--fill")
    assert result.exit_code == 0, result.output
    return result.stdout


def snapshot(root: Path) -> dict[str, str]:
    """Every file under the evidence root, with its digest."""
    evidence = root / "evidence"
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(evidence.rglob("*"))
        if p.is_file()
    }


def submit(path: Path, *extra: str):
    result = invoke("evidence", "submit", str(path), "--json", *extra)
    return result, json.loads(result.stdout) if result.stdout.strip() else None


# -- accepted ------------------------------------------------------------------------


def test_filled_template_has_no_placeholders(repo):
    text = filled()
    # the header's comment lines name the <...> placeholders; the fields must hold none
    fields = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    assert "<" not in fields.replace("<=", "")
    data = yaml.safe_load(text)
    assert data["seed"] == 5
    assert data["commit"] == git("rev-parse", "HEAD", cwd=repo)
    assert data["commit_dirty"] is False
    assert [m["name"] for m in data["metrics"]] == list(TEST_MODULE.required)
    assert {m["impl"] for m in data["metrics"]} == {"clean-room", "both"}
    assert data["artifacts"] and all((repo / a["path"]).is_file() for a in data["artifacts"])
    assert data["commands"][0].startswith("labctl run causal-attention --seed 5")


def test_filled_template_from_a_real_run_is_accepted_once(repo):
    path = repo / "submission.yaml"
    path.write_text(filled())
    assert invoke("evidence", "validate", str(path)).exit_code == 0
    result, doc = submit(path)
    assert result.exit_code == 0, result.output
    assert doc["accepted"] is True and doc["already_recorded"] is False
    assert doc["problems"] == []
    assert [r["reproduced"] for r in doc["reproduced"]] == [True, True]
    stored = repo / doc["stored"]
    assert stored.parent == repo / "evidence" / "submissions" / TEST_MODULE.id
    assert stored.read_bytes() == path.read_bytes()
    receipt = json.loads(stored.with_suffix(".receipt.json").read_text())
    assert receipt["reproduced"] == doc["reproduced"]
    manifest = json.loads((repo / "evidence" / "module-manifest-v1.json").read_text())
    assert manifest["modules"][TEST_MODULE.id]["record"] == str(
        stored.relative_to(repo / "evidence")
    )
    # The same file again: already recorded (exit 0: it stands accepted), nothing written.
    before = snapshot(repo)
    again, doc = submit(path)
    assert again.exit_code == 0
    assert doc["already_recorded"] is True and doc["stored"] == str(stored.relative_to(repo))
    assert snapshot(repo) == before
    human = invoke("evidence", "submit", str(path))
    assert human.exit_code == 0
    assert human.stdout.splitlines()[-1].startswith("already recorded: ")
    # The same content as JSON is the same submission.
    as_json = repo / "submission.json"
    as_json.write_text(json.dumps(yaml.safe_load(path.read_text()), indent=2))
    result, doc = submit(as_json)
    assert result.exit_code == 0 and doc["already_recorded"] is True
    assert snapshot(repo) == before
    # The room changed since its runs: looked at again and refused, not "already recorded"
    # (a passing room swapped for a failing one after its first submission stood accepted).
    changed = sorted((repo / "my_room").glob("*.py"))[0]
    changed.write_text(changed.read_text() + "\nCHANGED = True\n")
    result, doc = submit(path)
    assert result.exit_code == 1 and doc["accepted"] is False, result.output
    assert doc["already_recorded"] is False
    assert f"changed {changed.name}" in json.dumps(doc["problems"]), doc["problems"]


@pytest.mark.usefixtures("measured_once")
def test_dirty_commit_is_a_warning_not_a_refusal(repo):
    data = yaml.safe_load(filled())
    data["commit_dirty"] = True
    path = repo / "dirty.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    result, doc = submit(path)
    assert result.exit_code == 0, result.output
    assert any(w["field"] == "commit_dirty" for w in doc["warnings"])


def test_a_tolerance_written_another_way_is_the_same_tolerance(repo):
    data = yaml.safe_load(filled())
    table = registry.metric_table()
    name = data["metrics"][0]["name"]
    op, bound = table[name][1].expected[:2], table[name][1].expected[2:]
    data["metrics"][0]["expected"] = f"{op} {float(bound):.1e}"
    path = repo / "respelled.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    result = invoke("evidence", "validate", str(path))
    assert result.exit_code == 0, result.output


@pytest.mark.usefixtures("measured_once")
def test_human_submit_output(repo):
    path = repo / "submission.yaml"
    path.write_text(filled())
    result = invoke("evidence", "submit", str(path))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[-1].startswith("accepted: submission.yaml")
    assert any(
        line.startswith("reproduced: metrics[1] reference_output_max_error") for line in lines
    )


def test_fill_keeps_one_seed_across_labs(repo, monkeypatch):
    monkeypatch.setattr(modules, "MODULES", (*MODULES, TWO_LABS))
    out = Path("evidence/runs")
    run_labs(["causal-attention"], seed=7, impl="both", out=out, clean_room=Path("my_room"))
    # The newest record is on seed 7; scale-ablation has none on that seed yet.
    result = invoke("evidence", "template", "--module", TWO_LABS.id, "--fill")
    data = yaml.safe_load(result.stdout)
    assert data["seed"] == 7
    assert data["metrics"][1]["actual"] == "<recorded-value>"
    assert "labctl run scale-ablation --seed 7" in result.stderr
    # Back on seed 5: the older scale-ablation record of seed 5 is found under runs/.
    run_labs(["causal-attention"], seed=5, impl="both", out=out, clean_room=Path("my_room"))
    data = yaml.safe_load(invoke("evidence", "template", "--module", TWO_LABS.id, "--fill").stdout)
    assert data["seed"] == 5
    assert all(isinstance(m["actual"], float) for m in data["metrics"])
    assert len(data["commands"]) == 2
    path = repo / "two.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    result, doc = submit(path)
    assert result.exit_code == 0, result.output


# -- the commands are never run ------------------------------------------------------


@pytest.mark.parametrize("tamper", [False, True], ids=["accepted", "refused-on-metrics"])
@pytest.mark.usefixtures("measured_once")
def test_commands_are_recorded_never_run(repo, tmp_path, tamper):
    victim = tmp_path / "victim"
    victim.mkdir()
    pwned = tmp_path / "pwned"
    data = yaml.safe_load(filled())
    data["commands"] = [
        f"touch {pwned}; rm -rf {victim}",
        f"$(touch {pwned})",
        f'python -c \'open("{pwned}", "w")\'',
    ]
    if tamper:
        data["metrics"][1]["actual"] = 5e-11  # passes <=1e-10, but is not what the code gives
    path = repo / "shell.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    result, doc = submit(path)
    assert not pwned.exists()
    assert victim.is_dir()
    if tamper:
        assert result.exit_code == 1
        assert [p["field"] for p in doc["problems"]] == ["metrics[1].actual"]
        assert "not reproduced" in doc["problems"][0]["reason"]
    else:
        assert result.exit_code == 0, result.output
        assert doc["accepted"] is True
    assert not pwned.exists()


# -- the catalogue of bad submissions ---------------------------------------------------


def _set(path: tuple, value):
    def mutate(data: dict, repo: Path, tmp: Path) -> None:
        target = data
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return mutate


def _drop_metric(index: int):
    def mutate(data, repo, tmp):
        del data["metrics"][index]

    return mutate


def _duplicate_metric(data, repo, tmp):
    data["metrics"].append(copy.deepcopy(data["metrics"][0]))


def _unknown_metric(data, repo, tmp):
    data["metrics"].append({"name": "made_up_metric", "expected": "<=1", "actual": 0.5})


def _artifact(text_of):
    def mutate(data, repo, tmp):
        data["artifacts"][0] = text_of(repo, tmp)

    return mutate


def _outside_file(tmp: Path) -> Path:
    outside = tmp / "outside.csv"
    outside.write_text("1,2\n")
    return outside


def _symlink_out(repo: Path, tmp: Path) -> str:
    link = repo / "evidence" / "link.csv"
    link.symlink_to(_outside_file(tmp))
    return "evidence/link.csv"


def _dotdot(repo: Path, tmp: Path) -> str:
    _outside_file(tmp)
    return "../outside.csv"


def _sha_mismatch(data, repo, tmp):
    data["artifacts"][0]["sha256"] = "0" * 64


def _seed_as_string(data, repo, tmp):
    data["seed"] = "5"


def _metrics_as_dict(data, repo, tmp):
    data["metrics"] = {row["name"]: row["actual"] for row in data["metrics"]}


RAW_CASES = {
    "malformed-yaml": (b"schema: learn-llm.evidence.v1\nmetrics: [1,\n  b: }\n", "file", "line 3"),
    "empty-file": (b"", "file", "empty"),
    "binary-file": (b"\x89PNG\r\n\x1a\n\x00\x00\x00", "file", "binary"),
    "huge-file": (b"schema: x\n" + b"#" * (1 << 20), "file", "larger than"),
    "alias-bomb": (
        "\n".join(
            ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
            + [
                f"{c}: &{c} [{','.join([f'*{p}'] * 9)}]"
                for p, c in zip("abcdefgh", "bcdefghi", strict=True)
            ]
        ).encode(),
        "file",
        "aliases",
    ),
    "python-tag": (
        b"schema: !!python/object/apply:os.system ['touch pwned-by-yaml']\n",
        "file",
        "constructor",
    ),
    "top-level-list": (b"- 1\n- 2\n", "(document)", "mapping"),
    # Two values for one key: a reader sees the first, PyYAML and json.loads keep the last.
    "duplicate-key-yaml": (
        b"schema: learn-llm.evidence.v1\nmetrics:\n  - name: future_token_invariance\n"
        b"    actual: 0.5\n    actual: 0.0\n",
        "file",
        "line 5, column 5: duplicate key 'actual' (first at line 4)",
    ),
    "duplicate-key-json": (
        b'{"schema": "learn-llm.evidence.v1", "seed": 5, "seed": 6}',
        "file",
        "duplicate key 'seed' (first at line 1)",
    ),
}

DATA_CASES = {
    "wrong-schema-version": (_set(("schema",), "learn-llm.evidence.v2"), "schema", "unknown schema version"),
    "unknown-field": (_set(("grade",), "A+"), "grade", "unknown field"),
    "unknown-nested-field": (_set(("metrics", 0, "note"), "x"), "metrics[0].note", "unknown field"),
    "placeholder-left": (_set(("metrics", 1, "actual"), "<recorded-value>"), "metrics[1].actual", "placeholder <recorded-value>"),
    "placeholder-in-prose": (_set(("known_failures",), ["see <sanitized-failure-or-none>"]), "known_failures[0]", "placeholder"),
    "missing-required-metric": (_drop_metric(1), "metrics", "required metric 'reference_output_max_error' missing"),
    "duplicate-metric": (_duplicate_metric, "metrics[2].name", "claimed twice"),
    "unknown-metric": (_unknown_metric, "metrics[2].name", "not reproducible"),
    "nan-actual": (_set(("metrics", 0, "actual"), float("nan")), "metrics[0].actual", "finite"),
    "inf-actual": (_set(("metrics", 0, "actual"), float("inf")), "metrics[0].actual", "finite"),
    "actual-fails-expected": (_set(("metrics", 0, "actual"), 0.5), "metrics[0].actual", "does not satisfy <=1e-12"),
    "not-reproduced": (_set(("metrics", 1, "actual"), 5e-11), "metrics[1].actual", "not reproduced"),
    "loosened-tolerance": (_set(("metrics", 0, "expected"), "<=1"), "metrics[0].expected", "not the v4 tolerance"),
    "impl-not-measured": (_set(("metrics", 1, "impl"), "reference"), "metrics[1].impl", "measured on both"),
    "commit-not-in-repo": (_set(("commit",), "0123456789abcdef0123456789abcdef01234567"), "commit", "not a commit of this repository"),
    "commit-unknown": (_set(("commit",), "unknown"), "commit", "unknown"),
    "artifact-absolute": (_artifact(lambda repo, tmp: str(_outside_file(tmp))), "artifacts[0]", "absolute path"),
    "artifact-dotdot": (_artifact(_dotdot), "artifacts[0]", "'..'"),
    "artifact-symlink-out": (_artifact(_symlink_out), "artifacts[0]", "escapes the repository"),
    "artifact-missing": (_artifact(lambda repo, tmp: "evidence/runs/nope.csv"), "artifacts[0]", "no such file"),
    "artifact-sha256-mismatch": (_sha_mismatch, "artifacts[0].sha256", "has sha256"),
    "verified-at-future": (_set(("verified_at",), "2999-01-01T00:00:00Z"), "verified_at", "in the future"),
    "verified-at-not-iso": (_set(("verified_at",), "last tuesday"), "verified_at", "ISO 8601"),
    "seed-as-string": (_seed_as_string, "seed", "should be an integer"),
    "seed-negative": (_set(("seed",), -1), "seed", "negative"),
    "metrics-as-dict": (_metrics_as_dict, "metrics", "should be a list"),
    "environment-unsanitized": (_set(("environment", "platform"), "/home/ada/linux"), "environment.platform", "path, user or host"),
    "unknown-module": (_set(("module",), "99-nope"), "module", "unknown module"),
    "lab-as-module": (_set(("module",), "causal-attention"), "module", "not a course module"),
    "cost-negative": (_set(("cost", "gross_usd"), -1), "cost.gross_usd", "should be at least 0"),
    "passed-false-inside-tolerance": (_set(("metrics", 0, "passed"), False), "metrics[0].passed", "says False, but 0.0 satisfies <=1e-12"),
}  # fmt: skip


# Refused by submit only: validate does not re-measure, and warns about what cannot be.
SUBMIT_ONLY = {"not-reproduced", "unknown-metric", "lab-as-module"}


def _assert_refused(repo: Path, path: Path, field: str, reason: str, validate_too: bool = True):
    before = snapshot(repo)
    result, doc = submit(path)
    assert result.exit_code == 1, result.output
    assert doc["accepted"] is False and doc["stored"] is None
    fields = [p["field"] for p in doc["problems"]]
    assert fields and all(f == field for f in fields), doc["problems"]
    assert any(reason in p["reason"] for p in doc["problems"]), doc["problems"]
    assert snapshot(repo) == before, "a refused submission wrote something"
    assert not (repo / "evidence" / "submissions").exists()
    checked = invoke("evidence", "validate", str(path), "--json")
    if validate_too:
        assert checked.exit_code == 1
        assert [p["field"] for p in json.loads(checked.stdout)["problems"]] == fields
    else:
        assert checked.exit_code == 0
        assert any(w["field"] == field for w in json.loads(checked.stdout)["warnings"]) or (
            "not reproduced" in reason
        )


@pytest.mark.parametrize("case", list(DATA_CASES))
@pytest.mark.usefixtures("measured_once")
def test_bad_submission_is_refused(repo, tmp_path, case):
    mutate, field, reason = DATA_CASES[case]
    data = yaml.safe_load(filled())
    mutate(data, repo, tmp_path)
    path = repo / "bad.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    _assert_refused(repo, path, field, reason, validate_too=case not in SUBMIT_ONLY)


@pytest.mark.parametrize("case", list(RAW_CASES))
@pytest.mark.usefixtures("measured_once")
def test_bad_file_is_refused(repo, case):
    raw, field, reason = RAW_CASES[case]
    path = repo / "bad.yaml"
    path.write_bytes(raw)
    _assert_refused(repo, path, field, reason)
    assert not (repo / "pwned-by-yaml").exists()


@pytest.mark.parametrize("where", ["missing", "directory"])
def test_usage_errors_exit_2(repo, where):
    target = repo / "nope.yaml" if where == "missing" else repo / "evidence"
    for command in ("validate", "submit"):
        result = invoke("evidence", command, str(target))
        assert result.exit_code == 2
        assert result.stderr.startswith("error: ")
        assert result.stdout == ""


@pytest.mark.usefixtures("measured_once")
def test_every_problem_at_once(repo, tmp_path):
    data = yaml.safe_load(filled())
    data["schema"] = "learn-llm.evidence.v9"
    data["commit"] = "<learner-commit-sha>"
    data["verified_at"] = "2999-01-01"
    data["metrics"][0]["actual"] = 0.5
    data["metrics"][1]["actual"] = 5e-11
    data["artifacts"][0]["path"] = "/etc/passwd"
    data["extra"] = 1
    path = repo / "many.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    before = snapshot(repo)
    result, doc = submit(path)
    assert result.exit_code == 1
    fields = [p["field"] for p in doc["problems"]]
    assert fields == [
        "schema",
        "commit",
        "verified_at",
        "metrics[0].actual",
        "metrics[1].actual",
        "artifacts[0].path",
        "extra",
    ]
    assert snapshot(repo) == before


def test_timing_metrics_are_not_re_measured(monkeypatch):
    timing = Metric("decode_speedup", "ratio-of-times", ">1", "speed", timing=True)
    lab = Lab("fake", "fake", "?", (), None, (timing,), lambda ctx: None)  # type: ignore[arg-type]
    monkeypatch.setattr(registry, "metric_table", lambda: {"decode_speedup": (lab, timing)})
    report = Report(path=Path("x.yaml"))
    report.data = {"metrics": [{"name": "decode_speedup", "expected": ">1", "actual": 3.0}]}
    assert _claims(report) == []
    assert report.problems == []
    assert "not re-measured" in report.warnings[0].reason


# -- the course module ---------------------------------------------------------------


def test_course_module_template_flow(repo):
    have = labs_for(TEST_MODULE.required + TWO_LABS.required)
    rest = [lab for lab in labs_for(COURSE.required) if lab not in have]
    run_labs(rest, seed=5, impl="both", out=Path("evidence/runs"), clean_room=Path("my_room"))
    text = filled(DEFAULT_MODULE)
    data = yaml.safe_load(text)
    assert [m["name"] for m in data["metrics"]] == list(COURSE.required)
    assert "<" not in json.dumps(data).replace("<=", "")
    path = repo / "course.yaml"
    path.write_text(text)
    result, doc = submit(path)
    assert result.exit_code == 0, result.output
    assert all(r["reproduced"] for r in doc["reproduced"])
    assert len(doc["reproduced"]) == len(COURSE.required)
    assert (repo / doc["stored"]).is_file()


# -- issue 8: input refused cleanly, problems named and shown safely -------------------


def test_a_refused_claim_names_its_metric_and_implementation(repo):
    data = yaml.safe_load(filled())
    data["metrics"][0]["actual"] = 0.5
    path = repo / "named.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    human = invoke("evidence", "validate", str(path))
    assert human.exit_code == 1
    assert (
        "metrics[0] (future_token_invariance, clean-room): actual 0.5 does not satisfy <=1e-12"
        in human.stdout.splitlines()
    )
    doc = json.loads(invoke("evidence", "validate", str(path), "--json").stdout)
    assert doc["problems"] == [
        {
            "field": "metrics[0].actual",
            "reason": "0.5 does not satisfy <=1e-12",
            "metric": "future_token_invariance",
            "impl": "clean-room",
        }
    ]


def test_terminal_controls_in_field_names_and_placeholders_are_shown_escaped(repo):
    data = yaml.safe_load(filled())
    data["\x1b[2J\x1b]0;owned\x07"] = 1
    data["metrics"][1]["actual"] = "<\u202eeulav-dedrocer>"
    data["known_failures"] = ["see <\x9b31m-or-none>"]
    path = repo / "controls.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    for args in ((), ("--json",)):
        result = invoke("evidence", "validate", str(path), *args)
        assert result.exit_code == 1
        for raw in ("\x1b", "\x07", "\u202e", "\x9b"):
            assert raw not in result.output
    lines = invoke("evidence", "validate", str(path)).stdout
    assert "\\x1b[2J\\x1b]0;owned\\x07: unknown field" in lines
    assert "placeholder <\\u202eeulav-dedrocer> left" in lines
    assert "placeholder <\\x9b31m-or-none> left" in lines


def test_a_fifo_is_refused_at_once(repo):
    fifo = repo / "evidence.fifo"
    os.mkfifo(fifo)
    done: dict = {}

    def validate():
        done["result"] = invoke("evidence", "validate", str(fifo))

    worker = threading.Thread(target=validate, daemon=True)
    worker.start()
    worker.join(timeout=10)
    if worker.is_alive():  # blocked in open(): unblock it with a writer, then fail
        with open(fifo, "wb"):
            pass
        worker.join(timeout=10)
        pytest.fail("evidence validate blocked on a FIFO")
    result = done["result"]
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ") and "is a FIFO, not a regular file" in result.stderr
    assert result.stdout == ""


@pytest.mark.usefixtures("measured_once")
def test_the_manifest_keeps_the_later_moment_not_the_later_string(repo):
    """05:30-05:00 is 10:30Z: later than 10:20Z though it sorts first as a string."""
    data = yaml.safe_load(filled())
    stored = {}
    for name, moment in (
        ("later", "2026-01-01T05:30:00-05:00"),
        ("earlier", "2026-01-01T10:20:00Z"),
    ):
        data["verified_at"] = moment
        path = repo / f"{name}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        result, doc = submit(path)
        assert result.exit_code == 0, result.output
        stored[name] = doc["stored"]
    manifest = json.loads((repo / "evidence" / "module-manifest-v1.json").read_text())
    pointer = manifest["modules"][TEST_MODULE.id]
    assert pointer["verified_at"] == "2026-01-01T05:30:00-05:00"
    assert "evidence/" + pointer["record"] == stored["later"]


def test_a_claim_is_re_measured_on_its_own_implementation(repo, tmp_path):
    """Claims copied from a correct run, re-measured on a faulty clean room: refused.

    The reference's row of the same metric still reads 0.0; a claim matched by name
    alone would be compared with it and pass.
    """
    honest_fault("mask-reversed", repo / "faulty")
    data = yaml.safe_load(filled())
    data["labctl"]["clean_room"] = identify(Path("faulty")).model_dump()
    path = repo / "copied.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    result, doc = submit(path)
    assert result.exit_code == 1, result.output
    by_field = {p["field"]: p for p in doc["problems"]}
    invariance = by_field["metrics[0].actual"]
    assert (invariance["metric"], invariance["impl"]) == ("future_token_invariance", "clean-room")
    assert invariance["reason"].startswith("not reproduced: claimed 0.0, labctl measured ")
    measured = next(r for r in doc["reproduced"] if r["field"] == "metrics[0]")
    assert measured["impl"] == "clean-room" and measured["measured"] > 1e-3
    assert not (repo / "evidence" / "submissions").exists()


# -- issue 20: the submission names its room ------------------------------------------------


def test_the_room_named_is_re_measured_and_a_change_to_it_since_the_runs_is_refused(repo):
    data = yaml.safe_load(filled())
    assert data["labctl"]["clean_room"]["path"] == "my_room"
    assert data["labctl"]["clean_room"]["own"] is False
    with (repo / "my_room" / "attention.py").open("a") as handle:
        handle.write("# changed after the runs\n")
    (repo / "my_room" / "extra.py").write_text("x = 1\n")
    path = repo / "submission.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    before = snapshot(repo)
    result, doc = submit(path)
    assert result.exit_code == 1, result.output
    assert doc["problems"] == [
        {
            "field": "labctl.clean_room",
            "reason": "the clean room changed since these runs: changed attention.py; added "
            "extra.py; run the labs again and fill the template again",
        }
    ]
    assert doc["reproduced"] == [] and snapshot(repo) == before


def test_a_submission_made_from_labctls_own_room_is_refused(repo):
    """`labctl run` with no ./clean_room runs labctl's own room: it says so, and its
    records can never be a learner's evidence."""
    run = invoke("run", "causal-attention", "--json")
    assert run.exit_code == 0, run.output
    assert json.loads(run.stdout)["clean_room"]["own"] is True
    assert "is labctl's own clean room (or a copy of it), not yours" in " ".join(run.stderr.split())
    made = invoke("evidence", "template", "--module", TEST_MODULE.id, "--fill")
    assert "the records were made with labctl's own clean room" in made.stderr
    path = repo / "own.yaml"
    path.write_text(made.stdout)
    result, doc = submit(path)
    assert result.exit_code == 1, result.output
    assert [p["field"] for p in doc["problems"]] == ["labctl.clean_room"]
    assert doc["problems"][0]["reason"].startswith("made with labctl's own clean room")
    # A verbatim copy in the repository, said by hand to be `own: false`: its files are
    # labctl's, so it is labctl's own.
    shutil.copytree(own_room(), repo / "copied", ignore=shutil.ignore_patterns("__pycache__"))
    data = yaml.safe_load(made.stdout)
    data["labctl"]["clean_room"] = {**identify(Path("copied")).model_dump(), "own": False}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    result, doc = submit(path)
    assert result.exit_code == 1
    assert doc["problems"][0]["reason"].startswith("made with labctl's own clean room")


def test_a_room_whose_claims_reproduce_but_which_fails_verify_is_refused(repo):
    """rope-half-split breaks RoPE only: causal-attention's claims reproduce on it."""
    honest_fault("rope-half-split", repo / "rope_room")
    run = invoke("run", "causal-attention", "--clean-room", "rope_room", "--json")
    assert run.exit_code == 0, run.output
    path = repo / "rope.yaml"
    path.write_text(filled())
    result, doc = submit(path)
    assert result.exit_code == 1, result.output
    assert all(r["reproduced"] for r in doc["reproduced"])
    (problem,) = doc["problems"]
    assert problem["field"] == "labctl.clean_room"
    assert problem["reason"].startswith("the clean room fails verify (rope")


@pytest.mark.parametrize("copied", ["whole", "one-function"])
def test_a_room_with_labctls_own_functions_renamed_is_refused_naming_them(repo, copied):
    """A copy of labctl's room with every local renamed and every name in parentheses (the
    whole room), or a learner's room whose softmax is labctl's so rewritten: refused, the
    functions named; `grade` judges a room with the same detector (`labctl.fingerprints`)."""

    def rewrite(text: str) -> str:
        return parenthesise(rename_locals(text))

    room = repo / "mine"
    if copied == "whole":
        rewrite_room(own_room(), room, rewrite)
    else:
        honest_room(room)
        theirs = rewrite((own_room() / "primitives.py").read_text())
        start = theirs.index("def softmax(")
        end = theirs.index("\ndef ", start + 1)
        mine = (room / "primitives.py").read_text()
        (room / "primitives.py").write_text(mine + "\n\n" + theirs[start:end] + "\n")
    run = invoke("run", "causal-attention", "--clean-room", "mine", "--json")
    assert run.exit_code == 0, run.output
    path = repo / "mine.yaml"
    path.write_text(filled())
    result, doc = submit(path)
    assert result.exit_code == 1, result.output
    (problem,) = doc["problems"]
    assert problem["field"] == "labctl.clean_room"
    named = problem["reason"].split(" of this clean room are labctl's own", 1)[0].split(", ")
    assert named == (["softmax"] if copied == "one-function" else named) and len(named) >= 1
    if copied == "whole":
        assert {"softmax", "rope", "decoder_forward"} <= set(named)


def test_a_root_that_is_a_file_is_refused_before_anything_is_re_measured(repo, monkeypatch):
    """It was found only when the accepted record was written, after every claim had been
    re-measured: `cannot write ROOT/submissions/...: Not a directory`."""
    path = repo / "submission.yaml"
    path.write_text(filled())
    (repo / "taken").write_text("mine\n")

    def not_run(*args, **kwargs):
        raise AssertionError("re-measured")

    monkeypatch.setattr(submit_module, "submit", not_run)
    before = snapshot(repo)
    result, doc = submit(path, "--root", "taken")
    assert result.exit_code == 2, result.output
    assert doc["error"]["message"] == "--root taken: taken is not a directory"
    assert (repo / "taken").read_text() == "mine\n" and snapshot(repo) == before


@pytest.mark.usefixtures("measured_once")
def test_a_lone_surrogate_escape_is_refused_in_words_not_an_internal_error(repo):
    """`"\\ud800"` in YAML or JSON reads as half a character, which UTF-8 cannot encode:
    `validate` said valid, and `submit` re-measured every claim, then ended in "internal
    error: UnicodeEncodeError" when it took the record's digest."""
    text = filled().replace("commands:\n- ", 'commands:\n- "labctl \\ud800"\n- ', 1)
    path = repo / "submission.yaml"
    path.write_text(text)
    said = "the text 'labctl \\ud800' holds a lone surrogate, half of a character"
    checked = invoke("evidence", "validate", str(path), "--json")
    assert checked.exit_code == 1, checked.output
    assert said in json.loads(checked.stdout)["problems"][0]["reason"]
    before = snapshot(repo)
    result, doc = submit(path)
    assert result.exit_code == 1, result.output
    assert doc["accepted"] is False and said in doc["problems"][0]["reason"], doc
    assert snapshot(repo) == before
