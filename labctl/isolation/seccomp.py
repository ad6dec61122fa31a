"""The seccomp filter around a worker: a classic-BPF program generated here, no libseccomp.

Standard library only: the worker installs it on itself at the process level
(`install`), and bwrap loads the same bytes (`--seccomp FD`) in the sandbox.
The filter refuses, with EPERM, the system calls a clean room never needs and
an attacker uses to leave or outgrow its box: new namespaces (`unshare`,
`setns`, `clone` with a namespace flag; `clone3` answers ENOSYS so the C
library falls back to `clone`, whose flags the filter can read), mounts, the
kernel keyring (shared by every process of a uid, so it would carry a string
from one learner's sandbox to the next), debugging another process, eBPF,
io_uring, memory that RLIMIT_AS does not count (`memfd_create`,
`memfd_secret`), System V IPC and POSIX message queues (shared memory is memory
the limit misses; a message queue or a semaphore outlives the worker and would
carry a string from one learner to the next where the IPC namespace is shared,
as at the process level), every socket family but `AF_UNIX` (`socket` and
`socketpair` read their first argument: no `AF_INET`, `AF_INET6`, `AF_NETLINK`,
`AF_PACKET`, `AF_VSOCK`, ...; the kernel and the hypervisor answer on some of
them even without a network), growing a socket's buffers past the system's default
(`setsockopt` of `SO_SNDBUF`, `SO_RCVBUF` and their `FORCE` forms: with the
descriptor limit, what sockets hold in the kernel, which RLIMIT_AS does not
count, stays bounded), and `prctl(PR_SET_DUMPABLE)` (which would let the
worker reset the peak memory labctl measures in its /proc). On an architecture
without a table here the layer is reported missing, never guessed.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import platform
import struct

# <linux/audit.h>: AUDIT_ARCH_* as seccomp_data.arch carries them.
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_MACHINES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}
_X32_BIT = 0x40000000

# The refused calls and their numbers (x86_64: asm/unistd_64.h; aarch64: asm-generic/unistd.h).
DENIED = {
    "unshare": (272, 97),
    "setns": (308, 268),
    "mount": (165, 40),
    "umount2": (166, 39),
    "pivot_root": (155, 41),
    "mount_setattr": (442, 442),
    "fsopen": (430, 430),
    "fsconfig": (431, 431),
    "fsmount": (432, 432),
    "fspick": (433, 433),
    "move_mount": (429, 429),
    "open_tree": (428, 428),
    "keyctl": (250, 219),
    "add_key": (248, 217),
    "request_key": (249, 218),
    "ptrace": (101, 117),
    "process_vm_readv": (310, 270),
    "process_vm_writev": (311, 271),
    "process_madvise": (440, 440),
    "pidfd_getfd": (438, 438),
    "bpf": (321, 280),
    "perf_event_open": (298, 241),
    "userfaultfd": (323, 282),
    "io_uring_setup": (425, 425),
    "io_uring_enter": (426, 426),
    "io_uring_register": (427, 427),
    "open_by_handle_at": (304, 265),
    "kexec_load": (246, 104),
    "kexec_file_load": (320, 294),
    "memfd_create": (319, 279),
    "memfd_secret": (447, 447),
    # System V IPC, every call of it (x86_64 and aarch64 have no `ipc` multiplexer).
    "shmget": (29, 194),
    "shmat": (30, 196),
    "shmctl": (31, 195),
    "shmdt": (67, 197),
    "semget": (64, 190),
    "semop": (65, 193),
    "semctl": (66, 191),
    "semtimedop": (220, 192),
    "msgget": (68, 186),
    "msgsnd": (69, 189),
    "msgrcv": (70, 188),
    "msgctl": (71, 187),
    # POSIX message queues: kernel objects that outlive the worker, as System V's do.
    "mq_open": (240, 180),
    "mq_unlink": (241, 181),
    "mq_timedsend": (242, 182),
    "mq_timedreceive": (243, 183),
    "mq_notify": (244, 184),
    "mq_getsetattr": (245, 185),
}
# socket(2) and socketpair(2): allowed for AF_UNIX only (their first argument).
SOCKET_CALLS = {"socket": (41, 198), "socketpair": (53, 199)}
AF_UNIX = 1
# setsockopt(2): SOL_SOCKET's buffer sizes refused (args[1] the level, args[2] the option).
_SETSOCKOPT = (54, 208)
SOL_SOCKET = 1
BUFFER_OPTIONS = {"SO_SNDBUF": 7, "SO_RCVBUF": 8, "SO_SNDBUFFORCE": 32, "SO_RCVBUFFORCE": 33}
_CLONE = (56, 220)
_CLONE3 = (435, 435)
_PERSONALITY = (135, 92)
_PRCTL = (157, 167)
# prctl(PR_SET_DUMPABLE): a worker dropped to uid 65534 is not dumpable, so its /proc files
# are root's and it cannot reset the peak memory labctl reads there; setting it again would.
PR_SET_DUMPABLE = 4
# CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET (CLONE_NEWTIME is 0x80,
# which clone() reads as part of the exit signal, so it cannot be asked for there).
CLONE_NAMESPACES = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000
CLONE_NAMESPACES |= 0x20000000 | 0x40000000
# personality(0xffffffff) only reads the persona; any other value would change it.
_PERSONALITY_QUERY = 0xFFFFFFFF

# <linux/filter.h>, <linux/seccomp.h>
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JSET_K = 0x45
_RET_K = 0x06
RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000
_ARCH_OFFSET = 4
_NR_OFFSET = 0
_ARG0_LOW = 16  # args[0], its low 32 bits (both tables are little-endian)
_ARG1_LOW = 24
_ARG2_LOW = 32


def machine() -> str | None:
    """The seccomp table this machine needs ("x86_64", "aarch64"), or None: no table."""
    return _MACHINES.get(platform.machine().lower())


def _program(arch: str) -> list[tuple[int, int, int, int]]:
    """The filter as (code, jt, jf, k) instructions; jumps are relative, forward only."""
    column = 0 if arch == "x86_64" else 1
    denied = sorted({numbers[column] for numbers in DENIED.values()})
    deny = ("ret", RET_ERRNO | errno.EPERM)
    allow = ("ret", RET_ALLOW)
    # Labels resolved below: ("jeq"/"jset", k, label_true, label_false).
    body: list = [
        ("ld", _ARCH_OFFSET),
        ("jeq", AUDIT_ARCH[arch], None, "deny"),
        ("ld", _NR_OFFSET),
    ]
    if arch == "x86_64":
        body.append(("jset", _X32_BIT, "deny", None))
    body += [("jeq", nr, "deny", None) for nr in denied]
    body += [
        ("jeq", _CLONE[column], "clone", None),
        ("jeq", _CLONE3[column], "enosys", None),
        ("jeq", _PERSONALITY[column], "personality", None),
        ("jeq", _PRCTL[column], "prctl", None),
        *[("jeq", numbers[column], "socket", None) for numbers in SOCKET_CALLS.values()],
        ("jeq", _SETSOCKOPT[column], "setsockopt", None),
        allow,
        "socket",
        ("ld", _ARG0_LOW),
        ("jeq", AF_UNIX, None, "deny"),
        allow,
        "setsockopt",
        ("ld", _ARG1_LOW),
        ("jeq", SOL_SOCKET, None, "allowed"),
        ("ld", _ARG2_LOW),
        *[("jeq", option, "deny", None) for option in BUFFER_OPTIONS.values()],
        "allowed",
        allow,
        "clone",
        ("ld", _ARG0_LOW),
        ("jset", CLONE_NAMESPACES, "deny", None),
        allow,
        "personality",
        ("ld", _ARG0_LOW),
        ("jeq", _PERSONALITY_QUERY, None, "deny"),
        allow,
        "prctl",
        ("ld", _ARG0_LOW),
        ("jeq", PR_SET_DUMPABLE, "deny", None),
        allow,
        "enosys",
        ("ret", RET_ERRNO | errno.ENOSYS),
        "deny",
        deny,
    ]
    labels, position = {}, 0
    for item in body:
        if isinstance(item, str):
            labels[item] = position
        else:
            position += 1
    code, position = [], 0
    for item in body:
        if isinstance(item, str):
            continue
        position += 1
        if item[0] == "ld":
            code.append((_LD_W_ABS, 0, 0, item[1]))
        elif item[0] == "ret":
            code.append((_RET_K, 0, 0, item[1]))
        else:
            op, k, true, false = item
            jt = 0 if true is None else labels[true] - position
            jf = 0 if false is None else labels[false] - position
            if not (0 <= jt < 256 and 0 <= jf < 256):
                raise ValueError("a jump beyond classic BPF's 255 instructions")
            code.append((_JEQ_K if op == "jeq" else _JSET_K, jt, jf, k))
    return code


def program(arch: str | None = None) -> bytes | None:
    """The filter as `struct sock_filter[]` bytes for `arch` (default: this machine's), or
    None where there is no table for it."""
    arch = arch or machine()
    if arch not in AUDIT_ARCH:
        return None
    return b"".join(struct.pack("=HBBI", *insn) for insn in _program(arch))


def program_fd() -> int | None:
    """A pipe's read end holding the filter, for bwrap's `--seccomp FD` (bwrap reads it to
    its end, so every sandbox needs a fresh one); None where there is no filter."""
    code = program()
    if code is None:
        return None
    read, write = os.pipe()
    try:
        os.write(write, code)  # a few hundred bytes: the pipe holds them
    finally:
        os.close(write)
    return read


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2


def install() -> str | None:
    """Load the filter on this process (and what it starts); None when in force, else why not."""
    code = program()
    if code is None:
        return f"no seccomp table for {platform.machine()}"
    buffer = ctypes.create_string_buffer(code, len(code))
    fprog = _SockFprog(len(code) // 8, ctypes.addressof(buffer))
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return f"PR_SET_NO_NEW_PRIVS: {os.strerror(ctypes.get_errno())}"
        if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
            return f"PR_SET_SECCOMP: {os.strerror(ctypes.get_errno())}"
    except (OSError, AttributeError) as exc:
        return f"prctl unavailable: {exc}"
    return None


def status_field(name: str) -> str:
    """A field of /proc/self/status ("Seccomp", "CapEff"), or "" where there is none."""
    with contextlib.suppress(OSError), open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(name + ":"):
                return line.split()[1]
    return ""


def in_force() -> bool:
    """Whether this process runs under a seccomp filter (mode 2: a filter)."""
    return status_field("Seccomp") == "2"
