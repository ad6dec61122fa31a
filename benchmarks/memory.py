"""labctl's own peak memory under every shape a worker or a learner's file can give it.

Not a timed test: run it by hand (`python benchmarks/memory.py [--isolation LEVEL]
[--shape NAME ...] [--budget-mib N]`). Each shape is built in a scratch folder and the
labctl command that meets it runs as a fresh process; this script follows that process's
peak resident memory (VmHWM: labctl alone, not its worker) from /proc while it runs, so a
run the kernel kills still has its figure. The shapes (docs/isolation.md gives the figures):

- `replies-240mb`: every call of the room returns a float64 array of 240 MB, just under
  the wire's 256 MiB frame cap (labctl's reply budget refuses what would pass 512 MiB);
- `header-of-lists`: softmax's reply is a forged frame whose JSON header is 120 MiB of
  `[]`s (it took labctl to 7.16 GB);
- `zero-size-arrays`: a forged frame of 1,000,000 zero-size arrays (2.87 GB);
- `long-messages`: a forged exception message of 200 MiB (6.2 GB, and three 200 MB
  records);
- `forged-trace`: softmax's replies carry a forged trace `causal_mask(np.int64(50000))`,
  which labctl's judging would hand its reference (5.16 GB);
- `large-source`: a 60 MB `.py` file in the room (`ast.parse` took labctl to 23 GB);
- `git-bomb`: `evidence validate` of a record whose commit is a 2 GiB blob of zeros in a
  2 MB pack of the learner's repository (4.3 GB).

The verify shapes run `labctl verify clean-room --no-metrics`. `--budget-mib` sets the reply
budget for the run (a large value shows labctl without one). As a guard for this shared
machine, a run whose resident memory passes `--kill-mib` (default 3 GiB) is killed and
reported as such, and each runs under an address-space limit of 12 GiB. The bound this
project keeps: 1 GiB, for every shape.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import resource
import struct
import subprocess
import sys
import tempfile
import textwrap
import time
import zlib
from pathlib import Path

BOUND_MIB = 1024
KILL_MIB = 3072
ADDRESS_SPACE = 12 << 30
REPLY_ELEMENTS = 30_000_000  # float64: 240 MB
ROOM_CODE = f"""
import functools as _functools
import numpy as _np
def _huge(*args, **kwargs):
    return _np.ones({REPLY_ELEMENTS})
for _name in __all__:
    globals()[_name] = _functools.wraps(globals()[_name])(_huge)
"""
# Installed at import: a reply to a call of softmax is replaced by `_forge(fd, message)`.
_FORGER = """
import json as _json, os as _os, struct as _struct, sys as _sys
_wire = _sys.modules["labctl.isolation.wire"]
_send = _wire.write_frame
_armed = [False]

def _raw(fd, header, data=b""):
    body = _struct.pack(">I", len(header)) + header + data
    view = memoryview(_struct.pack(">Q", len(body)) + body)
    while view:
        view = view[_os.write(fd, view):]

def _write(fd, message):
    if not _armed[0] or "signatures" in message:
        return _send(fd, message)
    _armed[0] = False
    return _forge(fd, message)

_wire.write_frame = _write

def softmax(x, axis=-1):
    import numpy
    _armed[0] = True
    return numpy.zeros_like(x)
"""
FORGED = {
    "header-of-lists": """
def _forge(fd, message):
    lists = b"[]," * (40 << 20)  # 120 MiB
    head = b'{"tree": {"$dict": {"seq": %d, "ok": true, "elapsed_s": 0.0, "args_after": null, "value": [' % message["seq"]
    _raw(fd, head + lists + b'[]]}}, "blobs": []}')
""",
    "zero-size-arrays": """
def _forge(fd, message):
    count = 1_000_000
    specs = b",".join([b'{"dtype": "<f8", "shape": [0]}'] * count)
    value = b",".join(b'{"$nd": %d}' % i for i in range(count))
    head = b'{"tree": {"$dict": {"seq": %d, "ok": true, "elapsed_s": 0.0, "args_after": null, "value": [' % message["seq"]
    _raw(fd, head + value + b']}}, "blobs": [' + specs + b"]}")
""",
    "long-messages": """
def _forge(fd, message):
    text = b"x" * (200 << 20)
    head = b'{"tree": {"$dict": {"seq": %d, "ok": false, "error": {"$dict": {"kind": "exception", "type": "ValueError", "where": null, "message": "' % message["seq"]
    _raw(fd, head + text + b'"}}}}, "blobs": []}')
""",
    "forged-trace": """
import numpy as _np

def _forge(fd, message):
    if "trace" in message:
        message["trace"] = [
            {"function": "causal_mask", "depth": 1, "args": [_np.int64(50000)], "kwargs": {},
             "raised": "ValueError"}
        ]
    return _send(fd, message)
""",
}
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


def build_room(dest: Path, code: str = ROOM_CODE) -> Path:
    from labctl.verify.stubs import init_clean_room

    init_clean_room(dest)
    with (dest / "__init__.py").open("a", encoding="utf-8") as handle:
        handle.write("\n" + textwrap.dedent(code))
    return dest


def forging_room(dest: Path, shape: str) -> Path:
    return build_room(dest, textwrap.dedent(_FORGER) + textwrap.dedent(FORGED[shape]))


def large_source_room(dest: Path) -> Path:
    room = build_room(dest, "")
    line = "x = 1  # " + "a" * 60 + "\n"
    with (room / "big.py").open("w", encoding="utf-8") as handle:
        for _ in range((60 << 20) // len(line)):
            handle.write(line)
    return room


def _pack_entry_header(kind: int, size: int) -> bytes:
    head = bytearray([(kind << 4) | (size & 0x0F) | (0x80 if size >> 4 else 0)])
    size >>= 4
    while size:
        head.append((size & 0x7F) | (0x80 if size >> 7 else 0))
        size >>= 7
    return bytes(head)


def git_bomb(repo: Path) -> str:
    """A repository whose one pack (about 2 MB) holds a 2 GiB blob of zeros, built and
    indexed here without ever holding the blob; returns its sha."""
    from dulwich.pack import write_pack_index_v2

    size, block = 2 << 30, bytes(1 << 20)
    objects = repo / ".git" / "objects"
    (objects / "pack").mkdir(parents=True)
    (repo / ".git" / "refs" / "heads").mkdir(parents=True)
    (repo / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    digest = hashlib.sha1(b"blob %d\0" % size)
    deflate = zlib.compressobj(9)
    body = [b"PACK" + struct.pack(">II", 2, 1), _pack_entry_header(3, size)]
    entry_start = len(body[0])
    for _ in range(size // len(block)):
        digest.update(block)
        body.append(deflate.compress(block))
    body.append(deflate.flush())
    data = b"".join(body)
    checksum = hashlib.sha1(data).digest()
    name = checksum.hex()
    (objects / "pack" / f"pack-{name}.pack").write_bytes(data + checksum)
    crc = zlib.crc32(data[entry_start:]) & 0xFFFFFFFF
    with (objects / "pack" / f"pack-{name}.idx").open("wb") as index:
        write_pack_index_v2(index, [(digest.digest(), entry_start, crc)], checksum)
    return digest.hexdigest()


def _command(shape: str, scratch: Path, isolation: str, budget_mib: int) -> tuple[list, Path]:
    """The labctl command a shape runs, and the folder it runs in."""
    base = [sys.executable, "-c", _CLI, str(budget_mib)]
    if shape == "git-bomb":
        repo = scratch / "learner"
        sha = git_bomb(repo)
        template = subprocess.run(
            [*base, "evidence", "template"], capture_output=True, text=True, check=True
        ).stdout
        record = repo / "submission.yaml"
        record.write_text(template.replace("<learner-commit-sha>", sha), encoding="utf-8")
        return [*base, "evidence", "validate", str(record), "--json"], repo
    if shape == "replies-240mb":
        room = build_room(scratch / "huge_replies")
    elif shape == "large-source":
        room = large_source_room(scratch / "large_source")
    else:
        room = forging_room(scratch / shape.replace("-", "_"), shape)
    command = [*base, "verify", "clean-room", "--path", str(room), "--no-metrics", "--json"]
    command += ["--out", str(scratch / "evidence"), "--isolation", isolation, "--timeout", "60"]
    return command, scratch


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def measure(
    room_or_shape: Path | str,
    out: Path,
    isolation: str,
    budget_mib: int,
    kill_mib: int = KILL_MIB,
) -> dict:
    """Run a shape's command and follow its peak memory from here: read to the end, even if
    it is killed (by the kernel, or here past `kill_mib`). Given a room (a Path), verify it."""
    if isinstance(room_or_shape, Path):
        command = [sys.executable, "-c", _CLI, str(budget_mib), "verify", "clean-room"]
        command += ["--path", str(room_or_shape), "--no-metrics", "--json", "--out", str(out)]
        command += ["--isolation", isolation, "--timeout", "60"]
        cwd = out.parent
    else:
        command, cwd = _command(room_or_shape, out, isolation, budget_mib)
    peak, killed = 0, False
    start = time.monotonic()
    with tempfile.TemporaryFile() as stdout:
        proc = subprocess.Popen(
            command, stdout=stdout, stderr=subprocess.DEVNULL, cwd=cwd, preexec_fn=_limited
        )
        while proc.poll() is None:
            peak = max(peak, peak_kib(proc.pid) or 0)
            if peak > kill_mib << 10:
                proc.kill()
                killed = True
            time.sleep(0.02)
        stdout.seek(0)
        shown = stdout.read().decode("utf-8", "replace")
    try:
        said = json.dumps(json.loads(shown))
    except ValueError:
        said = shown
    return {
        "exit_code": proc.returncode,
        "peak_mib": round(peak / 1024),
        "seconds": round(time.monotonic() - start, 1),
        "killed_past_mib": kill_mib if killed else None,
        "calls_refused_by_the_budget": said.count("reply budget"),
        "malformed_replies": said.count("malformed reply"),
        "named": _named(said),
    }


def _named(said: str) -> str:
    """The refusal a shape should meet, where the output names it."""
    for needle in (
        "too-large",
        "past labctl's bounds",
        "exceeds the",
        "reply budget",
        "malformed reply",
    ):
        if needle in said:
            return needle
    return ""


SHAPES = (
    "replies-240mb",
    "header-of-lists",
    "zero-size-arrays",
    "long-messages",
    "forged-trace",
    "large-source",
    "git-bomb",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--isolation", default="auto")
    parser.add_argument("--budget-mib", type=int, default=0, help="0: labctl's default")
    parser.add_argument("--kill-mib", type=int, default=KILL_MIB)
    parser.add_argument("--shape", action="append", choices=SHAPES)
    args = parser.parse_args()
    worst = 0
    for shape in args.shape or SHAPES:
        with tempfile.TemporaryDirectory() as scratch:
            found = measure(shape, Path(scratch), args.isolation, args.budget_mib, args.kill_mib)
        worst = max(worst, found["peak_mib"])
        print(json.dumps({"shape": shape, **found}), flush=True)
    verdict = "within" if worst <= BOUND_MIB else "OVER"
    print(f"labctl's highest peak RSS {worst} MiB ({verdict} the {BOUND_MIB} MiB bound)")


if __name__ == "__main__":
    main()
