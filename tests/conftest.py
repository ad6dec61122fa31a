"""Made before any test runs: the CLI's consoles, with no COLUMNS in the environment, and
Hypothesis without its example database (it would write .hypothesis/ into the repository).

rich fixes a console's width when the console is made if COLUMNS is set then. A real
command is one process, so that is its width; a test process makes the consoles once,
and whichever test first imported the CLI would fix every later test's width (under
pytest-xdist that depends on how tests are spread over workers). Made here, the width
comes from each test's own COLUMNS.
"""

import os

_columns = os.environ.pop("COLUMNS", None)
import labctl.cli.render  # noqa: E402, F401

if _columns is not None:
    os.environ["COLUMNS"] = _columns

from hypothesis import settings  # noqa: E402

settings.register_profile("labctl", database=None)
settings.load_profile("labctl")


def pytest_xdist_auto_num_workers(config) -> int:
    """`-n auto`: one worker more than there are cores. Some tests wait, not compute (a
    hanging learner's limit, a forked attack's delay); the extra worker computes meanwhile.
    Measured on two cores: 457 s to 486 s with three workers (four runs) against 491 s and
    495 s with two."""
    return (os.cpu_count() or 1) + 1
