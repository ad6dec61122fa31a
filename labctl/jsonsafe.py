"""Strict JSON for labctl's documents: NaN and inf become null, never invalid JSON."""

from __future__ import annotations

import json
import math
from typing import Any


def finite(value: Any) -> Any:
    """`value` with every non-finite float replaced by None, recursively."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def dumps(document: Any) -> str:
    return json.dumps(finite(document), indent=2, ensure_ascii=False, allow_nan=False)
