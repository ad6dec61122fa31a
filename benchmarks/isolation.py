"""What the sandbox costs: `labctl verify clean-room --no-metrics`, sandbox against process.

Not a timed test: run it by hand (`python benchmarks/isolation.py [--runs N] [--path DIR]`).
Each repetition runs both levels back to back, alternating which goes first, as
fresh `labctl` processes on the project's clean room (or DIR), so both see the
same machine load. Prints every wall time, the medians and their ratio; the
target is a sandbox that adds at most 30 % to verify's wall time.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_RATIO = 1.30
_CLI = "from labctl.cli.entry import main; main()"  # the console script's function


def one(level: str, path: Path, out: Path) -> float:
    command = [sys.executable, "-c", _CLI, "verify", "clean-room", "--path", str(path)]
    command += ["--no-metrics", "--json", "--out", str(out), "--isolation", level]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(
            f"verify --isolation {level} exited {done.returncode}: {done.stderr[-500:]!r}"
        )
    return elapsed


def main() -> None:
    from labctl.faults import project_clean_room

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--path", type=Path, default=project_clean_room())
    args = parser.parse_args()
    times: dict[str, list[float]] = {"sandbox": [], "process": []}
    with tempfile.TemporaryDirectory() as scratch:
        for run in range(args.runs):
            order = ("sandbox", "process") if run % 2 == 0 else ("process", "sandbox")
            for level in order:
                times[level].append(one(level, args.path, Path(scratch) / "verify"))
                print(f"run {run + 1}/{args.runs} {level:8} {times[level][-1]:6.2f} s", flush=True)
    sandbox, process = (statistics.median(times[k]) for k in ("sandbox", "process"))
    ratio = sandbox / process
    verdict = "within" if ratio <= TARGET_RATIO else "OVER"
    print(f"median wall time: sandbox {sandbox:.2f} s, process {process:.2f} s")
    print(f"ratio sandbox/process {ratio:.3f} ({verdict} the {TARGET_RATIO:.2f} target)")


if __name__ == "__main__":
    main()
