"""How long `labctl --help` and `labctl list` take, against `python -c "import torch"`, side by side.

The budgets (issue 41): `labctl --help` within 0.10x and `labctl list` within 0.25x the
time Python takes to import torch on the same machine. Each repeat runs the console script
(`labctl` beside this Python) and the torch import one after another, so a busy machine
slows all alike; the figure is the median over repeats of each repeat's ratio, in wall time
and in CPU time (user + system of the process: steadier where other work shares the cores).
A benchmark, not a test: run it by hand, on a quiet machine for the figure you report.

    .venv/bin/python benchmarks/startup.py [--repeats 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

BUDGETS = {"labctl --help": 0.10, "labctl list": 0.25, "labctl list --json": 0.25}


def timed(command: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run of `command`, which must succeed."""
    before = os.times()
    start = time.perf_counter()
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - start
    after = os.times()
    if done.returncode != 0:
        raise SystemExit(f"{command} exited with {done.returncode}: {done.stderr[-500:]}")
    cpu = (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    script = Path(sys.executable).parent / "labctl"
    if not script.exists():
        raise SystemExit(f"no console script at {script}: pip install -e . first")
    commands = {
        "import torch": [sys.executable, "-c", "import torch"],
        "labctl --help": [str(script), "--help"],
        "labctl list": [str(script), "list"],
        "labctl list --json": [str(script), "list", "--json"],
    }
    env_note = {k: os.environ[k] for k in ("COLUMNS", "LABCTL_LANG") if k in os.environ}
    ratios: dict[str, dict[str, list[float]]] = {
        name: {"wall": [], "cpu": []} for name in commands if name != "import torch"
    }
    torch_times: dict[str, list[float]] = {"wall": [], "cpu": []}
    for i in range(args.repeats):
        wall, cpu = timed(commands["import torch"])
        torch_times["wall"].append(wall)
        torch_times["cpu"].append(cpu)
        shown = [f"import torch {wall:.2f} s"]
        for name, ratio in ratios.items():
            w, c = timed(commands[name])
            ratio["wall"].append(w / wall)
            ratio["cpu"].append(c / cpu)
            shown.append(f"{name} {w * 1000:.0f} ms")
        print(f"repeat {i + 1}: " + ", ".join(shown), file=sys.stderr)
    print(
        f"import torch: median {statistics.median(torch_times['wall']):.2f} s wall, "
        f"{statistics.median(torch_times['cpu']):.2f} s CPU ({args.repeats} repeats"
        + (f"; {env_note}" if env_note else "")
        + ")"
    )
    for name, ratio in ratios.items():
        wall, cpu = statistics.median(ratio["wall"]), statistics.median(ratio["cpu"])
        verdict = "within" if wall <= BUDGETS[name] else "OVER"
        print(
            f"{name}: ratio {wall:.3f} wall, {cpu:.3f} CPU "
            f"({verdict} the {BUDGETS[name]:g}x budget)"
        )


if __name__ == "__main__":
    main()
