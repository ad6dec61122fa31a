"""Inputs no one knows in advance (issue 20): every verify input drawn from a run-time seed,
printed and recorded so `--seed N` repeats a run; one seed per grading batch, kept from the
learners; a reference cache edited between runs is named, never used (issue 19)."""

from __future__ import annotations

import io
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from clitools import invoke
from fixturetools import INT_ONLY, arrays, same
from gradetools import copy_room, rubric_without

from labctl import contract
from labctl.faults import project_clean_room
from labctl.verify import fixtures as fx
from labctl.verify.bad_input import bad_cases
from labctl.verify.builders import SEED, fresh_seed
from labctl.verify.functions import CAUSAL_FUNCTIONS

FIXED = [1, 2, 77, 4096, 2**32 - 1]
SEEDS = [*FIXED, *(fresh_seed() for _ in range(15))]
# Named by place, not value: every pytest-xdist worker must collect the same test ids.
IDS = [*map(str, FIXED), *(f"fresh-{i}" for i in range(15))]


# -- the inputs, at many seeds ------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS[:8], ids=IDS[:8])
def test_every_input_changes_with_the_seed_and_keeps_its_structure(seed):
    """Same names, same structure; a different value in every fixture, probe, causal variant
    and bad case that holds a float array (the int-only functions: a size or length)."""
    for function in contract.function_names():
        published, drawn = fx.fixtures(function), fx.fixtures(function, seed)
        assert [f.name for f in drawn] == [f.name for f in published]
        for old, new in zip(published, drawn, strict=True):
            assert new.seed == seed and new.kwargs.keys() == old.kwargs.keys()
            assert not same((old.args, dict(old.kwargs)), (new.args, dict(new.kwargs))) or (
                function in INT_ONLY  # a mask's few sizes may repeat the published ones
            ), (function, new.name)
            if function not in INT_ONLY:
                # Sizes stay: each is a structural promise (GQA's ratio, Tq < Tk, D = 3).
                shapes = [a.shape for a in arrays((old.args, dict(old.kwargs)))]
                assert shapes == [a.shape for a in arrays((new.args, dict(new.kwargs)))]
        for old, new in zip(fx.probes(function), fx.probes(function, seed), strict=True):
            assert not same(old.args, new.args)
        for old, new in zip(bad_cases(function), bad_cases(function, seed), strict=True):
            assert old.name == new.name
            if list(arrays(old.args)):
                assert not same(old.args, new.args)
    for function in CAUSAL_FUNCTIONS:
        pairs = zip(fx.causal_variants(function), fx.causal_variants(function, seed), strict=True)
        for (t, old), (t2, new) in pairs:
            assert t == t2 and not same(old.args, new.args)


def _by_name(function: str, seed: int) -> dict:
    return {f.name: f.args for f in fx.fixtures(function, seed)}


def test_the_int_only_functions_keep_every_promise_of_their_names_at_any_seed():
    sizes_seen: set = set()
    for seed in SEEDS:
        causal = _by_name("causal_mask", seed)
        (t,) = causal["square-default"]
        tq, tk = causal["tq<tk"]
        one, tk1 = causal["decode-one"]
        a, b = causal["square-explicit"]
        assert t >= 1 and 1 <= tq < tk and one == 1 and tk1 >= 2 and a == b
        window = _by_name("sliding_window_mask", seed)
        t, w = window["square"]
        assert 1 < w < t
        assert window["window-1"][1] == 1
        tq, w, tk = window["tq<tk"]
        assert tq < tk and w < tk
        t, w = window["window>t"]
        assert w > t
        padding = _by_name("padding_mask", seed)
        lengths, t = padding["with-empty"]
        assert 0 in lengths and t in lengths and lengths.dtype == np.int64
        lengths, t = padding["short"]
        assert all(0 < n < t for n in lengths)
        table = _by_name("sinusoidal_positions", seed)
        assert table["even"][1] % 2 == 0 and table["odd-width"][1] % 2 == 1
        positions = _by_name("rope", seed)["non-consecutive"][1]
        diffs = np.diff(positions)
        assert (diffs < 0).any() and len(set(positions.tolist())) < len(positions)
        assert (np.abs(diffs) > 1).any() and positions.dtype == np.int64
        assert _by_name("rope", seed)["2-d-theta"][1].max() >= 500
        sizes_seen.add((t, tq, tk))
    assert len(sizes_seen) > 5  # the sizes do vary


def test_a_fixture_built_for_one_seed_is_never_served_for_another():
    assert fx.fixtures("softmax", 6) is not fx.fixtures("softmax", 7)
    assert fx.fixtures("softmax") is fx.fixtures("softmax", SEED)
    six, seven = fx.fixtures("softmax", 6)[0], fx.fixtures("softmax", 7)[0]
    assert (six.seed, seven.seed) == (6, 7)
    assert not np.array_equal(fx.reference_output(six), fx.reference_output(seven))


# -- verify: the seed printed, recorded, and enough to repeat a run -----------------------

_TIMING = {"wall_time_s", "verified_at", "records", "history", "elapsed_s"}


def _without_timing(value):
    if isinstance(value, dict) and value.get("name") == "memory":
        # A measured peak (the memory check's) moves between runs as timings do; its verdict
        # is compared, not its figure.
        return {k: value[k] for k in ("function", "name", "passed", "status")}
    if isinstance(value, dict):
        return {k: _without_timing(v) for k, v in value.items() if k not in _TIMING}
    if isinstance(value, list):
        return [_without_timing(v) for v in value]
    if isinstance(value, str):  # the runs check names its slowest call
        return re.sub(r"slowest [\d.]+ ms", "slowest - ms", value)
    return value


def _verify(tmp_path: Path, *args: str):
    return invoke("verify", "clean-room", "--out", str(tmp_path / "verify"), "--json", *args)


def test_a_verify_run_repeated_with_its_printed_seed_gives_the_same_record(tmp_path):
    room = str(project_clean_room())
    first = _verify(tmp_path, "--path", room)
    assert first.exit_code == 0, first.output
    printed = re.search(r"fixtures drawn with seed (\d+); rerun with --seed (\d+)", first.output)
    assert printed and printed[1] == printed[2]
    seed = int(printed[1])
    document = json.loads(first.stdout)
    assert document["seed"] == seed and document["passed"]
    again = _verify(tmp_path, "--path", room, "--seed", str(seed))
    assert again.exit_code == 0, again.output
    repeated = json.loads(again.stdout)
    assert _without_timing(repeated) == _without_timing(document)
    # The checks' numbers (max abs errors) and the template metrics are in what was compared.
    assert any(c.get("max_error") for c in document["checks"])
    assert [m["actual"] for m in repeated["metrics"]] == [m["actual"] for m in document["metrics"]]
    # The evidence record and the history line hold the seed too.
    records = sorted((tmp_path / "verify").glob("*.json"))
    kept = [json.loads(p.read_text("utf-8")) for p in records if "-report" not in p.name]
    assert [r["seed"] for r in kept] == [seed, seed]
    assert all(f"--seed {seed}" in r["commands"][0] for r in kept)
    history = (tmp_path / "verify" / "history.jsonl").read_text("utf-8").splitlines()
    assert [json.loads(line)["seed"] for line in history] == [seed, seed]


def test_two_runs_without_a_seed_draw_different_ones_and_a_bad_seed_is_refused(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    seeds = []
    for _ in range(2):
        result = _verify(tmp_path, "--path", str(empty), "--no-metrics")
        assert result.exit_code == 1, result.output  # does not load: a failed verify
        seeds.append(json.loads(result.stdout)["seed"])
    assert seeds[0] != seeds[1]
    for bad in ("-1", str(2**32)):
        refused = _verify(tmp_path, "--path", str(empty), "--seed", bad)
        assert refused.exit_code == 2
        assert "--seed must be an integer from 0 to 4294967295" in refused.output


# -- grade: one seed per batch, kept from the learners; the signed reference cache ---------


def _grade(submissions: Path, out: Path, rubric: Path, *args: str):
    return invoke(
        "grade", "class", str(submissions), "--out", str(out), "--rubric", str(rubric),
        "--jobs", "1", "--json", *args,
    )  # fmt: skip


def _zero_softmax_in_cache(cache: Path) -> Path:
    """Edit the batch's cache as a learner would: every softmax output set to zero."""
    (path,) = cache.glob("reference-*.bin")
    head, _, blob = path.read_bytes().partition(b"\n")
    index = json.loads(head)
    with np.load(io.BytesIO(blob), allow_pickle=False) as data:
        arrays = {name: data[name] for name in data.files}
    for entry in index["entries"]:
        if entry["function"] == "softmax":
            for name in entry["arrays"]:
                arrays[name] = np.zeros_like(arrays[name])
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    path.write_bytes(head + b"\n" + buffer.getvalue())
    return path


def test_a_batch_keeps_one_seed_from_its_learners_and_an_edited_cache_is_never_used(tmp_path):
    submissions = tmp_path / "class"
    copy_room(submissions / "honest" / "clean_room")
    rubric = rubric_without(tmp_path, "metric", "submission")
    out = tmp_path / "grades"
    first = _grade(submissions, out, rubric)
    assert first.exit_code == 0, first.output
    seed = json.loads(first.stdout)["seed"]
    secrets = json.loads((out / ".batch-secrets.json").read_text("utf-8"))
    assert secrets["seed"] == seed and (out / ".batch-secrets.json").stat().st_mode & 0o077 == 0
    record = json.loads((out / "records" / "honest.json").read_text("utf-8"))
    assert record["facts"]["verify"]["seed"] == seed
    points = record["score"]
    assert points == record["max_score"] > 0
    # Nothing a learner is handed names the seed or the key.
    for path in [*(out / "feedback").rglob("*"), *(out / "gradescope").rglob("*")]:
        if path.is_file():
            text = path.read_text("utf-8")
            assert str(seed) not in text and '"seed"' not in text
            assert secrets["reference_key"] not in text

    # Edited between runs: named on stderr, not used, the honest learner's points unchanged.
    edited = _zero_softmax_in_cache(out / ".reference-cache")
    shutil.rmtree(out / "records")
    second = _grade(submissions, out, rubric)
    assert second.exit_code == 0, second.output
    assert "was edited after labctl wrote it: not used, computed again" in second.output
    assert edited.name in second.output
    again = json.loads((out / "records" / "honest.json").read_text("utf-8"))
    assert again["score"] == points and again["facts"]["verify"]["seed"] == seed
    assert json.loads(second.stdout)["graded"] == ["honest"]

    # Resumed as it is: the kept seed, nothing graded again, the cache now signed and clean.
    third = _grade(submissions, out, rubric)
    assert json.loads(third.stdout)["skipped"] == ["honest"]
    assert "was edited" not in third.output
    # Another seed asked for: every learner graded again with it.
    fourth = _grade(submissions, out, rubric, "--seed", str(seed ^ 1))
    assert json.loads(fourth.stdout)["graded"] == ["honest"]
    assert json.loads((out / "records" / "honest.json").read_text("utf-8"))["facts"]["verify"][
        "seed"
    ] == (seed ^ 1)
