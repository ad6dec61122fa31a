"""Made before any test runs: one thread for numpy's and torch's kernels, the CLI's consoles
with no COLUMNS in the environment, and Hypothesis without its example database (it would
write .hypothesis/ into the repository).

The suite runs one process per core and one more (`pytest_xdist_auto_num_workers`); with
OpenBLAS's and torch's own thread per core in each, five or six threads share two cores and
the idle ones spin waiting for work. One thread each (the practice of scikit-learn's own
suite under pytest-xdist), set before numpy is first imported and inherited by the workers:
the suite's CPU 458 s to 403 s, its wall 238 s to 212 s on two cores. A variable already set
is kept. The sandbox's worker and the grading workers set their own (one thread) either way.

rich fixes a console's width when the console is made if COLUMNS is set then. A real
command is one process, so that is its width; a test process makes the consoles once,
and whichever test first imported the CLI would fix every later test's width (under
pytest-xdist that depends on how tests are spread over workers). Made here, the width
comes from each test's own COLUMNS.
"""

import gc
import os

for _threads in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_threads, "1")

_columns = os.environ.pop("COLUMNS", None)
import labctl.cli.render  # noqa: E402, F401

if _columns is not None:
    os.environ["COLUMNS"] = _columns

import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

settings.register_profile("labctl", database=None)
settings.load_profile("labctl")


def pytest_configure(config) -> None:
    """Bytecode is written for what the suite imports, and labctl's modules are compiled once
    before the workers start.

    The README's test command installs with `pip install --no-compile`: compiling all ~9,000
    installed modules (sympy's, torch's tests...) took ~19 s of its install, and the suite
    imports a fraction of them. With PYTHONDONTWRITEBYTECODE=1 (set on the CI machines) every
    process the suite starts (its workers, ~130 labctl commands, grading workers) would then
    compile torch anew, and labctl's modules in any case: 0.1 s of CPU each for labctl's,
    against 0.2 s for all of them here. The sandbox's worker keeps its own environment
    (`PYTHONDONTWRITEBYTECODE=1`, `labctl.isolation.sandbox`) and never writes."""
    if hasattr(config, "workerinput"):
        return
    import compileall
    import sys
    from pathlib import Path

    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.dont_write_bytecode = False

    root = Path(__file__).resolve().parent.parent
    for package in ("labctl", "labs", "clean_room"):
        compileall.compile_dir(root / package, quiet=1)


def pytest_collection_finish(session) -> None:
    """The collector stops walking what collection left alive (torch, numpy, the test modules:
    ~270,000 objects a process), and runs a tenth as often.

    Each of the ~10,000 collections in a run walked those objects again: the three workers
    spent 17 s of CPU in it (measured with `gc.callbacks`), 6 s after this. Objects the tests
    make are still collected; the limits are far from what a test keeps in memory."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)


def pytest_xdist_auto_num_workers(config) -> int:
    """`-n auto`: one worker more than there are cores. Some tests wait, not compute (a
    hanging learner's limit, a forked attack's delay); the extra worker computes meanwhile.
    Measured on two cores, with one thread a worker (stop 36): 211 s with three workers,
    236 s with two (a core idle for 86 s of it), 218 s with four."""
    return (os.cpu_count() or 1) + 1


# The modules that take longest, longest first (seconds of test time each, three workers on
# two cores, 2026-12-06: the report 131, the fault catalogue 135 before a third of it went,
# the screen at 80 columns 91, grading from where a grader stands 90, ... the diagnosis rooms
# 23). Under `--dist loadscope` a worker takes whole modules in collection order
# (`--no-loadscope-reorder`, pyproject's addopts; xdist's own order is by test count, which
# put parallel grading last and left the other workers idle for its last half minute): the
# long ones go first and the many short ones fill in behind them. A long module missing
# here runs late and alone: the screen's, added by issue 38, ended its run 50 s after the
# other two workers.
LONGEST_FIRST = (
    "test_report.py",
    "test_verify_faults.py",
    "test_screen.py",
    "hostile/test_working_directory.py",
    "test_grade_parallel.py",
    "test_columns.py",
    "hostile/test_hostile.py",
    "test_packaging.py",
    "hostile/test_kernel_attacks.py",
    "test_garbage_rooms.py",
    "hostile/test_answer_table.py",
    "hostile/test_forged_replies.py",
    "test_verify_diagnosis.py",
    "test_evidence_submit.py",
    "test_grade.py",
    "test_common_bugs.py",
    "test_diagnosis_rooms.py",
    "test_runner.py",
    "test_grade_isolation.py",
    "test_verify_v2.py",
    "test_grade_workflow.py",
    "test_grade_parts.py",
)


def pytest_collection_modifyitems(config, items) -> None:
    rank = {name: index for index, name in enumerate(LONGEST_FIRST)}

    def order(item) -> int:
        module = item.nodeid.split("::")[0].removeprefix("tests/")
        return rank.get(module, len(rank))

    items.sort(key=order)  # stable: a module's own tests keep their order


@pytest.fixture
def remembering():
    """`labctl.memo` on, as in a grading worker, for one test; off again after it."""
    from labctl import memo

    memo.enable()
    yield
    memo.disable()
