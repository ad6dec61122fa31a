"""Grading throughput, side by side with what a grader would do without `labctl grade`.

Run from the repository root (it takes minutes; it is not a test):

    .venv/bin/python benchmarks/grade.py [--learners 40] [--metrics] [--skip-run-all]
    .venv/bin/python benchmarks/grade.py --target [--learners 30] [--repeats 2]

It generates a class of N learners in a temporary folder (the project's clean
room, every catalogued fault, a learner whose import hangs, the rest copies of
the project's clean room), then measures, on the same cores, one after the
other:

- `labctl --help` and `labctl list` against `python -c "import torch"`;
- `labctl run all` against the same (unless --skip-run-all);
- N separate `labctl verify clean-room` calls, one per learner (the baseline);
- `labctl grade` serially (`--jobs 1`), with `--jobs 2`, and on a local Dask
  cluster of two worker processes (`--scheduler`), each into a fresh --out.

Without --metrics the grading rubric is the default one less its lab-metric
items and verify runs with --no-metrics: both sides do the same work (every
contract check of every function against the reference). With --metrics both
measure the course template's metrics too (lab runs: much slower).

It prints one table: wall time, learners per minute, and the ratio to the
baseline (or to importing torch).

`--target` measures the one claim the documentation makes: a class of N learners (30
by default here) graded with the default rubric as it ships (template metrics on) at
`--jobs 2`, against N separate `labctl verify clean-room --metrics` calls, paired in one
run: half the verify calls, then `grade`, then the other half, so a load that comes and
goes on a shared machine weighs on both sides; `--repeats R` pairs them R times (the
halves swapped each time). It prints each pair's wall-time ratio, its CPU-time ratio (the
user and system time of every process, the rooms included where a cgroup can count them:
`CpuMeter`; a busy machine sways it less), the load, and whether grading is at least
TARGET times faster.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
LABCTL = str(Path(sys.executable).parent / "labctl")
TIMEOUT = "2"  # seconds per clean-room call, on both sides
LEARNER_TIMEOUT = "60"
TARGET = 5.0  # grading at --jobs 2 against separate verify calls, default rubric


def timed(command: list[str], **kwargs) -> float:
    start = time.perf_counter()
    subprocess.run(
        command, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kwargs
    )
    return time.perf_counter() - start


def build_class(root: Path, n: int) -> list[Path]:
    from labctl import faults

    room = faults.project_clean_room()
    folders = []
    for fault in faults.CATALOGUE[: max(0, n - 2)]:
        fault.materialize(root / f"fault-{fault.name}" / "clean_room")
        folders.append(root / f"fault-{fault.name}")
    hang = root / "hang-at-import" / "clean_room"
    shutil.copytree(room, hang, ignore=shutil.ignore_patterns("__pycache__"))
    with (hang / "primitives.py").open("a") as handle:
        handle.write("\nimport time\nwhile True:\n    time.sleep(1)\n")
    folders.append(hang.parent)
    index = 0
    while len(folders) < n:
        index += 1
        target = root / f"correct-{index:02d}" / "clean_room"
        shutil.copytree(room, target, ignore=shutil.ignore_patterns("__pycache__"))
        folders.append(target.parent)
    return folders


def rubric_file(where: Path, metrics: bool) -> Path:
    from labctl.grade.rubric import default_rubric_text

    data = yaml.safe_load(default_rubric_text())
    dropped = {"submission"} if metrics else {"submission", "metric"}
    data["items"] = [i for i in data["items"] if i["kind"] not in dropped]
    data["name"] = "benchmark rubric"
    path = where / "rubric.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def verify_calls(folders: list[Path], metrics_flag: str, tmp_path: Path, env: dict) -> float:
    """The baseline: one `labctl verify clean-room` per learner, one after the other."""
    start = time.perf_counter()
    for folder in folders:
        subprocess.run(
            [
                LABCTL,
                "verify",
                "clean-room",
                "--path",
                str(folder / "clean_room"),
                metrics_flag,
                "--timeout",
                TIMEOUT,
                "--out",
                str(tmp_path / "verify" / folder.name),
                "--json",
            ],
            check=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd=tmp_path,
        )
    return time.perf_counter() - start


class CpuMeter:
    """User and system time of every process started from here, the rooms included.

    labctl kills a room with its process group when it is done with it; no process waits
    for the room's interpreter, so its time reaches no one's `RUSAGE_CHILDREN`. A cgroup
    counts every process ever in it, killed or not: where this process may make one (root,
    cgroup v1's cpuacct or cgroup v2) it moves itself in, and its children are born there.
    Elsewhere it falls back to the waited-for processes, and `what` says the rooms are left
    out.
    """

    def __init__(self) -> None:
        self.group: Path | None = None
        self.home: Path | None = None
        for root, usage in (
            (Path("/sys/fs/cgroup/cpuacct"), "cpuacct.usage"),
            (Path("/sys/fs/cgroup"), "cpu.stat"),
            (Path("/sys/fs/cgroup/unified"), "cpu.stat"),
        ):
            if usage == "cpu.stat" and not (root / "cgroup.controllers").is_file():
                continue
            group = root / f"labctl-bench-{os.getpid()}"
            try:
                group.mkdir()
            except OSError:
                continue
            try:
                if not (group / usage).is_file():
                    raise OSError(usage)
                (group / "cgroup.procs").write_text(str(os.getpid()))
            except OSError:
                group.rmdir()
                continue
            self.group, self.home, self.usage = group, root, usage
            break
        self.what = (
            "every process, the rooms included (a cgroup)"
            if self.group is not None
            else "labctl's processes, not the rooms (no cgroup could be made here)"
        )

    def read(self) -> float:
        """Seconds of CPU so far, less this process's own."""
        if self.group is None:
            used = resource.getrusage(resource.RUSAGE_CHILDREN)
            return used.ru_utime + used.ru_stime
        own = resource.getrusage(resource.RUSAGE_SELF)
        text = (self.group / self.usage).read_text()
        if self.usage == "cpuacct.usage":
            total = int(text) / 1e9
        else:
            total = int(text.split("usage_usec ")[1].split()[0]) / 1e6
        return total - own.ru_utime - own.ru_stime

    def close(self) -> None:
        if self.group is None:
            return
        (self.home / "cgroup.procs").write_text(str(os.getpid()))
        self.group.rmdir()
        self.group = None


def _paired(
    folders, klass, tmp_path, env, repeat: int, meter: CpuMeter
) -> tuple[float, float, float, float]:
    """(grade wall, verify wall, grade cpu, verify cpu): half the verify calls, grade, the
    other half; which half goes first alternates with `repeat`."""
    half = len(folders) // 2
    first, second = (folders[:half], folders[half:])[:: 1 if repeat % 2 == 0 else -1]
    verify_wall = verify_cpu = 0.0
    cpu = meter.read()
    verify_wall += verify_calls(first, "--metrics", tmp_path, env)
    verify_cpu += meter.read() - cpu
    grade = [LABCTL, "grade", str(klass), "--out", str(tmp_path / f"grades-{repeat}")]
    grade += ["--jobs", "2", "--timeout", TIMEOUT, "--learner-timeout", LEARNER_TIMEOUT, "--json"]
    cpu = meter.read()
    graded = timed(grade, env=env, cwd=tmp_path)
    grade_cpu = meter.read() - cpu
    cpu = meter.read()
    verify_wall += verify_calls(second, "--metrics", tmp_path, env)
    verify_cpu += meter.read() - cpu
    return graded, verify_wall, grade_cpu, verify_cpu


def target(n: int, repeats: int) -> None:
    """Default rubric, metrics on: `grade --jobs 2` against N verify calls, paired (`_paired`)
    `repeats` times; each pair is printed as it ends, so a run stopped early still tells."""
    meter = CpuMeter()
    try:
        with tempfile.TemporaryDirectory(prefix="labctl-bench-") as tmp:
            tmp_path = Path(tmp)
            env = dict(os.environ, NO_COLOR="1")
            klass = tmp_path / "class"
            folders = build_class(klass, n)
            print(f"{n} learners, default rubric (template metrics on), {os.cpu_count()} cores")
            print(f"CPU time: {meter.what}")
            ratios = []
            for repeat in range(repeats):
                load = os.getloadavg()[0]
                graded, baseline, grade_cpu, verify_cpu = _paired(
                    folders, klass, tmp_path, env, repeat, meter
                )
                ratios.append(baseline / graded)
                print(
                    f"pair {repeat + 1}: grade --jobs 2 {graded:.1f} s ({grade_cpu:.0f} s CPU), "
                    f"{n} × verify --metrics {baseline:.1f} s ({verify_cpu:.0f} s CPU): "
                    f"{baseline / graded:.2f}× (CPU {verify_cpu / grade_cpu:.2f}×), "
                    f"load {load:.1f} to {os.getloadavg()[0]:.1f}",
                    flush=True,
                )
    finally:
        meter.close()
    worst = min(ratios)
    verdict = "met" if worst >= TARGET else "missed"
    print(
        f"grading is {worst:.2f}× to {max(ratios):.2f}× faster "
        f"(target ≥ {TARGET:g}× in every pair: {verdict})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--learners", type=int, default=None, help="40; 30 with --target")
    parser.add_argument("--repeats", type=int, default=2, help="pairs measured (--target)")
    parser.add_argument("--metrics", action="store_true")
    parser.add_argument("--skip-run-all", action="store_true")
    parser.add_argument("--target", action="store_true", help="only the documented claim")
    args = parser.parse_args()
    if args.target:
        target(args.learners or 30, args.repeats)
        return
    n = args.learners or 40
    rows: list[tuple[str, float, float | None, str]] = []
    with tempfile.TemporaryDirectory(prefix="labctl-bench-") as tmp:
        tmp_path = Path(tmp)
        env = dict(os.environ, NO_COLOR="1")
        torch_s = timed([sys.executable, "-c", "import torch"])
        rows.append(('python -c "import torch"', torch_s, None, "1.00 (base)"))
        for name, command in (
            ("labctl --help", [LABCTL, "--help"]),
            ("labctl list", [LABCTL, "list"]),
        ):
            t = timed(command, env=env)
            rows.append((name, t, None, f"{t / torch_s:.2f} × torch import"))
        if not args.skip_run_all:
            t = timed(
                [LABCTL, "run", "all", "--out", str(tmp_path / "runs")], env=env, cwd=tmp_path
            )
            rows.append(("labctl run all", t, None, f"{t / torch_s:.1f} × torch import"))

        klass = tmp_path / "class"
        folders = build_class(klass, n)
        rubric = rubric_file(tmp_path, args.metrics)
        metrics_flag = "--metrics" if args.metrics else "--no-metrics"
        baseline = verify_calls(folders, metrics_flag, tmp_path, env)
        per_min = n / baseline * 60
        rows.append(
            (f"{n} × labctl verify clean-room {metrics_flag}", baseline, per_min, "1.00 (base)")
        )

        grade = [
            LABCTL,
            "grade",
            str(klass),
            "--rubric",
            str(rubric),
            "--timeout",
            TIMEOUT,
            "--learner-timeout",
            LEARNER_TIMEOUT,
            "--json",
        ]
        for label, extra in (
            ("labctl grade --jobs 1", ["--jobs", "1"]),
            ("labctl grade --jobs 2", ["--jobs", "2"]),
        ):
            t = timed(
                [*grade, "--out", str(tmp_path / label.split()[-1]), *extra], env=env, cwd=tmp_path
            )
            rows.append((label, t, n / t * 60, f"{baseline / t:.2f} × verify calls"))
        try:
            from distributed import LocalCluster
        except ImportError:
            rows.append(
                (
                    "labctl grade --scheduler (Dask)",
                    float("nan"),
                    None,
                    "skipped: pip install 'labctl[dask]'",
                )
            )
        else:
            with LocalCluster(
                n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
            ) as cluster:
                t = timed(
                    [
                        *grade,
                        "--out",
                        str(tmp_path / "dask"),
                        "--scheduler",
                        cluster.scheduler_address,
                    ],
                    env=env,
                    cwd=tmp_path,
                )
            rows.append(
                (
                    "labctl grade --scheduler (2 Dask workers)",
                    t,
                    n / t * 60,
                    f"{baseline / t:.2f} × verify calls",
                )
            )

    print(
        f"{n} learners ({'with' if args.metrics else 'without'} the template metrics), {os.cpu_count()} cores"
    )
    print(f"{'what':<48} {'wall s':>8} {'learners/min':>13}  ratio")
    for name, wall, per_minute, ratio in rows:
        rate = f"{per_minute:13.1f}" if per_minute else " " * 13
        print(f"{name:<48} {wall:8.2f} {rate}  {ratio}")


if __name__ == "__main__":
    main()
