"""How long `labctl run all` takes, against `python -c "import torch"`, measured side by side.

The budget (issue 41; 5x since issue 10): `labctl run all` under 4.5x the time Python
takes to import torch on the same machine. Both are timed in the same run, alternating, so
a busy machine slows both alike; the ratio of the medians is printed. This is
a benchmark, not a test: run it by hand on a quiet machine.

    .venv/bin/python benchmarks/run_all.py [--repeats 3] [--budget 4.5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time

# The console script's own function (`labctl = labctl.cli.entry:main`): what a user runs.
RUN_ALL = (
    "import sys; from labctl.cli.entry import main; "
    "sys.argv = ['labctl', 'run', 'all', '--json', '--out', sys.argv[1]]; main()"
)


def timed(command: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{command[:3]} exited with {done.returncode}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--budget", type=float, default=4.5)
    args = parser.parse_args()
    torch_s, labs_s = [], []
    with tempfile.TemporaryDirectory() as out:
        for i in range(args.repeats):
            torch_s.append(timed([sys.executable, "-c", "import torch"]))
            labs_s.append(timed([sys.executable, "-c", RUN_ALL, out]))
            print(f"repeat {i + 1}: import torch {torch_s[-1]:.2f} s, "
                  f"labctl run all {labs_s[-1]:.2f} s", file=sys.stderr)  # fmt: skip
    torch_median, labs_median = statistics.median(torch_s), statistics.median(labs_s)
    ratio = labs_median / torch_median
    verdict = "within" if ratio < args.budget else "OVER"
    print(
        f"import torch: median {torch_median:.2f} s; labctl run all: median {labs_median:.2f} s; "
        f"ratio {ratio:.2f} ({verdict} the {args.budget:g}x budget, {args.repeats} repeats)"
    )


if __name__ == "__main__":
    main()
