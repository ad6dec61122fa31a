"""`Fault`: one named way to break the project's clean room, written into a copy of it."""

from __future__ import annotations

import shutil
import textwrap
from dataclasses import dataclass
from importlib import util
from pathlib import Path


@dataclass(frozen=True)
class Fault:
    """One fault: `source` appended to `module` of the project's clean room breaks `function`.

    `course` is where the course (or the contract) teaches the right behaviour;
    `signal` is the verify check this fault is there to prove (it must catch it).
    `hangs`: a call of it never returns, so the diagnosis observes its room in a worker,
    which a timeout can stop; `measured`: its symptom is the worker's memory (`memory`), which
    only a worker has; every other fault room runs in labctl's process
    (`labctl.isolation.inprocess`), which nothing can stop.
    """

    name: str
    function: str
    module: str
    description: str
    course: str
    source: str
    signal: str = "parity"
    hangs: bool = False
    measured: bool = False

    @property
    def in_worker(self) -> bool:
        """The diagnosis observes its room in a worker (it hangs, or its symptom is memory)."""
        return self.hangs or self.measured

    def materialize(self, dest: Path, base: Path | None = None) -> Path:
        """Write the project's clean room with this fault into `dest` (which must not exist)."""
        base = base or project_clean_room()
        shutil.copytree(base, dest, ignore=shutil.ignore_patterns("__pycache__"))
        target = dest / f"{self.module}.py"
        with target.open("a", encoding="utf-8") as handle:
            handle.write(f"\n\n# injected fault: {self.name}\n")
            handle.write(textwrap.dedent(self.source).strip() + "\n")
        return dest


def project_clean_room() -> Path:
    return Path(util.find_spec("labctl.clean_room").origin).parent
