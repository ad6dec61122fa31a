"""Contract v2 bugs of a learner who checks the arguments as the contract asks, named by their
catalogued fault: NTK scaling with the exponent (D - 2) / D, and batched positions that rotate
every row at the first row's. The faults' rooms once skipped the contract's refusals (D < 4
for NTK, positions of the wrong shape), and a match needs the fault's side symptoms, so a
learner who refused them was told only that the values differ.

Each bug is written as a learner writes it (a whole rope, not the catalogue's wrapper), in a
room of many files and of one file, both declaring v2, as in `test_common_bugs_named`.
"""

from __future__ import annotations

import pytest
from checktools import one_file_room

from labctl.faults.v2 import V2, FaultV2
from labctl.i18n import _, speaking
from labctl.verify.builders import fresh_seed
from labctl.verify.verify import verify_clean_room

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


@pytest.fixture(scope="module")
def fresh():
    seed = fresh_seed()
    print(f"v2 bugs verified at seed {seed}")
    return seed


# v2's rope with every refusal of the contract's Bad input section; NTK_EXPONENT and BATCHED
# mark where each bug goes.
ROPE_V2 = """
def rope(x, positions, theta=10000.0, scaling=None, factor=1.0):
    x = np.asarray(x)
    pos = np.asarray(positions)
    D, T = x.shape[-1], x.shape[-2]
    if D % 2:
        raise ValueError("x: RoPE needs an even D")
    if scaling not in (None, "linear", "ntk"):
        raise ValueError(f"scaling: expected None, 'linear' or 'ntk', got {scaling!r}")
    if not factor >= 1:
        raise ValueError("factor: must be >= 1")
    if scaling == "ntk" and D < 4:
        raise ValueError("x: NTK scaling needs D >= 4")
    if pos.shape != (T,) and not (x.ndim >= 3 and pos.shape == (x.shape[0], T)):
        raise ValueError(f"positions: shape {pos.shape} does not match x {x.shape}")
    base = float(theta)
    if scaling == "ntk":
        base = base * factor ** NTK_EXPONENT
    p = pos.astype(np.float64) / (factor if scaling == "linear" else 1.0)
    BATCHED
    angle = p[..., None] * base ** (-np.arange(0, D, 2) / D)
    if p.ndim == 2:
        angle = angle.reshape((p.shape[0],) + (1,) * (x.ndim - 3) + angle.shape[1:])
    x1, x2 = x[..., 0::2], x[..., 1::2]
    out = np.empty(x.shape, dtype=np.result_type(x, np.float32))
    out[..., 0::2] = x1 * np.cos(angle) - x2 * np.sin(angle)
    out[..., 1::2] = x1 * np.sin(angle) + x2 * np.cos(angle)
    return out
"""

NTK_INVERTED = ROPE_V2.replace("NTK_EXPONENT", "((D - 2) / D)").replace("    BATCHED\n", "")

FIRST_ROW = ROPE_V2.replace("NTK_EXPONENT", "(D / (D - 2))").replace(
    "BATCHED", "p = p if p.ndim == 1 else p[0]  # one row of positions for the batch"
)

# (name, source, fault)
BUGS = [
    ("ntk-exponent-inverted", NTK_INVERTED, "ntk-exponent-inverted"),
    ("batched-first-row", FIRST_ROW, "rope-batched-positions-first-row"),
]


def _in(lang: str, text) -> str:
    with speaking(lang):
        return _(text)


@pytest.mark.parametrize("layout", ["many-files-v2", "one-file-v2"])
@pytest.mark.parametrize(("name", "source", "fault"), BUGS, ids=[b[0] for b in BUGS])
def test_each_v2_bug_with_its_refusals_is_named_by_its_fault(
    tmp_path, name, source, fault, layout, fresh
):
    if layout == "one-file-v2":
        room = one_file_room(tmp_path, source, contract=2)
    else:
        room = FaultV2("learner", "-", "primitives", "-", "-", source).materialize(
            tmp_path / "clean_room"
        )
    report = verify_clean_room(room, 5.0, out=None, measure=False, seed=fresh)
    failed = {r.name for r in report.checks if r.function == "rope" and r.failed}
    assert "bad-input" not in failed, failed
    (diagnosis,) = [d for d in report.diagnosis if d.function == "rope"]
    assert diagnosis.fault == fault, diagnosis.message
    catalogued = next(f for f in V2 if f.name == fault)
    english = _in("en", diagnosis.shown)
    assert f"matches fault `{fault}`" in english, english
    assert _in("en", catalogued.description) in english
