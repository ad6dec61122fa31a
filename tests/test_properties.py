"""Rules stated as properties (hypothesis), beside the example tests that show each bug.

Tolerance expressions, comparison of special values, the parser's limits, and the masks
of the project's clean room against the reference and contract v1's formulas. Example
counts stay modest so the suite stays fast on two cores.
"""

from __future__ import annotations

import json
import math
import operator

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labctl import clean_room
from labctl import reference as ref
from labctl.evidence.parse import MAX_DEPTH, load, parse_text
from labctl.lab import parse_expected, satisfies, tolerance_key
from labctl.verify import compare

OPS = {"<=": operator.le, ">=": operator.ge, "<": operator.lt, ">": operator.gt, "==": operator.eq}
finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
anything = st.floats(width=64)  # nan and ±inf included
FEW = settings(max_examples=100, deadline=None)


# -- tolerance expressions --------------------------------------------------------------


@FEW
@given(op=st.sampled_from(sorted(OPS)), bound=finite, x=anything, spaces=st.sampled_from(["", " "]))
def test_an_expression_means_its_comparison_on_finite_values(op, bound, x, spaces):
    expr = f"{op}{spaces}{bound!r}"
    assert satisfies(x, expr) == (math.isfinite(x) and OPS[op](x, bound))


@FEW
@given(op=st.sampled_from(sorted(OPS)), bound=finite)
def test_at_its_bound_only_the_inclusive_operators_hold(op, bound):
    assert satisfies(bound, f"{op}{bound!r}") == (op in ("<=", ">=", "=="))


@FEW
@given(
    expr_op=st.sampled_from(sorted(OPS)),
    bound=finite,
    x=st.sampled_from([math.inf, -math.inf, math.nan]),
)
def test_no_non_finite_value_satisfies_any_expression(expr_op, bound, x):
    assert not satisfies(x, f"{expr_op}{bound!r}")
    assert not satisfies(x, f"in [{-abs(bound)!r}, {abs(bound)!r}]")


@FEW
@given(a=finite, b=finite, x=anything)
def test_an_interval_holds_exactly_between_its_ends(a, b, x):
    lo, hi = min(a, b), max(a, b)
    assert satisfies(x, f"in [{lo!r}, {hi!r}]") == (math.isfinite(x) and lo <= x <= hi)


@FEW
@given(op=st.sampled_from(sorted(OPS)), bound=finite, left=st.sampled_from(["", " ", "  "]))
def test_tolerance_key_is_the_operator_and_the_bound_however_spaced(op, bound, left):
    assert tolerance_key(f"{left}{op}{left}{bound!r}") == (op, bound)
    assert tolerance_key(f"{op}{bound:.17e}") == (op, bound)  # another spelling, one value


@FEW
@given(a=finite, b=finite)
def test_an_empty_interval_is_refused(a, b):
    if a > b:
        try:
            parse_expected(f"in [{a!r}, {b!r}]")
        except ValueError:
            return
        raise AssertionError("an empty interval was accepted")
    assert tolerance_key(f"in [{a!r}, {b!r}]") == ("in", a, b)


# -- comparison of special values --------------------------------------------------------


def _agrees(a: float, r: float, tolerance: float) -> bool:
    if math.isnan(a) or math.isnan(r):
        return math.isnan(a) and math.isnan(r)
    if math.isinf(a) or math.isinf(r):
        return a == r  # the same infinity, sign included
    return abs(a - r) <= tolerance


pairs = st.lists(st.tuples(anything, anything), min_size=1, max_size=8)


@FEW
@given(pairs=pairs)
def test_the_comparison_agrees_element_by_element_on_special_values(pairs):
    actual = np.array([a for a, _ in pairs])
    reference = np.array([r for _, r in pairs])
    tolerance = 1e-10
    result = compare.compare(actual, reference, tolerance)
    expected = [_agrees(a, r, tolerance) for a, r in pairs]
    assert result.ok == all(expected)
    assert result.mismatch_fraction == expected.count(False) / len(pairs)
    if not all(expected):
        special = any(
            not (math.isfinite(a) and math.isfinite(r))
            for (a, r), ok in zip(pairs, expected, strict=True)
            if not ok
        )
        assert not special or math.isinf(result.max_error)


@FEW
@given(pairs=pairs)
def test_the_comparison_is_symmetric(pairs):
    actual = np.array([a for a, _ in pairs])
    reference = np.array([r for _, r in pairs])
    one = compare.compare(actual, reference, 1e-10)
    other = compare.compare(reference, actual, 1e-10)
    assert one.max_error == other.max_error and one.mismatch_fraction == other.mismatch_fraction


# -- parsing limits ----------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(depth=st.integers(1, MAX_DEPTH + 8), as_map=st.booleans())
def test_nesting_is_read_up_to_the_depth_limit_and_refused_past_it(depth, as_map):
    # `depth` containers around one scalar: depth + 1 nodes on the deepest path.
    doc = ('{"a": ' * depth + "1" + "}" * depth) if as_map else ("[" * depth + "1" + "]" * depth)
    data, problem = parse_text(doc)
    if depth + 1 <= MAX_DEPTH:
        assert problem is None and data is not None
    else:
        assert problem is not None and f"nested deeper than {MAX_DEPTH} levels" in problem.reason


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(size=st.integers(1, 300), limit=st.integers(1, 300))
def test_a_file_is_read_only_up_to_its_size_limit(tmp_path, size, limit):
    path = tmp_path / "sub.yaml"
    path.write_bytes(b"#" * (size - 1) + b"\n")
    loaded = load(path, limit=limit)
    too_big = loaded.problem is not None and "larger than" in loaded.problem.reason
    assert too_big == (size > limit)


# Printable keys: a raw control character is refused by the reader before any key is read.
keys = st.text(st.characters(categories=("L", "N", "P", "S", "Zs")), min_size=1, max_size=6)


@FEW
@given(mapping=st.dictionaries(keys, st.integers(), min_size=1, max_size=6), data=st.data())
def test_distinct_keys_read_back_and_a_repeated_key_is_refused(mapping, data):
    text = json.dumps(mapping, ensure_ascii=False)  # PyYAML reads an escaped surrogate pair as two
    parsed, problem = parse_text(text)
    assert problem is None and parsed == mapping
    key = data.draw(st.sampled_from(sorted(mapping)))
    repeated = text[:-1] + f", {json.dumps(key, ensure_ascii=False)}: 0}}"
    parsed, problem = parse_text(repeated)
    assert problem is not None and "duplicate key" in problem.reason


# -- mask shapes: the project's clean room, the reference and contract v1 -----------------


@FEW
@given(t_k=st.integers(1, 12), data=st.data())
def test_causal_masks_follow_the_contract(t_k, data):
    t_q = data.draw(st.integers(1, t_k))
    i, j = np.indices((t_q, t_k))
    formula = j > t_k - t_q + i  # contract v1: bottom-right aligned
    for mask in (clean_room.causal_mask(t_q, t_k), ref.causal_mask(t_q, t_k)):
        assert mask.dtype == np.bool_ and mask.shape == (t_q, t_k)
        assert np.array_equal(mask, formula)


@FEW
@given(t_k=st.integers(1, 12), window=st.integers(1, 14), data=st.data())
def test_sliding_window_masks_follow_the_contract(t_k, window, data):
    t_q = data.draw(st.integers(1, t_k))
    i, j = np.indices((t_q, t_k))
    position = t_k - t_q + i  # the query's absolute position
    formula = (j > position) | (j < position - window + 1)
    for mask in (
        clean_room.sliding_window_mask(t_q, window, t_k),
        ref.sliding_window_mask(t_q, window, t_k),
    ):
        assert mask.dtype == np.bool_ and mask.shape == (t_q, t_k)
        assert np.array_equal(mask, formula)


@FEW
@given(t=st.integers(1, 12), data=st.data())
def test_padding_masks_follow_the_contract(t, data):
    lengths = np.array(
        data.draw(st.lists(st.integers(0, t), min_size=1, max_size=4)), dtype=np.int64
    )
    formula = np.arange(t)[None, None, None, :] >= lengths[:, None, None, None]  # (B, 1, 1, t)
    for mask in (clean_room.padding_mask(lengths, t), ref.padding_mask(lengths, t)):
        assert mask.dtype == np.bool_ and mask.shape == (len(lengths), 1, 1, t)
        assert np.array_equal(mask, formula)
