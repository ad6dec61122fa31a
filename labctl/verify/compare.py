"""Comparing a return value with the reference's: the v1 tolerances, its structure, its elements.

Tolerances, version v1 (`TOLERANCE_VERSION`):

- parity, float64: max |clean room - reference| <= 1e-10 * max(1, max |reference|).
  float64 keeps ~16 significant digits (unit roundoff 1.1e-16); every fixture
  is a chain of at most a few hundred well-conditioned operations on O(1)
  values, so two honest implementations that only reassociate sums agree to
  ~1e-14 relative. Scaling by the output's magnitude keeps the bound relative
  for large outputs (logits, |x| ~ 1e3). 1e-10 leaves four orders of margin
  for reordering and still catches every formula difference the catalogue
  has: an eps 1e-6 off, a missing 1/sqrt(D), an off-by-one in a mask, a
  layout permutation. It is the v1 table's `reference_output_max_error`.
- parity, float32 (the float32 probes: every fixture again in float32): max |clean room -
  reference| <= 1e-2 * max(1, max |reference|), the reference computing in float32 too.
  The float64 bound above judges the formula; this one catches a float32 path that computes
  something else (a zero, a constant, another formula: errors of order 1), which only the
  dtype was checked for before. It is wide because float32 is: the project's clean room is
  within 1.6e-5 relative on every probe (tiled attention's large logits the worst, twelve
  seeds), but a layer_norm taking its variance in one pass
  (E[x^2] - E[x]^2, a right formula that cancels) is off by up to 2.0e-3 on the offset
  probe (60 seeds), and passes the float64 bound; 1e-2 leaves it 5x margin.
- parity, booleans (masks): compared as 0/1 with a tolerance of 0.5, i.e. exactly.
- rows summing to 1 and future-token invariance: 1e-12 absolute. A row of
  probabilities sums to 1 within a few ulps of its T terms (~1e-15); a masked
  key contributes exactly 0 (exp(-inf) = 0, and so does exp of a finite
  -1e9), so a prefix does not move at all; 1e-12 is the v1 table's bound for
  `future_token_invariance`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from labctl.i18n import Msg
from labctl.isolation import wire
from labctl.verify.functions import RETURNS

TOLERANCE_VERSION = "v1"
PARITY_RELATIVE = 1e-10
FLOAT32_PARITY_RELATIVE = 1e-2
EXACT_TOLERANCE = 0.5
ROW_SUM_TOLERANCE = 1e-12
CAUSAL_TOLERANCE = 1e-12


def parity_tolerance(reference: np.ndarray) -> float:
    """Tolerance v1 for one reference array (see the module docstring)."""
    if reference.dtype == np.bool_ or np.issubdtype(reference.dtype, np.integer):
        return EXACT_TOLERANCE
    scale = float(np.max(np.abs(reference))) if reference.size else 0.0
    relative = FLOAT32_PARITY_RELATIVE if reference.dtype == np.float32 else PARITY_RELATIVE
    return relative * max(1.0, scale)


def elements(value):
    """The arrays of a return value, as a tuple (one array -> a 1-tuple)."""
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def _says(spec: str, shape: tuple) -> Msg:
    """'(B, T, C) = (2, 4, 8)', or 'the same shape as x, (2, 3, 7)'."""
    if spec.startswith("same shape as "):
        return Msg(
            "the same shape as {name}, {shape}",
            name=spec.removeprefix("same shape as "),
            shape=shape,
        )
    return Msg("{spec} = {shape}", spec=spec, shape=shape)


_ODD_ARRAY = "ndarray of dtype "


def _type_name(value) -> Msg:
    if isinstance(value, wire.Unsupported) and value.type_name.startswith(_ODD_ARRAY):
        # an array after all: of a dtype the wire does not carry (float128, str, object)
        return Msg(
            "an ndarray of dtype {dtype} (a dtype no contract function returns)",
            dtype=value.type_name.removeprefix(_ODD_ARRAY),
        )
    if isinstance(value, wire.Unsupported):
        return Msg("a {type} (not an array)", type=value.type_name)
    if isinstance(value, np.generic):
        return Msg("a numpy scalar ({dtype})", dtype=str(value.dtype))
    return Msg("a {type}", type=type(value).__name__)


def structure_problem(function: str, value, reference) -> str | None:
    """Why `value` does not have the reference's structure (type, arity, shape), or None.

    A tuple is expected exactly where the contract returns several arrays (a
    list of the right length is accepted there too); one ndarray everywhere else.
    English; `structure_message` is the same as a translatable Msg.
    """
    problem = structure_message(function, value, reference)
    return None if problem is None else str(problem)


def structure_message(function: str, value, reference) -> Msg | None:
    """`structure_problem`, as a Msg for the learner's language."""
    specs = RETURNS[function]
    expected = elements(reference)
    if len(specs) > 1:
        names = ", ".join(s.split(" ")[0] for s in specs)
        if isinstance(value, np.ndarray):
            return Msg(
                "returned one array of shape {shape} where the contract says a tuple ({names})",
                shape=value.shape,
                names=names,
            )
        if not isinstance(value, (tuple, list)):
            return Msg(
                "returned {type} where the contract says a tuple ({names})",
                type=_type_name(value),
                names=names,
            )
        if len(value) != len(expected):
            return Msg(
                "returned a {type} of {n} where the contract says ({names})",
                type=type(value).__name__,
                n=len(value),
                names=names,
            )
    elif isinstance(value, tuple):
        return Msg(
            "returned a tuple of {n} where the contract says one array {says}",
            n=len(value),
            says=_says(specs[0], tuple(expected[0].shape)),
        )
    elif isinstance(value, list):
        return Msg(
            "returned a list instead of an ndarray ({says})",
            says=_says(specs[0], tuple(expected[0].shape)),
        )
    for item, ref, spec in zip(elements(value), expected, specs, strict=True):
        label = spec.split(" ")[0] + " " if len(specs) > 1 else ""
        if not isinstance(item, np.ndarray):
            return Msg(
                "returned {label}as {type} where the contract says an ndarray ({says})",
                label=label,
                type=_type_name(item),
                says=_says(spec, tuple(ref.shape)),
            )
        if item.shape != ref.shape:
            return Msg(
                "returned {label}shape {shape} where the contract says {says}",
                label=label,
                shape=item.shape,
                says=_says(spec, tuple(ref.shape)),
            )
    return None


@dataclass
class Comparison:
    max_error: float
    tolerance: float
    mismatch_fraction: float

    @property
    def margin(self) -> float:
        return self.max_error / self.tolerance

    @property
    def ok(self) -> bool:
        return self.max_error <= self.tolerance


def _real_diff(a: np.ndarray, r: np.ndarray) -> np.ndarray:
    """|a - r| per element, 0 where both hold the same NaN or infinity, inf where only one does."""
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(a - r)
    same_special = (np.isnan(a) & np.isnan(r)) | (np.isinf(a) & (a == r))
    diff = np.where(same_special, 0.0, diff)
    return np.where(np.isnan(diff), np.inf, diff)


def compare(actual: np.ndarray, reference: np.ndarray, tolerance: float) -> Comparison:
    """Max abs error (inf where one side is NaN or inf and the other is not), mismatch share.

    Complex values are compared by both parts: the error of an element is the
    larger of its real and imaginary errors, so `softmax(x) + 100j` is 100 off.
    """
    a, r = np.asarray(actual), np.asarray(reference)
    if r.size == 0:
        return Comparison(0.0, tolerance, 0.0)
    diff = _real_diff(a.real.astype(np.float64), r.real.astype(np.float64))
    if np.iscomplexobj(a) or np.iscomplexobj(r):
        imaginary = _real_diff(np.imag(a).astype(np.float64), np.imag(r).astype(np.float64))
        diff = np.maximum(diff, imaginary)
    return Comparison(float(np.max(diff)), tolerance, float(np.mean(diff > tolerance)))


def compare_value(function: str, value, reference) -> Comparison | str:
    """Element-wise comparison of a whole return value with the reference, or why not."""
    problem = structure_problem(function, value, reference)
    if problem:
        return problem
    worst = None
    total, outside = 0, 0.0
    for item, ref in zip(elements(value), elements(reference), strict=True):
        result = compare(item, ref, parity_tolerance(ref))
        total += ref.size
        outside += result.mismatch_fraction * ref.size
        if worst is None or result.margin > worst.margin:
            worst = result
    worst.mismatch_fraction = outside / total if total else 0.0
    return worst
