"""How long `labctl verify clean-room` takes, against `python -c "import torch"`, side by side.

The budget (issue 41; 3x since issue 21): verify with the course template's metrics (the
default) under 2.5x the time Python takes to import torch on the same machine;
`--no-metrics` is timed too.
Each command runs on the project's own clean room, alternating with the torch import, so
a busy machine slows all alike; the ratio of the medians is printed. A benchmark, not a
test: run it by hand on a quiet machine.

    .venv/bin/python benchmarks/verify.py [--repeats 3] [--budget 2.5] [--path ROOM]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import util
from pathlib import Path

# The console script's own function (`labctl = labctl.cli.entry:main`): what a user runs.
VERIFY = (
    "import sys; from labctl.cli.entry import main; "
    "sys.argv = ['labctl', 'verify', 'clean-room', '--json', '--path', sys.argv[1], "
    "'--out', sys.argv[2], *sys.argv[3:]]; main()"
)


def timed(command: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{command[:3]} exited with {done.returncode}: {done.stderr[-500:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--budget", type=float, default=2.5)
    parser.add_argument("--path", type=Path, help="clean room (default: the project's own)")
    args = parser.parse_args()
    room = args.path or Path(util.find_spec("labctl.clean_room").origin).parent
    times: dict[str, list[float]] = {"import torch": [], "verify": [], "verify --no-metrics": []}
    with tempfile.TemporaryDirectory() as out:
        for i in range(args.repeats):
            times["import torch"].append(timed([sys.executable, "-c", "import torch"]))
            base = [sys.executable, "-c", VERIFY, str(room), out]
            times["verify"].append(timed(base))
            times["verify --no-metrics"].append(timed([*base, "--no-metrics"]))
            shown = ", ".join(f"{k} {v[-1]:.2f} s" for k, v in times.items())
            print(f"repeat {i + 1}: {shown}", file=sys.stderr)
    torch_median = statistics.median(times["import torch"])
    print(f"import torch: median {torch_median:.2f} s ({args.repeats} repeats)")
    for name in ("verify", "verify --no-metrics"):
        median = statistics.median(times[name])
        ratio = median / torch_median
        verdict = "within" if ratio < args.budget else "OVER"
        print(f"{name}: median {median:.2f} s; ratio {ratio:.2f} "
              f"({verdict} the {args.budget:g}x budget)")  # fmt: skip


if __name__ == "__main__":
    main()
