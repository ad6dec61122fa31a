"""What the fixture tests share: the functions whose inputs are ints only, every array
inside a call's arguments, and whether two calls' values are the same."""

from __future__ import annotations

from pathlib import Path

import numpy as np

# Written out, not read from labctl: the tests pin which functions take ints only.
INT_ONLY = {"causal_mask", "sliding_window_mask", "padding_mask", "sinusoidal_positions"}


def arrays(value):
    """Every numpy array inside `value` (tuples, lists and dicts walked), in order."""
    if isinstance(value, np.ndarray):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from arrays(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from arrays(item)


def same(a, b, equal_nan: bool = False) -> bool:
    """The same value: containers of one type and length, arrays compared by dtype, shape
    and every value (NaN equal to NaN only with `equal_nan`)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (
            isinstance(a, np.ndarray)
            and isinstance(b, np.ndarray)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and np.array_equal(a, b, equal_nan=equal_nan and a.dtype.kind in "fc")
        )
    if isinstance(a, (tuple, list)):
        return (
            type(a) is type(b)
            and len(a) == len(b)
            and all(same(x, y, equal_nan) for x, y in zip(a, b, strict=True))
        )
    if isinstance(a, dict):
        return (
            isinstance(b, dict)
            and a.keys() == b.keys()
            and all(same(a[k], b[k], equal_nan) for k in a)
        )
    return type(a) is type(b) and (a == b or (equal_nan and a != a and b != b))


def signed_reference(folder: Path) -> tuple[int, dict[str, str]]:
    """A fresh seed, and the environment under which a `labctl` process reads the reference's
    outputs at that seed from a signed cache written into `folder` (as `labctl grade` hands
    its workers) instead of importing torch to compute them: for tests that start many
    verify processes and test something other than the reference."""
    import secrets

    from labctl.grade.batch_seed import warm_reference_cache
    from labctl.verify.builders import fresh_seed

    seed, key = fresh_seed(), secrets.token_hex(32)
    assert warm_reference_cache(folder, seed, key) == []
    return seed, {"LABCTL_REFERENCE_CACHE": str(folder), "LABCTL_REFERENCE_KEY": key}
