"""What the kernel holds for a worker beyond its address space, and whom it reaches.

Each attack is its own clean room (the stubs, `softmax` replaced by the attack),
called through `CleanRoom` at both isolation levels. It raises "PWNED: ..." when it
gets through, so the CallError says what it did, and otherwise raises with the
refusal it met:

- a System V message queue or semaphore set, or a POSIX message queue, which outlives
  the worker and would carry a string from one learner to the next where the IPC
  namespace is shared (the process level);
- a socket of a family other than AF_UNIX: AF_VSOCK reached the hypervisor, AF_NETLINK
  the kernel, AF_INET a loopback server;
- socket buffers and descriptors: socketpairs with 4 MiB send buffers held 3 GiB past
  `--memory-mb 256`; the descriptor limit and the default buffer size bound them.

An attack that gets through stops at a few hundred MiB (it proves the bound is missing
without taking the machine down).
"""

from __future__ import annotations

import ctypes
import textwrap
import uuid
from pathlib import Path

import numpy as np
import pytest

from hostile.attacks import require_sandbox
from labctl.errors import CallError
from labctl.isolation import limits
from labctl.isolation.sandbox import CleanRoom
from labctl.verify.stubs import init_clean_room

LEVELS = ["sandbox", "process"]
_LIBC = """
import os
import numpy.ctypeslib as _c
_ct = _c.ctypes
_libc = _ct.CDLL(None, use_errno=True)
def _refused(what):
    return OSError(_ct.get_errno(), what + " refused")
"""
# IPC_CREAT | 0666; the key is chosen by the test, so it can remove what got through.
MSG_PLANT = """
class _Message(_ct.Structure):
    _fields_ = [("mtype", _ct.c_long), ("mtext", _ct.c_char * 64)]
_queue = _libc.msgget({KEY}, 0o1666)
if _queue == -1:
    raise _refused("msgget")
_m = _Message(1, b"{SECRET}")
if _libc.msgsnd(_queue, _ct.byref(_m), 64, 0o4000) != 0:
    raise _refused("msgsnd")
raise RuntimeError("PWNED: a message left in a System V queue")
"""
MSG_READ = """
class _Message(_ct.Structure):
    _fields_ = [("mtype", _ct.c_long), ("mtext", _ct.c_char * 64)]
_queue = _libc.msgget({KEY}, 0)
if _queue == -1:
    raise _refused("msgget")
_m = _Message()
_n = _libc.msgrcv(_queue, _ct.byref(_m), 64, 0, 0o4000)
raise RuntimeError("PWNED: the queue carried " + _m.mtext.decode(errors="replace"))
"""
SEMAPHORE = """
_set = _libc.semget({KEY}, 1, 0o1666)
if _set == -1:
    raise _refused("semget")
raise RuntimeError("PWNED: a System V semaphore set, which outlives the worker")
"""
MQUEUE = """
_q = _libc.syscall({MQ_OPEN}, b"labctl-{SECRET}", 0o100 | 0o2, 0o666, None)
if _q == -1:
    raise _refused("mq_open")
raise RuntimeError("PWNED: a POSIX message queue, which outlives the worker")
"""
FAMILY = """
import socket
try:
    _s = socket.socket({FAMILY}, {TYPE})
except OSError as _e:
    raise OSError(_e.errno, "socket({NAME}) refused") from None
raise RuntimeError("PWNED: a {NAME} socket")
"""
FAMILIES = {
    # name: (family, type)
    "AF_INET": (2, 1),
    "AF_INET6": (10, 1),
    "AF_NETLINK": (16, 3),  # SOCK_RAW: the kernel's route table
    "AF_PACKET": (17, 3),
    "AF_VSOCK": (40, 1),  # the hypervisor
}
HOARD_MIB = 256
BUFFERS = f"""
import socket
_held, _kept, _why = 0, [], []
try:
    while _held < {HOARD_MIB} << 20:
        _a, _b = socket.socketpair()
        _kept += [_a, _b]
        try:
            _a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        except OSError as _e:
            if not _why:
                _why.append(f"SO_SNDBUF refused ({{_e.errno}})")
        _a.setblocking(False)
        try:
            while _held < {HOARD_MIB} << 20:
                _held += _a.send(b"x" * (1 << 16))
        except BlockingIOError:
            pass
except OSError as _e:
    _why.append(f"descriptors ran out at {{len(_kept)}} ({{_e.errno}})")
if _held >= {HOARD_MIB} << 20:
    raise RuntimeError(f"PWNED: {{_held >> 20}} MiB held in socket buffers")
raise OSError(1, "; ".join(_why) + f"; {{_held >> 20}} MiB held")
"""


def _number(name: str) -> str:
    from labctl.isolation import seccomp

    column = {"x86_64": 0, "aarch64": 1}.get(seccomp.machine() or "")
    if column is None:
        pytest.skip("no seccomp table for this architecture: the layer is reported missing")
    return str(seccomp.DENIED[name][column])


def attack_room(parent: Path, code: str, **values: str) -> Path:
    """A clean room (the stubs) whose `softmax` runs `code`; its name is a fresh token."""
    dest = parent / f"reach{uuid.uuid4().hex[:12]}"
    init_clean_room(dest)
    body = textwrap.dedent(_LIBC) + textwrap.dedent(code)
    for key, value in values.items():
        body = body.replace("{" + key + "}", value)
    function = "def softmax(x, axis=-1):\n" + textwrap.indent(body, "    ")
    with (dest / "__init__.py").open("a", encoding="utf-8") as handle:
        handle.write("\n\n" + function + "\n")
    return dest


def attack(path: Path, level: str, memory_mb: int = 4096) -> str:
    """Call the room's softmax at `level`: the message it raised with."""
    if level == "sandbox":
        require_sandbox()
    room = CleanRoom(path, timeout_s=30, memory_mb=memory_mb, isolation=level)
    with room, pytest.raises(CallError) as raised:
        room.call("softmax", np.zeros(3))
    return str(raised.value)


def _remove_queue(key: int) -> None:
    """Remove a queue an attack left on this machine (labctl's own process, not the worker)."""
    libc = ctypes.CDLL(None, use_errno=True)
    queue = libc.msgget(key, 0)
    if queue != -1:
        libc.msgctl(queue, 0, None)  # IPC_RMID


@pytest.mark.parametrize("level", LEVELS)
def test_a_system_v_message_queue_carries_nothing_to_the_next_learner(tmp_path, level):
    key, secret = 0x4C000000 | uuid.uuid4().int & 0xFFFFFF, uuid.uuid4().hex
    try:
        planted = attack(attack_room(tmp_path, MSG_PLANT, KEY=str(key), SECRET=secret), level)
        read = attack(attack_room(tmp_path, MSG_READ, KEY=str(key)), level)
    finally:
        _remove_queue(key)
    assert "PWNED" not in planted and "[Errno 1] msgget refused" in planted, planted
    assert secret not in read and "[Errno 1] msgget refused" in read, read


@pytest.mark.parametrize("level", LEVELS)
def test_a_system_v_semaphore_set_is_refused(tmp_path, level):
    key = 0x4C000000 | uuid.uuid4().int & 0xFFFFFF
    shown = attack(attack_room(tmp_path, SEMAPHORE, KEY=str(key)), level)
    libc = ctypes.CDLL(None, use_errno=True)
    left = libc.semget(key, 0, 0)
    if left != -1:
        libc.semctl(left, 0, 0)  # IPC_RMID
    assert "PWNED" not in shown and "[Errno 1] semget refused" in shown, shown


@pytest.mark.parametrize("level", LEVELS)
def test_a_posix_message_queue_is_refused(tmp_path, level):
    name = uuid.uuid4().hex[:12]
    code = MQUEUE.replace("{MQ_OPEN}", _number("mq_open"))
    shown = attack(attack_room(tmp_path, code, SECRET=name), level)
    Path(f"/dev/mqueue/labctl-{name}").unlink(missing_ok=True)
    assert "PWNED" not in shown and "[Errno 1] mq_open refused" in shown, shown


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_a_socket_of_a_family_other_than_af_unix_is_refused(tmp_path, name, level):
    family, kind = FAMILIES[name]
    code = FAMILY.replace("{FAMILY}", str(family)).replace("{TYPE}", str(kind))
    shown = attack(attack_room(tmp_path, code, NAME=name), level)
    assert "PWNED" not in shown and f"[Errno 1] socket({name}) refused" in shown, shown


@pytest.mark.parametrize("level", LEVELS)
def test_socket_buffers_and_descriptors_stay_within_their_bounds(tmp_path, level):
    shown = attack(attack_room(tmp_path, BUFFERS), level, memory_mb=256)
    assert "PWNED" not in shown, shown
    assert "SO_SNDBUF refused (1)" in shown, shown
    ran_out = int(shown.split("descriptors ran out at ")[1].split(" ")[0])
    held = int(shown.split("; ")[-1].split(" MiB held")[0])
    assert ran_out < limits.DESCRIPTOR_LIMIT, shown
    # Each socket at the system's default buffer (212,992 bytes here): about 128 MiB at most.
    assert held < 64, shown
