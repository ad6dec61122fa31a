"""What the fixture tests share: the functions whose inputs are ints only, and every array
inside a call's arguments."""

from __future__ import annotations

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
