"""The hostile-clean-room suite: every attack, under the sandbox and under the process fallback.

Under `--isolation sandbox` every attack ends with verify exit 1 and a named
reason, labctl alive, no file changed outside the sandbox (the repository and
a watched directory are fingerprinted before and after), and no process left
behind. Under `--isolation process` each attack ends as the README's table
says (`Attack.process_stops`). Under CI=true a missing sandbox fails, never skips.
The attacks of one level run in parallel, each as its own `labctl` process
(some attack labctl itself), with a 3 s call timeout. Every one of them is verified at
one fresh seed and reads the reference's outputs at it from a signed cache, as a grading
worker does: the attacks are on labctl, not on the reference, and a process that does not
import torch costs a third of one that does.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from fixturetools import signed_reference

from hostile.attacks import ATTACKS, BY_NAME, REPO, Attack, build, require_sandbox

RUN_LIMIT_S = 180
FORK_DELAY_S = 8.0  # the fork attack writes 6 s after forking; look after that
_CLI = "from labctl.cli.entry import main; main()"  # the console script's function
WATCHED: list[Path] = []  # removed when the module's tests end


def fingerprint(root: Path, skip: tuple[str, ...] = ()) -> dict[str, tuple[int, int]]:
    """{relative path: (size, mtime_ns)} of every file under `root`, but `skip`ped folders."""
    found = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in skip]  # not descended into at all
        for name in files:
            path = Path(folder, name)
            if path.is_file() and name not in skip:
                stat = path.stat()
                found[str(path.relative_to(root))] = (stat.st_size, stat.st_mtime_ns)
    return found


def repo_fingerprint() -> dict[str, tuple[int, int]]:
    # .mutation/ is scripts/mutation.py's scratch copy: a mutation run may be writing there.
    skipped = (".venv", ".git", "__pycache__", ".ruff_cache", ".pytest_cache", ".mutation")
    return fingerprint(REPO, skipped)


def processes_with(needles: list[str]) -> list[str]:
    """`pid cmdline` of every process whose command line holds one of `needles`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (
                (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
            )
        except OSError:
            continue
        if any(n in cmdline for n in needles):
            found.append(f"{entry.name} {cmdline[:200]}")
    return found


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return ""


class Listener:
    """A loopback TCP server that counts the connections it accepts."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.2)
        self.port = self.server.getsockname()[1]
        self.accepted = 0
        self.stop = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop:
            try:
                conn, _ = self.server.accept()
            except OSError:
                continue
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self.stop = True
        self.thread.join()
        self.server.close()


@dataclass
class Result:
    attack: Attack
    rc: int | None = None
    stdout: str = ""
    stderr: str = ""
    document: dict | None = None
    labctl_stopped: bool = False
    connections: int = 0
    ended: float = 0.0
    token: str = ""
    watched: Path = Path()
    watched_before: dict = field(default_factory=dict)
    harm: list[str] = field(default_factory=list)

    @property
    def harmed(self) -> bool:
        return bool(self.harm)


def run_attack(attack: Attack, level: str, base: Path, reference: tuple[int, dict]) -> Result:
    token = f"hostile{uuid.uuid4().hex[:12]}"
    work = base / token
    # What a worker might harm: a folder any user may write (as /tmp, or a shared folder),
    # outside pytest's own, which only root enters. The worker of a root labctl is uid 65534:
    # a file only root may write would tell nothing of the process level.
    watched = Path(tempfile.mkdtemp(prefix=f"{token}-watched-"))
    (watched / "home").mkdir()
    for folder in (watched, watched / "home"):
        folder.chmod(0o777)
    (watched / "keep.txt").write_text("keep")
    WATCHED.append(watched)
    listener = Listener()
    room = build(attack, work / token, watched, listener.port)
    result = Result(attack, token=token, watched=watched, watched_before=fingerprint(watched))
    out, errs = work / "stdout", work / "stderr"
    seed, cache = reference
    env = {**os.environ, **cache}
    if attack.name == "output-flood":
        env["LABCTL_DEBUG"] = "1"
    command = [sys.executable, "-c", _CLI, "verify", "clean-room", "--path", str(room)]
    command += ["--no-metrics", "--json", "--timeout", "3", "--out", str(work / "evidence")]
    command += ["--isolation", level, "--seed", str(seed)]
    with out.open("wb") as stdout, errs.open("wb") as stderr:
        proc = subprocess.Popen(command, stdout=stdout, stderr=stderr, cwd=work, env=env)
        deadline = time.monotonic() + RUN_LIMIT_S
        while proc.poll() is None:
            if _state(proc.pid) == "T" or time.monotonic() > deadline:
                result.labctl_stopped = True
                proc.kill()
                proc.wait()
                break
            time.sleep(0.05)
    result.rc = proc.returncode
    result.ended = time.monotonic()
    listener.close()
    result.connections = listener.accepted
    result.stdout = out.read_text("utf-8", "replace")
    result.stderr = errs.read_text("utf-8", "replace")[-4000:]
    try:
        result.document = json.loads(result.stdout)
    except ValueError:
        result.document = None
    return result


def judge(result: Result) -> None:
    """Fill `result.harm`: what the attack achieved, outside its sandbox."""
    attack = result.attack
    if attack.harm and (result.watched / attack.harm).exists():
        result.harm.append(f"wrote {attack.harm}")
    if fingerprint(result.watched) != result.watched_before and not attack.harm:
        result.harm.append("changed the watched directory")
    if not (result.watched / "keep.txt").exists():
        result.harm.append("deleted a file outside the clean room")
    if result.connections:
        result.harm.append("reached a loopback server")
    if result.labctl_stopped:
        result.harm.append("stopped labctl")
    if result.rc is not None and result.rc < 0:
        result.harm.append(f"killed labctl ({signal.Signals(-result.rc).name})")
    if attack.forges_pass and result.rc == 0:
        result.harm.append("verify passed on borrowed code")


_BATCHES: dict[str, tuple[dict[str, Result], list[str], bool]] = {}


def batch(
    level: str, base: Path, reference: tuple[int, dict]
) -> tuple[dict[str, Result], list[str], list[str]]:
    """Every attack at `level`, in parallel, at `reference`'s seed: results, processes left
    behind, and the files of the repository that changed meanwhile (none)."""
    if level not in _BATCHES:
        before = repo_fingerprint()
        with ThreadPoolExecutor(max_workers=4) as pool:
            done = list(pool.map(lambda a: run_attack(a, level, base / level, reference), ATTACKS))
        fork = next(r for r in done if r.attack.name == "fork-outlives")
        time.sleep(max(0.0, FORK_DELAY_S - (time.monotonic() - fork.ended)))
        results = {r.attack.name: r for r in done}
        for result in done:
            judge(result)
        # Each room is named by its token, which every process of its worker carries (the
        # sandbox binds the room at /opt/labctl/room/<token>): other labctl runs on the
        # machine are not this test's leftovers.
        left = processes_with([r.token for r in done])
        after = repo_fingerprint()
        changed = sorted(p for p in {*before, *after} if before.get(p) != after.get(p))
        _BATCHES[level] = (results, left, changed)
    return _BATCHES[level]


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    yield tmp_path_factory.mktemp("hostile")
    for watched in WATCHED:
        shutil.rmtree(watched, ignore_errors=True)


@pytest.fixture(scope="module")
def reference(base) -> tuple[int, dict]:
    """The one fresh seed both levels verify at, and its signed cache."""
    return signed_reference(base / "reference")


@pytest.fixture(scope="module")
def sandboxed(base, reference):
    require_sandbox()
    return batch("sandbox", base, reference)


@pytest.fixture(scope="module")
def fallback(base, reference):
    return batch("process", base, reference)


def _says(result: Result, text: str) -> bool:
    shown = json.dumps(result.document)
    return any(choice in shown for choice in text.split("|"))


@pytest.mark.parametrize("name", [a.name for a in ATTACKS])
def test_the_sandbox_stops_the_attack(sandboxed, name):
    results, _, _ = sandboxed
    result = results[name]
    assert not result.harm, f"{name}: {result.harm}\n{result.stderr}"
    assert result.rc == 1, result.stderr
    assert result.document is not None and result.document["passed"] is False
    assert result.document["isolation"] == "sandbox"
    if result.attack.reason:
        assert _says(result, result.attack.reason), result.stdout[:3000]


def test_the_sandbox_leaves_no_process_and_no_file_behind(sandboxed):
    _, left, changed = sandboxed
    assert left == []
    assert changed == []


@pytest.mark.parametrize("name", [a.name for a in ATTACKS])
def test_the_process_fallback_stops_what_the_readme_says(fallback, name):
    results, _, _ = fallback
    result = results[name]
    stops = result.attack.stopped_by_process(root=os.geteuid() == 0)
    assert result.harmed != stops, (
        f"{name}: documented {'stopped' if stops else 'not stopped'}, "
        f"got harm {result.harm}\n{result.stderr}"
    )
    if stops:
        assert result.rc == 1, result.stderr
        assert result.document["isolation"] == "process"
        assert "not a security boundary" in result.stderr
        reason = result.attack.process_reason or result.attack.reason
        if reason:
            assert _says(result, reason), result.stdout[:3000]


def test_the_process_fallback_leaves_no_process_behind(fallback):
    _, left, _ = fallback
    assert left == []


def test_a_flood_of_output_stays_off_labctls_stdout(sandboxed, fallback):
    for results, _, _ in (sandboxed, fallback):
        result = results["output-flood"]
        assert result.document is not None  # one JSON document, with LABCTL_DEBUG=1 too
        assert len(result.stdout) < 1 << 20
        assert "xxxxxxxxxx" not in result.stdout and "xxxxxxxxxx" not in result.stderr


def test_a_stopped_softmax_costs_one_timeout_and_what_never_reaches_it_is_observed(sandboxed):
    """softmax stops its own process, in a room of stubs: the functions built from it are
    each tried once (0.5 s) and said as what they are, stubs, not "built from softmax, which
    timed out" (a function that never reaches the hung one was skipped, and failed)."""
    results, _, _ = sandboxed
    result = results["self-stop"]
    said = {c["function"]: c["message"] for c in result.document["checks"] if c["name"] == "runs"}
    assert "no answer within" in said["softmax"]
    assert said["scaled_dot_product_attention"].startswith("not implemented"), said
    assert not _says(result, "which timed out")
    assert result.document["wall_time_s"] < 60


@pytest.mark.parametrize("level", ["sandbox", "process"])
def test_killing_labctl_ends_a_spinning_worker(tmp_path, reference, level):
    if level == "sandbox":
        require_sandbox()
    token = f"spin{uuid.uuid4().hex[:12]}"
    room = tmp_path / token
    build(BY_NAME["self-stop"], room, tmp_path, 0)
    with (room / "__init__.py").open("a") as handle:
        handle.write("\n\ndef softmax(x, axis=-1):\n    while True:\n        pass\n")
    command = [sys.executable, "-c", _CLI, "verify", "clean-room", "--path", str(room)]
    command += ["--no-metrics", "--timeout", "120", "--out", str(tmp_path / "ev")]
    # The reference's outputs from the signed cache, as the attacks read them: labctl computes
    # none (torch) while its worker spins.
    seed, cache = reference
    proc = subprocess.Popen(
        [*command, "--isolation", level, "--seed", str(seed)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **cache},
    )
    needle = token  # the room's name: in the worker's command line at either level
    deadline = time.monotonic() + 90
    while not any(" -c " in p for p in processes_with([needle])) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_with([needle]), "the worker never started"
    time.sleep(1.0)
    proc.send_signal(signal.SIGKILL)
    proc.wait()

    def workers() -> list[str]:
        return [p for p in processes_with([needle]) if " -c " in p]

    deadline = time.monotonic() + 10
    while workers() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert workers() == []  # the spinning worker is killed with labctl
    # bubblewrap itself then ends, once the kernel has torn its namespaces down: under a
    # loaded CI run that once took more than 10 s
    deadline = time.monotonic() + 60
    while processes_with([needle]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_with([needle]) == []
