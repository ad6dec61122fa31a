"""Strict JSON for labctl's documents: NaN and inf become null, never invalid JSON."""

from __future__ import annotations

import json
import math
from typing import Any

from labctl.i18n import Msg


def finite(value: Any) -> Any:
    """`value` with every non-finite float replaced by None, recursively; a message in English
    (a document is read by scripts: one language whatever the terminal shows)."""
    if isinstance(value, Msg):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def dumps(document: Any) -> str:
    return json.dumps(finite(document), indent=2, ensure_ascii=False, allow_nan=False)
