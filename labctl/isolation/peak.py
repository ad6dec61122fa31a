"""A worker call's peak memory, measured by labctl from outside the worker.

A figure the worker reported about itself (tracemalloc, a timer, a counter)
is one the learner's code can change: it runs in that process and can stop
the tracer. So labctl reads the worker's resident memory from the kernel
(`/proc/<pid>/status`, `VmHWM`: the high-water mark of its resident set),
after resetting that mark itself (`5` into `/proc/<pid>/clear_refs`) before
the call is sent.

The learner cannot reset it in turn: a worker that dropped from root to uid
65534 is not dumpable, so its /proc entries belong to root and its own write
to `clear_refs` is refused. Where it could (a worker running as labctl's own
user, or one that made itself dumpable again), a thread in labctl samples the
resident set during the call, and the figure is the larger of the two: a
reset can lower the mark, never the samples. A (T, T) array that lived long
enough to be filled is seen.
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

# Filling and reading a (4096, 4096) float32 array takes tens of ms: 1 ms samples see it.
SAMPLE_INTERVAL_S = 0.001
_PAGE = os.sysconf("SC_PAGE_SIZE")


def worker_pid(pid: int) -> int:
    """The process at the end of the chain started as `pid` (bwrap, bwrap's init, the worker).

    The worker cannot fork (its process limit is 0), so the chain has one end.
    """
    proc = Path("/proc")
    while True:
        children: list[str] = []
        with contextlib.suppress(OSError):
            for task in (proc / str(pid) / "task").iterdir():
                children += (task / "children").read_text().split()
        if not children:
            return pid
        pid = int(children[0])


def high_water_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise OSError(f"no VmHWM for process {pid}")


def resident_bytes(pid: int) -> int:
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE


class PeakMeter:
    """`with PeakMeter(pid) as meter: <the call>`; then `meter.growth`: peak minus the start, bytes.

    `reset` says whether labctl could reset the high-water mark; without it the
    figure is the samples' alone.
    """

    def __init__(self, pid: int):
        self.pid = pid
        self.reset = False
        self.growth: int | None = None
        self._start = 0
        self._sampled = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        with contextlib.suppress(OSError, ValueError, IndexError):
            while True:
                self._sampled = max(self._sampled, resident_bytes(self.pid))
                if self._stop.wait(SAMPLE_INTERVAL_S):
                    return

    def __enter__(self) -> PeakMeter:
        try:
            Path(f"/proc/{self.pid}/clear_refs").write_text("5")
            self.reset = True
        except OSError:
            self.reset = False
        self._start = resident_bytes(self.pid)
        self._sampled = self._start
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        if exc[0] is not None:
            return
        peak = self._sampled
        if self.reset:
            peak = max(peak, high_water_bytes(self.pid))
        self.growth = max(0, peak - self._start)
