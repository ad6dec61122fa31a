"""The one way learner code runs: a worker process, inside bubblewrap where it works.

`resolve_isolation` picks the level, `CleanRoom` (labctl.isolation.sandbox)
holds a clean room at that level. Importing this package is cheap: no numpy, and the
levels (bubblewrap's probes, subprocess, concurrent.futures) only when one of their names
is asked for: a clean room's worker imports this package first, and needs none of them
(a tenth of a second of every worker's start).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from labctl.isolation.levels import (
        ISOLATION_LEVELS,
        describe,
        missing_layers,
        resolve_isolation,
        sandbox_status,
    )

__all__ = ["ISOLATION_LEVELS", "describe", "missing_layers", "resolve_isolation", "sandbox_status"]


def __getattr__(name: str):
    if name in __all__:
        return getattr(importlib.import_module("labctl.isolation.levels"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
