"""The sandbox's layers: the seccomp program (decisions read by a small BPF interpreter),
the filter in force, each layer measured by the probe, and what doctor, `--isolation`
and the records say when one is missing."""

from __future__ import annotations

import errno
import json
import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hostile.attacks import require_sandbox
from typer.testing import CliRunner

from labctl.cli.main import app
from labctl.errors import UsageError
from labctl.evidence.models import LabctlInfo
from labctl.isolation import bwrap, replies, resolve_isolation, seccomp, wire
from labctl.isolation.levels import missing_layers, require_every_layer

runner = CliRunner()
ALLOW, EPERM, ENOSYS = (
    seccomp.RET_ALLOW,
    seccomp.RET_ERRNO | errno.EPERM,
    seccomp.RET_ERRNO | errno.ENOSYS,
)
NEWUSER, NEWNS, NEWNET = 0x10000000, 0x00020000, 0x40000000
# What glibc's pthread_create and fork pass to clone: no namespace flag among them.
THREAD_FLAGS, FORK_FLAGS = 0x3D0F00, 0x01200011


def run_filter(code: bytes, arch: int, nr: int, arg0: int = 0, *more: int) -> int:
    """What the classic-BPF program answers for one system call (the subset it uses)."""
    args = (arg0, *more, 0, 0, 0, 0, 0)[:6]
    data = struct.pack("<iIQ6Q", nr, arch, 0, *args)
    insns = [struct.unpack("=HBBI", code[i : i + 8]) for i in range(0, len(code), 8)]
    pc, acc = 0, 0
    while True:
        op, jt, jf, k = insns[pc]
        pc += 1
        if op == 0x20:
            (acc,) = struct.unpack_from("<I", data, k)
        elif op == 0x15:
            pc += jt if acc == k else jf
        elif op == 0x45:
            pc += jt if acc & k else jf
        elif op == 0x06:
            return k
        else:
            raise AssertionError(f"instruction {op:#x} not expected")


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_the_filter_refuses_each_listed_call_and_allows_others(arch):
    code = seccomp.program(arch)
    audit = seccomp.AUDIT_ARCH[arch]
    column = 0 if arch == "x86_64" else 1
    for name, numbers in seccomp.DENIED.items():
        assert run_filter(code, audit, numbers[column]) == EPERM, name
    denied = {n[column] for n in seccomp.DENIED.values()}
    for nr in range(0, 460):
        special = (seccomp._CLONE[column], seccomp._CLONE3[column], seccomp._PERSONALITY[column])
        sockets = {n[column] for n in seccomp.SOCKET_CALLS.values()}
        sockets.add(seccomp._SETSOCKOPT[column])
        if nr not in denied and nr not in special and nr not in sockets:
            assert run_filter(code, audit, nr) == ALLOW, nr
    assert run_filter(code, audit, seccomp._CLONE3[column]) == ENOSYS
    clone = seccomp._CLONE[column]
    for flags in (THREAD_FLAGS, FORK_FLAGS, 0x11):
        assert run_filter(code, audit, clone, flags) == ALLOW
    for flags in (NEWUSER, NEWNS, NEWNET, FORK_FLAGS | NEWUSER | NEWNS, 0x02000000, 0x20000000):
        assert run_filter(code, audit, clone, flags) == EPERM, hex(flags)
    personality = seccomp._PERSONALITY[column]
    assert run_filter(code, audit, personality, 0xFFFFFFFF) == ALLOW
    assert run_filter(code, audit, personality, 0x0040000) == EPERM  # ADDR_NO_RANDOMIZE
    prctl = seccomp._PRCTL[column]
    assert run_filter(code, audit, prctl, seccomp.PR_SET_DUMPABLE) == EPERM
    for option in (1, 3, 15, 36):  # PDEATHSIG, GET_DUMPABLE, SET_NAME, SET_CHILD_SUBREAPER
        assert run_filter(code, audit, prctl, option) == ALLOW, option
    # Sockets: AF_UNIX only (AF_INET, AF_INET6, AF_NETLINK, AF_PACKET, AF_VSOCK, AF_ALG refused).
    for numbers in seccomp.SOCKET_CALLS.values():
        assert run_filter(code, audit, numbers[column], 1) == ALLOW
        for family in (2, 10, 16, 17, 40, 38, 0):
            assert run_filter(code, audit, numbers[column], family) == EPERM, family
    # A socket's buffers stay at the system's default; its other options are free.
    setsockopt = seccomp._SETSOCKOPT[column]
    for option in seccomp.BUFFER_OPTIONS.values():
        assert run_filter(code, audit, setsockopt, 3, seccomp.SOL_SOCKET, option) == EPERM
        assert run_filter(code, audit, setsockopt, 3, 6, option) == ALLOW  # IPPROTO_TCP
    for option in (2, 9, 20):  # SO_REUSEADDR, SO_KEEPALIVE, SO_RCVTIMEO
        assert run_filter(code, audit, setsockopt, 3, seccomp.SOL_SOCKET, option) == ALLOW
    # Another architecture's numbers mean other calls: all refused.
    other = seccomp.AUDIT_ARCH["aarch64" if arch == "x86_64" else "x86_64"]
    assert run_filter(code, other, 0) == EPERM
    assert run_filter(code, 0x40000003, 0) == EPERM  # i386 through int 0x80


def test_the_x32_abi_is_refused_on_x86_64():
    code = seccomp.program("x86_64")
    assert run_filter(code, seccomp.AUDIT_ARCH["x86_64"], 0x40000000 | 39) == EPERM  # getpid
    assert run_filter(code, seccomp.AUDIT_ARCH["x86_64"], 39) == ALLOW


def test_an_architecture_without_a_table_has_no_filter(monkeypatch):
    assert seccomp.program("riscv64") is None
    monkeypatch.setattr(seccomp.platform, "machine", lambda: "riscv64")
    assert seccomp.machine() is None and seccomp.program_fd() is None
    assert "riscv64" in seccomp.install()


def test_the_filter_in_force_refuses_and_python_numpy_threads_and_fork_still_work():
    code = textwrap.dedent(
        """
        import ctypes, json, os, subprocess, threading
        from labctl.isolation import seccomp
        assert seccomp.install() is None and seccomp.in_force()
        libc = ctypes.CDLL(None, use_errno=True)
        def errno_of(result):
            return "ok" if result != -1 else ctypes.get_errno()
        import numpy as np
        found = {
            "unshare": errno_of(libc.unshare(0x10000000 | 0x00020000)),
            "memfd": errno_of(libc.syscall(seccomp.DENIED["memfd_create"][0], b"x", 0)),
            "personality": errno_of(libc.personality(0xFFFFFFFF)),
            "dumpable": errno_of(libc.prctl(seccomp.PR_SET_DUMPABLE, 1, 0, 0, 0)),
            "numpy": float(np.linalg.inv(np.eye(64) * 2).sum()),
        }
        done = []
        thread = threading.Thread(target=lambda: done.append(1)); thread.start(); thread.join()
        found["thread"] = done == [1]
        found["subprocess"] = subprocess.run(["true"]).returncode
        print(json.dumps(found))
        """
    )
    if seccomp.machine() != "x86_64":
        pytest.skip("the snippet names x86_64's memfd_create number")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found == {
        "unshare": errno.EPERM,
        "memfd": errno.EPERM,
        "personality": "ok",
        "dumpable": errno.EPERM,
        "numpy": 32.0,
        "thread": True,
        "subprocess": 0,
    }


def test_without_root_bwrap_also_disables_nested_user_namespaces(monkeypatch):
    monkeypatch.setattr(bwrap.os, "geteuid", lambda: 1000)
    assert "--disable-userns" in bwrap._namespaces()
    monkeypatch.setattr(bwrap.os, "geteuid", lambda: 0)
    assert "--disable-userns" not in bwrap._namespaces()  # root keeps no user namespace


def test_the_sandbox_command_loads_the_filter_and_mounts_read_only(tmp_path):
    args = bwrap.command(tmp_path, {}, 9)
    assert args[args.index("--seccomp") + 1] == "9"
    assert "--seccomp" not in bwrap.command(tmp_path, {}, None)
    assert args[args.index("/") - 1 : args.index("/") + 1] == ["--remount-ro", "/"]


@pytest.fixture
def fresh_status():
    bwrap.sandbox_status.cache_clear()
    yield
    bwrap.sandbox_status.cache_clear()


def test_every_layer_is_measured_in_force_here(fresh_status):
    require_sandbox()
    status = bwrap.sandbox_status()
    assert [x.name for x in status.layers] == list(bwrap.LAYERS)
    assert status.missing == [], status.layers
    by_name = {x.name: x for x in status.layers}
    assert "keyctl and memfd_create refused" in str(by_name["seccomp"].reason)
    assert "refused" in str(by_name["user namespaces disabled"].reason)
    assert missing_layers("sandbox") == [] and missing_layers("process") is None


@pytest.fixture
def no_filter(monkeypatch, fresh_status):
    """The old sandbox: bwrap without a seccomp filter."""
    monkeypatch.setattr(seccomp, "program_fd", lambda: None)
    require_sandbox()


def test_a_sandbox_without_the_filter_is_measured_missing_and_refused(no_filter, tmp_path):
    status = bwrap.sandbox_status()
    assert status.works
    assert "seccomp" in status.missing
    seccomp_layer = next(x for x in status.layers if x.name == "seccomp")
    assert str(seccomp_layer.reason) == "no seccomp filter in force inside the sandbox"
    with pytest.raises(UsageError, match=r"lacks a layer here: .*seccomp: no seccomp filter"):
        require_every_layer()
    assert resolve_isolation("auto") == resolve_isolation("sandbox") == "sandbox"


def test_grade_with_isolation_sandbox_refuses_a_missing_layer_before_any_learner(
    no_filter, tmp_path
):
    from labctl.faults import project_clean_room

    learner = tmp_path / "class" / "ada"
    learner.mkdir(parents=True)
    (learner / "clean_room").symlink_to(project_clean_room())
    args = ["grade", "class", str(tmp_path / "class"), "--out", str(tmp_path / "out"), "--json"]
    refused = runner.invoke(app, [*args, "--isolation", "sandbox"])
    assert refused.exit_code == 2, refused.output
    assert "lacks a layer here" in json.loads(refused.stdout)["error"]["message"]
    assert not (tmp_path / "out" / "records").exists()


def test_doctor_lists_each_layer_and_fails_on_a_missing_one(no_filter):
    result = runner.invoke(app, ["doctor", "--json"])
    assert result.exit_code == 1
    document = json.loads(result.stdout)
    assert document["passed"] is False and "seccomp" in document["sandbox"]["missing"]
    assert [x["name"] for x in document["sandbox"]["layers"]] == list(bwrap.LAYERS)
    shown = runner.invoke(app, ["doctor"])
    assert "seccomp filter: FAIL  no seccomp filter in force" in shown.stdout
    assert "namespaces: pass" in shown.stdout


def test_auto_says_the_missing_layer_on_stderr_and_in_the_record(no_filter, tmp_path):
    from labctl.faults import project_clean_room

    args = ["contract", "check", "--path", str(project_clean_room()), "--json"]
    refused = runner.invoke(app, [*args, "--isolation", "sandbox"])
    assert refused.exit_code == 2 and "seccomp" in json.loads(refused.stdout)["error"]["message"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "isolation: sandbox without seccomp" in result.stderr
    info = LabctlInfo(
        version="0",
        contract_id="c",
        contract_sha256="0" * 64,
        tolerances="v2",
        isolation="sandbox",
        isolation_missing=missing_layers("sandbox"),
    )
    assert "seccomp" in info.isolation_missing


def test_the_reply_budget_holds_a_frame_while_its_arrays_live():
    import numpy as np

    budget = replies.ReplyBudget(limit=1000)
    budget.admit(600)
    value = {"a": np.zeros(3), "b": [np.ones(2)]}
    budget.hold(value, 600)
    with pytest.raises(replies.OverBudget, match="while labctl holds 0 MiB"):
        budget.admit(500)
    assert budget.held == 600
    kept = value["a"][1:]  # a view keeps the frame alive
    del value
    assert budget.held == 600
    del kept
    assert budget.held == 0 and budget.peak == 600
    budget.admit(1000)  # exactly the limit fits
    budget.hold({"no": "arrays"}, 1000)
    assert budget.held == 0


def test_a_frame_past_the_budget_is_left_unread_and_an_admitted_one_released_on_error():
    import os

    import numpy as np

    budget = replies.ReplyBudget(limit=4096)
    read, write = os.pipe()
    try:
        wire.write_frame(write, {"x": np.zeros(1024)})  # 8 KiB: within the pipe's buffer
        with pytest.raises(replies.OverBudget):
            replies.read_counted(read, None, budget)
        assert budget.held == 0
        assert len(os.read(read, 1 << 16)) > 0  # the body is still in the pipe, unread
    finally:
        os.close(read)
        os.close(write)
    read, write = os.pipe()
    os.write(write, struct.pack(">Q", 100) + b"short")
    os.close(write)
    with pytest.raises(EOFError):
        replies.read_counted(read, None, budget)
    os.close(read)
    assert budget.held == 0


def test_mountinfo_inside_shows_no_host_directory_the_sandbox_does_not_hold(tmp_path):
    """Mount points are the sandbox's own places; a hiding tmpfs over a host directory the
    sandbox never bound (a venv's site-packages) would show that host path."""
    require_sandbox()
    room = tmp_path / "room"
    room.mkdir(mode=0o755)
    fd = seccomp.program_fd()
    code = "print(open('/proc/self/mountinfo').read())"
    command = [*bwrap.command(room, {}, fd), bwrap.python_binary(), "-I", "-S", "-c", code]
    try:
        done = subprocess.run(command, pass_fds=(fd,), capture_output=True, text=True, timeout=60)
    finally:
        os.close(fd)
    assert done.returncode == 0, done.stderr
    runtime = str(Path(bwrap.python_binary()).parent.parent)
    own = ("/usr", "/bin", "/sbin", "/lib", "/etc/", "/proc", "/dev", "/tmp", "/opt/labctl/")
    points = [line.split()[4] for line in done.stdout.splitlines() if line.strip()]
    assert "/opt/labctl/room/room" in points
    strays = [p for p in points if p != "/" and not p.startswith((*own, runtime))]
    assert strays == []
