"""labctl's own peak memory while verifying a clean room whose every call returns 240 MB.

Not a timed test: run it by hand (`python benchmarks/memory.py [--isolation LEVEL]
[--budget-mib N]`). It builds the room (the `clean-room init` stubs, each
function replaced by one that returns a float64 array of 240 MB, just under the
wire's 256 MiB frame cap), runs `labctl verify clean-room --no-metrics` on it as
a fresh process and prints that process's peak resident memory (VmHWM: labctl
alone, not its worker) and how many calls the reply budget refused.
`--budget-mib` sets the budget for the run (a large value shows labctl without
one). The peak is read from /proc while verify runs, so a run the kernel kills for
memory still has its figure. The bound this project keeps: 1.5 GiB (the budget, one frame being read,
and the interpreter with numpy; `verify --no-metrics` does not load torch).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

BOUND_MIB = 1536
REPLY_ELEMENTS = 30_000_000  # float64: 240 MB
ROOM_CODE = f"""
import functools as _functools
import numpy as _np
def _huge(*args, **kwargs):
    return _np.ones({REPLY_ELEMENTS})
for _name in __all__:
    globals()[_name] = _functools.wraps(globals()[_name])(_huge)
"""
# The CLI, with the reply budget set for the run (0: labctl's own).
_CLI = textwrap.dedent(
    """
    import sys
    from labctl.isolation import replies
    budget = int(sys.argv.pop(1))
    if budget:
        replies.BUDGET.limit = budget << 20
    from labctl.cli.main import main
    main()
    """
)


def peak_kib(pid: int) -> int | None:
    """VmHWM, the process's peak resident memory so far; None once it has gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def build_room(dest: Path) -> Path:
    from labctl.verify.stubs import init_clean_room

    init_clean_room(dest)
    with (dest / "__init__.py").open("a", encoding="utf-8") as handle:
        handle.write("\n" + ROOM_CODE)
    return dest


def measure(room: Path, out: Path, isolation: str, budget_mib: int) -> dict:
    """Run verify and follow its peak memory from here: read to the end, even if it is killed."""
    command = [sys.executable, "-c", _CLI, str(budget_mib), "verify", "clean-room"]
    command += ["--path", str(room), "--no-metrics", "--json", "--out", str(out)]
    command += ["--isolation", isolation, "--timeout", "60"]
    peak = 0
    with tempfile.TemporaryFile() as stdout:
        proc = subprocess.Popen(command, stdout=stdout, stderr=subprocess.DEVNULL)
        while proc.poll() is None:
            peak = max(peak, peak_kib(proc.pid) or 0)
            time.sleep(0.05)
        stdout.seek(0)
        shown = stdout.read().decode("utf-8", "replace")
    return {
        "exit_code": proc.returncode,
        "peak_mib": round(peak / 1024),
        "calls_refused_by_the_budget": shown.count("reply budget"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--isolation", default="auto")
    parser.add_argument("--budget-mib", type=int, default=0, help="0: labctl's default")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        room = build_room(Path(scratch) / "huge_replies")
        found = measure(room, Path(scratch) / "evidence", args.isolation, args.budget_mib)
    print(json.dumps(found))
    verdict = "within" if found["peak_mib"] <= BOUND_MIB else "OVER"
    print(f"labctl peak RSS {found['peak_mib']:.0f} MiB ({verdict} the {BOUND_MIB} MiB bound)")


if __name__ == "__main__":
    main()
