"""The one way learner code runs: a worker process, inside bubblewrap where it works.

`resolve_isolation` picks the level, `CleanRoom` (labctl.isolation.sandbox)
holds a clean room at that level. Importing this package is cheap: no numpy.
"""

from labctl.isolation.levels import (
    ISOLATION_LEVELS,
    describe,
    missing_layers,
    resolve_isolation,
    sandbox_status,
)

__all__ = ["ISOLATION_LEVELS", "describe", "missing_layers", "resolve_isolation", "sandbox_status"]
