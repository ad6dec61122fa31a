"""How a wrong output relates to the reference's: the shape of a mistake no fault names.

When a function's values differ and no catalogued fault matches, the difference itself often
says what to change: the reference's values times a constant (a scale missing or applied
twice), with the sign flipped, with neighbouring columns or the two halves of the last axis
exchanged (sin and cos, a rotation pair), the last axis reversed, the last two axes
transposed, or everything shifted one position along an axis (an index off by one). Each is
tried on every array the function gets wrong, over every fixture it fails parity on, and is
said only when one and the same relation holds for all of them, within `RELATIVE` of the
reference's largest value: a relation is a fact about the outputs, never a guess.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from labctl.i18n import Msg

# float64 rounding is ~1e-16; a room that computes in float32 is ~1e-7 off: both pass, and a
# value that merely resembles the reference (a different formula) misses by far more.
RELATIVE = 1e-6


def _close(a: np.ndarray, b: np.ndarray, size: float) -> bool:
    return a.shape == b.shape and a.size > 0 and bool(np.all(np.abs(a - b) <= RELATIVE * size))


def _factor(mine: np.ndarray, ref: np.ndarray, size: float) -> float | None:
    """c with mine = c · ref, or None."""
    at = np.unravel_index(int(np.argmax(np.abs(ref))), ref.shape)
    if ref[at] == 0:
        return None
    c = float(mine[at] / ref[at])
    if abs(c) <= RELATIVE or abs(c - 1) <= RELATIVE:  # zeros are no scaled copy of anything
        return None
    return c if _close(mine, c * ref, max(size, abs(c) * size)) else None


def _pairs_swapped(mine: np.ndarray, ref: np.ndarray, size: float) -> bool:
    """Columns 2i and 2i + 1 exchanged; an odd last column has no partner and is not read."""
    paired = ref.shape[-1] - ref.shape[-1] % 2 if ref.ndim else 0
    if paired < 2:
        return False
    swapped = np.empty_like(ref[..., :paired])
    swapped[..., 0::2], swapped[..., 1::2] = ref[..., 1:paired:2], ref[..., 0:paired:2]
    return _close(mine[..., :paired], swapped, size)


def _halves_swapped(mine: np.ndarray, ref: np.ndarray, size: float) -> bool:
    if ref.ndim == 0 or ref.shape[-1] % 2 or ref.shape[-1] < 4:
        return False
    half = ref.shape[-1] // 2
    return _close(mine, np.concatenate([ref[..., half:], ref[..., :half]], axis=-1), size)


def _reversed(mine: np.ndarray, ref: np.ndarray, size: float) -> bool:
    return ref.ndim > 0 and ref.shape[-1] > 2 and _close(mine, ref[..., ::-1], size)


def _transposed(mine: np.ndarray, ref: np.ndarray, size: float) -> bool:
    return ref.ndim >= 2 and _close(mine, np.swapaxes(ref, -1, -2), size)


def _shift(mine: np.ndarray, ref: np.ndarray, size: float) -> tuple[int, int] | None:
    """(axis, +1 or -1) with mine[i] = ref[i - step] along the axis wherever both exist."""
    for axis in range(ref.ndim):
        n = ref.shape[axis]
        if n < 3:
            continue
        head = [slice(None)] * ref.ndim
        tail = [slice(None)] * ref.ndim
        head[axis], tail[axis] = slice(1, None), slice(None, -1)
        if _close(ref[tuple(head)], ref[tuple(tail)], size):
            continue  # the reference is the same at every position along it: no shift to see
        if _close(mine[tuple(head)], ref[tuple(tail)], size):
            return axis, 1
        if _close(mine[tuple(tail)], ref[tuple(head)], size):
            return axis, -1
    return None


_SAID: dict[str, Msg] = {
    "negated": Msg(
        "its values are the reference's with the sign flipped: look for a subtraction done the "
        "other way round, or a minus sign too many"
    ),
    "pairs": Msg(
        "its values are the reference's with neighbouring columns of the last axis exchanged "
        "(where the reference has column 2i it has 2i+1, and the other way round): the even "
        "and odd slots are swapped, as sin for cos or the two members of a rotation pair"
    ),
    "halves": Msg(
        "its values are the reference's with the two halves of the last axis exchanged: the "
        "first half holds what the reference puts in the second"
    ),
    "reversed": Msg("its values are the reference's in reverse order along the last axis"),
    "transposed": Msg(
        "its values are the reference's with the last two axes transposed: a transpose is "
        "missing, or there is one too many"
    ),
}
_TESTS: tuple[tuple[str, Callable[[np.ndarray, np.ndarray, float], bool]], ...] = (
    ("pairs", _pairs_swapped),
    ("halves", _halves_swapped),
    ("reversed", _reversed),
    ("transposed", _transposed),
)


def _one(mine: np.ndarray, ref: np.ndarray) -> tuple | None:
    """The relation of one wrong array to the reference's, as a comparable key."""
    size = max(1.0, float(np.max(np.abs(ref))))
    factor = _factor(mine, ref, size)
    if factor is not None:
        return ("negated",) if abs(factor + 1) <= RELATIVE else ("factor", factor)
    for name, test in _TESTS:
        if test(mine, ref, size):
            return (name,)
    shift = _shift(mine, ref, size)
    return ("shift", *shift) if shift is not None else None


def said(pairs: Iterable[tuple[object, object]]) -> Msg | None:
    """What one relation holding for every (output, reference output) pair says, or None.

    Each pair is one failing call's return value and the reference's (arrays, or tuples of
    them); only the arrays that differ are compared, and all of them must relate alike."""
    found: list[tuple] = []
    for mine, ref in pairs:
        mine_parts = mine if isinstance(mine, (tuple, list)) else (mine,)
        ref_parts = ref if isinstance(ref, (tuple, list)) else (ref,)
        if len(mine_parts) != len(ref_parts):
            return None
        for a, b in zip(mine_parts, ref_parts, strict=True):
            a, b = np.asarray(a), np.asarray(b)
            if a.shape != b.shape or a.dtype.kind not in "fiu" or b.dtype.kind not in "fiu":
                return None
            a, b = a.astype(np.float64), b.astype(np.float64)
            if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
                return None
            if b.size == 0 or _close(a, b, max(1.0, float(np.max(np.abs(b))))):
                continue
            key = _one(a, b)
            if key is None:
                return None
            found.append(key)
    if not found:
        return None
    kinds = {key[0] for key in found}
    if len(kinds) != 1:
        return None
    kind = found[0][0]
    if kind == "factor":
        factors = [key[1] for key in found]
        low, high = min(factors), max(factors)
        if high - low <= RELATIVE * max(1.0, abs(high)):
            return Msg(
                "its values are the reference's times {factor:.6g}: look for a factor (a scale, "
                "a square root, a division) the reference does not apply, or one it applies "
                "that is missing",
                factor=low,
            )
        return Msg(
            "its values are the reference's times a factor that changes from call to call "
            "({low:.4g} to {high:.4g}): a scale that depends on a size (D, T, H) in a way the "
            "reference's does not",
            low=low,
            high=high,
        )
    if kind == "shift":
        places = {key[1:] for key in found}
        if len(places) != 1:
            return None
        ((axis, step),) = places
        return Msg(
            "its values are the reference's moved one position {way} along axis {axis}: an "
            "index off by one (a range or a slice that starts or stops one early)",
            way=Msg("forward") if step == 1 else Msg("back"),
            axis=axis,
        )
    return _SAID[kind]
