"""Lab `rope-scaling`: PI and NTK-aware scaling read back from a room's rope, against the formulas.

The rooms (a v2-declaring copy of the project's, faulty ones) are written into tmp_path;
evidence goes under tmp_path too.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from labtools import ROOM, failing, faulty_room, passed, rows, run, values
from typer.testing import CliRunner

from labctl.cli.main import app
from labctl.faults import labs_v2, v2
from labctl.lab import Note
from labctl.labs.rope_scaling import LAB, Params, written_rope
from labctl.labs.rope_scaling_figures import departure, ntk_ratio
from labctl.runner import room_contract

BOTH = ("rope_scaling_reference_max_error", "both")


@pytest.fixture(scope="module")
def v2_room(tmp_path_factory):
    """The project's room declaring contract v2, whether or not the project's own declares it."""
    room = tmp_path_factory.mktemp("rooms") / "clean_room"
    shutil.copytree(ROOM, room, ignore=shutil.ignore_patterns("__pycache__"))
    init = room / "__init__.py"
    text = re.sub(r"(?m)^CONTRACT = .*$", "", init.read_text("utf-8"))
    init.write_text(text + v2.DECLARATION, "utf-8")
    assert room_contract(room) == 2
    return room


@pytest.fixture(scope="module")
def seed5(v2_room):
    return run(LAB, v2_room)


def test_passes_on_both_implementations_with_the_formulas_numbers(seed5):
    got = passed(seed5)
    for impl in ("reference", "clean-room"):
        # s = 4: position Tmax·s - 1 = 511 maps to 127.75, 0.75 of a step past 127
        assert got[("pi_new_angle_steps", impl)].actual == pytest.approx(0.75, abs=1e-9)
        assert got[("ntk_new_angle_steps", impl)].actual == pytest.approx(0.75, abs=1e-9)
        assert got[("pi_frequency_ratio_error", impl)].actual <= 1e-12
        assert got[("pi_profile_error", impl)].actual <= 1e-12
    assert got[BOTH].actual <= 1e-11


def test_the_tables_show_the_chapters_frequencies_and_the_scalings_ratios(seed5):
    angles, speeds, past, _profile, drift = seed5.figures[:5]
    last = dict(zip((str(c) for c in speeds.columns), speeds.rows[-1], strict=True))
    first = dict(zip((str(c) for c in speeds.columns), speeds.rows[0], strict=True))
    # 手撕 §1.5.2: ω_0 = 1 rad per position; NTK keeps it, PI divides it by s = 4
    assert first["ω_i"] == pytest.approx(1.0, abs=1e-12)
    assert first["NTK ratio, clean-room"] == pytest.approx(1.0, abs=1e-12)
    assert first["PI ratio, clean-room"] == pytest.approx(0.25, abs=1e-12)
    # the lowest pair: ω_31 = 10000^(-62/64), NTK slows it by exactly s
    assert last["ω_i"] == pytest.approx(10000 ** (-62 / 64), rel=1e-12)
    assert last["NTK ratio, clean-room"] == pytest.approx(0.25, abs=1e-12)
    by_method = {str(row[0]): row for row in past.rows}
    assert by_method["plain RoPE"][1] == pytest.approx(3 * 128, abs=1e-6)  # (s - 1) · Tmax
    assert by_method["position interpolation"][3] == "0"
    # NTK extrapolates the middle pairs: 20 of the 21 slow pairs still see new angles
    assert (by_method["plain RoPE"][3], by_method["NTK-aware"][3]) == ("21", "20")
    at4 = {str(row[1]): row for row in drift.rows if str(row[0]).startswith("4 ")}
    assert at4["plain RoPE"][2] > at4["NTK-aware"][2] > at4["position interpolation"][2]
    assert angles.rows[0][2] == pytest.approx(127.0, abs=1e-9)  # pair 0 at position 127, plain


def test_the_notes_give_a_computed_verdict_on_each_claim(seed5):
    texts = [str(note.text) for note in seed5.figures[5:]]
    assert len(texts) == 6  # three claims, for each implementation
    assert all(not note.flag for note in seed5.figures[5:])
    assert sum("§6.7" in t and "the measurement agrees" in t for t in texts) == 2
    assert sum("§1.5.2" in t and "the measurement agrees" in t for t in texts) == 2
    assert sum("§01.5" in t and "the claim is the approximation" in t for t in texts) == 2


def test_the_written_out_rope_and_the_ntk_ratio_by_hand():
    x = np.zeros((1, 1, 1, 4))
    x[..., 0::2] = 1.0  # unit pairs
    positions = np.array([[2]])
    plain = written_rope(x, positions, 100.0, None, 1.0)[0, 0, 0]
    assert np.allclose(plain, [np.cos(2), np.sin(2), np.cos(0.2), np.sin(0.2)], rtol=0, atol=1e-15)
    linear = written_rope(x, positions, 100.0, "linear", 2.0)[0, 0, 0]
    assert np.allclose(linear, [np.cos(1), np.sin(1), np.cos(0.1), np.sin(0.1)], rtol=0, atol=1e-15)
    # D = 4: base 100 · 2^2 = 400, pair 1 turns by 2 / 20 = 0.1 = 0.2 · 2^(-2/(4-2))
    ntk = written_rope(x, positions, 100.0, "ntk", 2.0)[0, 0, 0]
    assert np.allclose(ntk, [np.cos(2), np.sin(2), np.cos(0.1), np.sin(0.1)], rtol=0, atol=1e-15)
    assert ntk_ratio(np.array([0, 1]), 4, 2.0).tolist() == [1.0, 0.5]


def test_departure_counts_only_what_leaves_the_trained_range():
    trained = np.array([1.0, 0.5, 0.25])
    assert departure(np.array([1.0, 0.5, 0.25, 0.3, 0.1]), trained, 5) == pytest.approx(0.15)
    assert departure(np.array([1.0, 0.5, 0.25, 0.3]), trained, 3) == 0.0


@pytest.mark.parametrize(
    ("fault", "caught"),
    [
        (
            labs_v2.get("rope-linear-multiplies"),
            {"pi_frequency_ratio_error", "pi_new_angle_steps", "pi_profile_error",
             "batched_max_error"},
        ),
        (
            next(f for f in v2.V2 if f.name == "ntk-exponent-inverted"),
            {"ntk_frequency_ratio_error", "ntk_new_angle_steps", "batched_max_error"},
        ),
        (
            next(f for f in v2.V2 if f.name == "rope-batched-positions-first-row"),
            {"batched_max_error"},
        ),
    ],
    ids=lambda f: getattr(f, "name", ""),
)  # fmt: skip
def test_each_fault_is_caught_at_its_metrics_only(tmp_path, fault, caught):
    result = run(LAB, faulty_room(tmp_path, fault))
    assert result.error is None
    assert failing(result) == {(name, "clean-room") for name in caught} | {BOTH}


def test_a_v1_room_is_told_it_needs_v2_and_the_reference_still_shows(tmp_path, v2_room):
    room = tmp_path / "v1_room"
    shutil.copytree(v2_room, room)
    init = room / "__init__.py"
    init.write_text(re.sub(r"(?m)^CONTRACT = .*$", "", init.read_text("utf-8")), "utf-8")
    result = run(LAB, room)
    # a v1 room keeps working: the lab runs on the reference alone and says why, in a note
    assert result.passed and result.error is None
    notes = [f for f in result.figures if isinstance(f, Note)]
    assert notes[0].flag and "needs contract v2" in str(notes[0].text)
    got = rows(result)
    assert got[("pi_frequency_ratio_error", "reference")].passed
    assert {impl for _, impl in got} == {"reference"}


def test_same_seed_same_values_other_seed_other_profile(v2_room):
    first, again, other = (run(LAB, v2_room, seed=s, impl="reference") for s in (5, 5, 6))
    assert values(first) == values(again)
    assert first.figures[3].rows == again.figures[3].rows
    # the angles do not depend on the seed; the content vectors of the profile do
    key = ("pi_new_angle_steps", "reference")
    assert values(first)[key] == values(other)[key]
    assert first.figures[3].rows[3][1] != other.figures[3].rows[3][1]


def test_parameters_are_bounded():
    with pytest.raises(ValueError, match="factor"):
        Params(factor=1)
    with pytest.raises(ValueError, match="theta"):
        Params(theta=10.0)


def test_the_lab_module_imports_without_torch():
    code = "import sys, labctl.labs.rope_scaling; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_cli_run_json(tmp_path, monkeypatch, v2_room):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "evidence" / "runs"
    args = ["run", "rope-scaling", "--json", "--out", str(out), "--clean-room", str(v2_room)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    (lab,) = document["labs"]
    assert lab["id"] == "rope-scaling" and lab["passed"] is True
    assert sorted(out.glob("rope-scaling/*.json")), "no evidence record written"
    assert len(lab["tables"]) == 5 and len(lab["notes"]) == 6
    assert any("§6.7" in note["text"] and not note["flag"] for note in lab["notes"])
