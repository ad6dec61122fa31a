"""labctl.sandbox (a clean room in a worker process), labctl.guard and labctl.wire."""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from labctl import clean_room as installed_clean_room
from labctl.errors import CallError, CleanRoomError, ImportPolicyError, UsageError
from labctl.isolation import guard, sandbox, wire
from labctl.isolation.sandbox import CallResult, CleanRoom

REPO = Path(__file__).resolve().parents[1]
# A hang must be stopped near timeout_s=1; 5 s leaves room for a slow machine to
# kill the worker, without letting a timeout that does not work pass.
HANG_TIMEOUT_S = 1
HANG_DEADLINE_S = 5.0


def write_room(parent: Path, source: str, name: str = "room", **files: str) -> Path:
    root = parent / name
    root.mkdir(parents=True, exist_ok=True)
    (root / "__init__.py").write_text(textwrap.dedent(source).lstrip("\n"), encoding="utf-8")
    for file, text in files.items():
        (root / f"{file}.py").write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return root


def line_of(root: Path, needle: str, file: str = "__init__.py") -> int:
    lines = (root / file).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if needle in line)


ECHO = """
import os
import time

import numpy as np

def softmax(x, axis=-1):
    return x

def causal_mask(t_q, t_k=None):
    return t_q + 1

def rms_norm(x, weight, eps=1e-6):
    x *= 2
    return x

def transformer_block(x, params, n_heads, n_kv_heads=None, eps=1e-6, rope_theta=None, window=None):
    params["wq"][0, 0] += 1.0
    return x

def layer_norm(x, weight, bias, eps=1e-5):
    raise ValueError("weight: the learner's own message")

def relu_ffn(x, w1, b1, w2, b2):
    while True:
        pass

def swiglu_ffn(x, w_gate, w_up, w_down):
    time.sleep(60)

def split_heads(x, n_heads):
    os._exit(3)

def merge_heads(x):
    return object()

def repeat_kv(x, n_rep):
    return (i for i in range(n_rep))

def rope(x, positions, theta=10000.0):
    return np.array([1, "a"], dtype=object)

class _Odd(dict):
    def items(self):
        raise KeyError("the room's own items()")

def sinusoidal_positions(seq_len, d_model):
    return _Odd(a=1)
"""


@pytest.fixture(scope="module")
def echo_room(tmp_path_factory):
    root = write_room(tmp_path_factory.mktemp("echo"), ECHO)
    with CleanRoom(root, timeout_s=HANG_TIMEOUT_S) as room:
        yield room


# --------------------------------------------------------------------------
# calls
# --------------------------------------------------------------------------

ROUND_TRIP_VALUES = {
    "float64": np.arange(12, dtype=np.float64).reshape(3, 4) / 7,
    "float32": np.linspace(-1, 1, 10, dtype=np.float32).reshape(2, 5),
    "int64": np.arange(-3, 3, dtype=np.int64),
    "int32": np.arange(6, dtype=np.int32).reshape(1, 2, 3),
    "bool": np.array([[True, False], [False, True]]),
    "complex": np.array([1 + 2j, -3j]),
    "0-d": np.array(2.5),
    "empty": np.zeros((0, 3)),
    "transposed": np.arange(6.0).reshape(2, 3).T,
    "nan-inf": np.array([np.nan, np.inf, -np.inf, 0.0]),
}


@pytest.mark.parametrize("key", list(ROUND_TRIP_VALUES))
def test_arrays_round_trip_with_their_dtype(echo_room, key):
    value = ROUND_TRIP_VALUES[key]
    back = echo_room.softmax(value)
    assert isinstance(back, np.ndarray)
    assert back.dtype == value.dtype and back.shape == value.shape
    np.testing.assert_array_equal(back, value)


def test_plain_values_round_trip(echo_room):
    value = {
        "tuple": (1, 2.5, None, True, "s"),
        "list": [np.float32(1.5), np.int64(7)],
        "nested": {"a": [np.ones((2, 2), dtype=np.float32)]},
    }
    back = echo_room.softmax(value)
    assert back["tuple"] == (1, 2.5, None, True, "s")
    assert back["list"][0] == np.float32(1.5) and back["list"][0].dtype == np.float32
    assert back["list"][1].dtype == np.int64
    assert back["nested"]["a"][0].dtype == np.float32
    assert echo_room.causal_mask(3) == 4
    assert echo_room.causal_mask(t_q=5) == 6


def test_invoke_reports_time_and_no_mutation(echo_room):
    x = np.ones(4)
    result = echo_room.invoke("softmax", x)
    assert isinstance(result, CallResult)
    assert result.elapsed_s >= 0.0 and result.mutated == []
    np.testing.assert_array_equal(result.value, x)


def test_calls_from_several_threads_take_turns(echo_room):
    """verify measures two labs at once on one room: each thread's calls get their own
    answers (without the room's lock, two requests interleave on the pipe and a reply
    answers the other thread's request)."""
    from concurrent.futures import ThreadPoolExecutor

    def calls(k: int) -> bool:
        x = np.full((64, 64), float(k))
        return all(np.array_equal(echo_room.call("softmax", x + i), x + i) for i in range(40))

    with ThreadPoolExecutor(max_workers=4) as pool:
        assert all(pool.map(calls, range(4)))


def test_the_project_clean_room_runs_in_the_sandbox():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 5)).astype(np.float32)
    q = rng.standard_normal((1, 4, 3, 2))
    k = rng.standard_normal((1, 2, 3, 2))
    with CleanRoom(REPO / "clean_room") as room:
        assert room.violations == []
        out = room.softmax(x)
        assert out.dtype == np.float32
        np.testing.assert_array_equal(out, installed_clean_room.softmax(x))
        got = room.scaled_dot_product_attention(q, k, k, room.causal_mask(3))
        assert isinstance(got, tuple) and len(got) == 2
        expected = installed_clean_room.scaled_dot_product_attention(
            q, k, k, installed_clean_room.causal_mask(3)
        )
        for a, b in zip(got, expected, strict=True):
            np.testing.assert_array_equal(a, b)
        assert set(room.signatures) >= {"softmax", "decoder_forward"}


ENVIRON = """
import os

import numpy as np

def softmax(x, axis=-1):
    return np.frombuffer("\\n".join(sorted(os.environ)).encode(), dtype=np.uint8).copy()
"""


@pytest.mark.parametrize("isolation", ["sandbox", "process"])
def test_a_worker_picks_numpys_kernels_as_labctl_does_and_sees_nothing_else(
    tmp_path, monkeypatch, isolation
):
    """OPENBLAS_CORETYPE and numpy's CPU features reach the worker from labctl's environment
    (without them a matmul there differs in its last bit from labctl's on an AVX-512 machine
    whose labctl runs with OPENBLAS_CORETYPE=Haswell); nothing else of it does."""
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")
    monkeypatch.setenv("NPY_DISABLE_CPU_FEATURES", "")
    monkeypatch.setenv("LABCTL_GRADER_SECRET", "not for learners")
    with CleanRoom(write_room(tmp_path, ENVIRON), isolation=isolation) as room:
        seen = bytes(room.softmax(np.zeros(1))).decode().split("\n")
    assert "OPENBLAS_CORETYPE" in seen and "NPY_DISABLE_CPU_FEATURES" in seen
    assert "LABCTL_GRADER_SECRET" not in seen
    assert set(seen) <= {*sandbox.worker_env(), "PWD", "OLDPWD"}, seen


COLLECTOR = """
import gc

import numpy as np

# As the room loads: is the collector on, and how often has it run in this process so far?
AT_LOAD = [gc.isenabled(), sum(s["collections"] for s in gc.get_stats())]

def softmax(x, axis=-1):
    return np.array(AT_LOAD + [gc.isenabled()])
"""


@pytest.mark.parametrize("isolation", ["sandbox", "process"])
def test_the_worker_starts_without_collecting_and_runs_the_room_with_the_collector_on(
    tmp_path, isolation
):
    """What the worker's start makes (~36,000 objects of Python, numpy and its own) lives as
    long as the worker: collecting among them (~50 times) cost ~7 ms of every start, so none
    runs until they are loaded and frozen. The room's code, from its import on, runs with
    the collector on."""
    with CleanRoom(write_room(tmp_path, COLLECTOR), isolation=isolation) as room:
        on_at_load, collections, on_at_call = room.softmax(np.zeros(1)).tolist()
    assert on_at_load and on_at_call
    assert collections < 20, collections  # those since the start: ~56 before, 6 now


def test_attribute_access_is_limited_to_contract_names(echo_room):
    with pytest.raises(AttributeError):
        echo_room.not_a_contract_function  # noqa: B018
    with pytest.raises(AttributeError):
        echo_room._private  # noqa: B018


# --------------------------------------------------------------------------
# failures become CallError
# --------------------------------------------------------------------------


@pytest.mark.parametrize("function", ["relu_ffn", "swiglu_ffn"])  # busy loop, blocking sleep
def test_a_hang_is_stopped_within_the_timeout(echo_room, function):
    start = time.monotonic()
    with pytest.raises(CallError) as caught:
        echo_room.call(function, *[np.ones(2)] * (5 if function == "relu_ffn" else 4))
    elapsed = time.monotonic() - start
    assert caught.value.kind == "timeout"
    assert caught.value.function == function
    assert function in str(caught.value)
    assert elapsed < HANG_DEADLINE_S
    # The worker was stopped; the next call starts a fresh one.
    assert echo_room.causal_mask(1) == 2


def test_an_exception_names_type_message_and_line(echo_room):
    with pytest.raises(CallError) as caught:
        echo_room.layer_norm(np.ones(3), np.ones(3), np.zeros(3))
    error = caught.value
    root = echo_room.path
    assert error.kind == "exception"
    assert error.function == "layer_norm"
    assert error.where == f"room/__init__.py:{line_of(root, 'raise ValueError')}"
    assert "ValueError" in str(error) and "the learner's own message" in str(error)
    assert error.where in str(error)
    assert echo_room.causal_mask(2) == 3  # same worker goes on


def test_an_exception_in_a_helper_module_names_that_file(tmp_path):
    root = write_room(
        tmp_path,
        "from .impl import softmax\n",
        impl="def _inner(x):\n    return x[10]\n\ndef softmax(x, axis=-1):\n    return _inner(x)\n",
    )
    with CleanRoom(root) as room, pytest.raises(CallError) as caught:
        room.softmax(np.ones(3))
    assert caught.value.kind == "exception"
    assert caught.value.where == "room/impl.py:2"
    assert "IndexError" in str(caught.value)


UNREADABLE_EXCEPTIONS = """
class _Unsayable(ValueError):
    def __str__(self):
        raise RuntimeError("the room's own __str__")


class _Nameless(type):
    @property
    def __name__(cls):
        raise RuntimeError("the room's own __name__")


class _Hidden(ValueError, metaclass=_Nameless):
    pass


def softmax(x, axis=-1):
    raise _Unsayable("never read")


def rms_norm(x, weight, eps=1e-6):
    raise _Hidden("its text")


def causal_mask(t_q, t_k=None):
    return t_q + 1
"""


def test_an_exception_whose_text_or_name_raises_is_still_the_room_s_exception(tmp_path):
    """An exception whose __str__ raised, or whose class's __name__ did, crashed the worker as
    it described it: "the clean-room process exited", labctl's own stack shown as the room's
    output. The room raised; that is what it is told, with its line, and the room goes on."""
    root = write_room(tmp_path, UNREADABLE_EXCEPTIONS)
    with CleanRoom(root) as room:
        with pytest.raises(CallError) as said:
            room.softmax(np.ones(3))
        assert said.value.kind == "exception"
        assert "_Unsayable: (its text could not be read: str() raised RuntimeError)" in str(
            said.value
        )
        assert said.value.where == f"room/__init__.py:{line_of(root, 'never read')}"
        with pytest.raises(CallError) as named:
            room.rms_norm(np.ones(3), np.ones(3))
        assert named.value.kind == "exception" and "_Hidden: its text" in str(named.value)
        assert room.causal_mask(2) == 3  # the same worker goes on
    (root / "__init__.py").write_text(UNREADABLE_EXCEPTIONS + "\nraise _Unsayable()\n")
    with pytest.raises(CleanRoomError, match=r"failed at room/__init__\.py:\d+: _Unsayable: \(its"):
        CleanRoom(root)


def test_os_exit_is_a_crash_and_the_next_call_works(echo_room):
    with pytest.raises(CallError) as caught:
        echo_room.split_heads(np.ones((1, 2, 4)), 2)
    assert caught.value.kind == "crash"
    assert caught.value.function == "split_heads"
    assert "exited with code 3" in str(caught.value)
    assert echo_room.causal_mask(7) == 8


def test_in_place_edit_is_reported_with_the_argument_name(echo_room):
    x = np.ones((2, 3))
    result = echo_room.invoke("rms_norm", x, np.ones(3))
    assert result.mutated == ["x"]
    np.testing.assert_array_equal(x, np.ones((2, 3)))  # the caller's copy is untouched
    np.testing.assert_array_equal(result.value, 2 * np.ones((2, 3)))
    assert echo_room.invoke("rms_norm", x=x, weight=np.ones(3)).mutated == ["x"]


def test_without_echo_the_arguments_stay_behind_and_the_value_still_comes(echo_room):
    """Labs never read `mutated`: their calls do not carry the arguments back."""
    x = np.ones((2, 3))
    result = echo_room.invoke("rms_norm", x, np.ones(3), echo_args=False)
    assert result.mutated == []
    np.testing.assert_array_equal(result.value, 2 * np.ones((2, 3)))
    np.testing.assert_array_equal(echo_room.rms_norm(x, np.ones(3)), 2 * np.ones((2, 3)))


def test_a_call_made_for_its_memory_leaves_the_value_behind(echo_room):
    x = np.ones((64, 64))
    result = echo_room.invoke("softmax", x, measure_memory=True, want_value=False)
    assert result.value is None
    assert result.peak_bytes is not None and result.peak_bytes >= 0


SCRATCH = """
import numpy as np


def softmax(x, axis=-1):
    block = np.ones(int(x[0]))  # x[0] float64s, every page written
    return float(block[-1])
"""


def test_a_measured_call_counts_the_pages_an_earlier_call_freed(tmp_path):
    """The worker's heap keeps what calls free for the next (its GLIBC_TUNABLES); a measured
    call must still show every page it touches, so the heap's free pages go back first.
    Tolerance: 90% of the block (the heap's own bookkeeping may sit on its first pages)."""
    size = 24 << 20  # under the 32 MiB from which the heap maps arrays afresh
    with CleanRoom(write_room(tmp_path, SCRATCH)) as room:
        room.invoke("softmax", np.array([size / 8]), want_value=False)
        measured = room.invoke("softmax", np.array([size / 8]), measure_memory=True)
    assert measured.value == 1.0
    assert measured.peak_bytes >= 0.9 * size


def test_in_place_edit_inside_params_is_named(echo_room):
    params = {"wq": np.zeros((2, 2)), "wk": np.zeros((2, 2))}
    result = echo_room.invoke("transformer_block", np.ones((1, 1, 2)), params, 1)
    assert result.mutated == ["params['wq']"]


@pytest.mark.parametrize(
    ("function", "args", "type_name"),
    [
        ("merge_heads", (np.ones((1, 1, 1, 1)),), "object"),
        ("repeat_kv", (np.ones((1, 1, 1, 1)), 2), "generator"),
        ("rope", (np.ones((2, 2)), np.arange(2)), "ndarray of dtype object"),
    ],
)
def test_an_unusable_return_arrives_as_unsupported(echo_room, function, args, type_name):
    value = echo_room.call(function, *args)
    assert value == wire.Unsupported(type_name)


def test_a_return_whose_own_code_raises_as_it_is_sent_is_the_room_s_error(echo_room):
    """A dict whose items() raised as the worker encoded it crashed the worker, and labctl
    showed its own traceback as what the room printed."""
    with pytest.raises(CallError) as caught:
        echo_room.call("sinusoidal_positions", 4, 8)
    assert caught.value.kind == "unsupported-return"
    assert "cannot send the result: KeyError" in str(caught.value)
    assert echo_room.call("softmax", np.ones(2)).tolist() == [1.0, 1.0]  # the room lives on


# --------------------------------------------------------------------------
# loading
# --------------------------------------------------------------------------


ODD_SIGNATURES = """
class _Softmax:
    @property
    def __signature__(self):
        raise RuntimeError("the room's own __signature__")

    def __call__(self, x, axis=-1):
        return x

softmax = _Softmax()

def __getattr__(name):
    if name == "rms_norm":
        raise KeyError(name)
    raise AttributeError(name)
"""


def test_a_signature_the_room_s_code_cannot_give_is_unreadable_not_a_crash(tmp_path):
    """A __signature__ that raised, or a module __getattr__ raising past AttributeError,
    crashed the worker as it loaded: "does not load", labctl's own traceback cut short."""
    with CleanRoom(write_room(tmp_path, ODD_SIGNATURES)) as room:
        assert room.signatures["softmax"] == {"present": True, "callable": True, "params": None}
        assert room.signatures["rms_norm"] == {"present": False}


def test_missing_directory_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError):
        CleanRoom(tmp_path / "nowhere")


def test_load_errors_name_file_and_line(tmp_path):
    root = write_room(tmp_path, "X = 1\nraise KeyError('at import')\n")
    with pytest.raises(CleanRoomError, match=r"room/__init__\.py:2.*KeyError") as caught:
        CleanRoom(root)
    assert not isinstance(caught.value, ImportPolicyError)
    (root / "__init__.py").write_text("def f(:\n")
    with pytest.raises(CleanRoomError, match=r"room/__init__\.py:1"):
        CleanRoom(root)


def test_a_deferred_load_reports_its_error_when_it_is_awaited(tmp_path):
    root = write_room(tmp_path, "raise KeyError('at import')\n")
    room = CleanRoom(root, defer_load=True)  # the worker starts; nothing is read yet
    try:
        with pytest.raises(CleanRoomError, match=r"room/__init__\.py:1.*KeyError"):
            room.wait_loaded()
    finally:
        room.dispose()


def test_a_deferred_room_loads_before_its_first_call(tmp_path):
    root = write_room(tmp_path, "def causal_mask(t_q, t_k=None):\n    return t_q + 1\n")
    with CleanRoom(root, defer_load=True) as room:
        assert room.signatures == {}  # not loaded yet
        assert room.causal_mask(3) == 4
        assert room.signatures["causal_mask"]["present"] is True


def test_a_room_named_clean_room_imports_its_own_package(tmp_path):
    root = write_room(
        tmp_path,
        """
        from clean_room.helpers import X

        def softmax(x, axis=-1):
            return X

        def causal_mask(t_q, t_k=None):
            import clean_room.helpers
            return clean_room.helpers.X

        def padding_mask(lengths, t):
            import clean_room
            return clean_room.__file__
        """,
        name="clean_room",
        helpers="X = 'mine, not the project clean_room'\n",
    )
    with CleanRoom(root) as room:
        assert room.softmax(None) == "mine, not the project clean_room"
        assert room.causal_mask(1) == "mine, not the project clean_room"
        # Inside the sandbox the room is mounted elsewhere; the file is the room's own.
        shown = room.padding_mask(None, 1)
        assert shown.endswith("/clean_room/__init__.py")
        assert "labctl" not in Path(shown).parent.parent.name
        assert room.violations == []


# --------------------------------------------------------------------------
# the import guard
# --------------------------------------------------------------------------

FORBIDDEN = {
    "import torch": ("import torch", "imports torch"),
    "import_module": (
        "import sys\n{pad}sys.modules['importlib'].import_module('tor' + 'ch')",
        "imports torch",
    ),
    "import importlib": (
        "import importlib\n{pad}importlib.import_module('sci' + 'py')",
        "imports scipy",
    ),
    "__import__": ("__import__('torch')", "imports torch"),
    "labctl.reference": ("import labctl.reference", "imports labctl.reference"),
    "sklearn": ("import sklearn", "imports sklearn"),
    "from torch": ("from torch import nn", "imports torch"),
}


def _wrapped(statement: str, pad: str) -> str:
    body = statement.format(pad=pad + "    ")
    return f"{pad}try:\n{pad}    {body}\n{pad}except ImportError:\n{pad}    pass\n"


def _violation_line(root: Path, what: str) -> int:
    """The line the guard must name: the refused statement in the room's source."""
    needle = {
        "imports torch": ("torch", "tor' + 'ch"),
        "imports scipy": ("sci' + 'py",),
        "imports labctl.reference": ("labctl.reference",),
        "imports sklearn": ("sklearn",),
    }[what]
    lines = (root / "__init__.py").read_text().splitlines()
    return next(
        i for i, line in enumerate(lines, 1) if any(n in line for n in needle) and "try" not in line
    )


@pytest.mark.parametrize("wrapped", [True, False], ids=["in-try-except", "bare"])
@pytest.mark.parametrize("spelling", list(FORBIDDEN))
def test_guard_refuses_at_import_time(tmp_path, spelling, wrapped):
    statement, what = FORBIDDEN[spelling]
    source = _wrapped(statement, "") if wrapped else statement.format(pad="") + "\n"
    root = write_room(tmp_path, source + "\ndef softmax(x, axis=-1):\n    return x\n")
    with pytest.raises(ImportPolicyError) as caught:
        CleanRoom(root)
    assert f"room/__init__.py:{_violation_line(root, what)}: {what}" in str(caught.value)


@pytest.mark.parametrize("spelling", list(FORBIDDEN))
def test_guard_records_a_swallowed_refusal_at_call_time(tmp_path, spelling):
    statement, what = FORBIDDEN[spelling]
    source = "def softmax(x, axis=-1):\n" + _wrapped(statement, "    ") + "    return x\n"
    root = write_room(tmp_path, source)
    with CleanRoom(root) as room:
        assert room.violations == []
        np.testing.assert_array_equal(room.softmax(np.ones(2)), np.ones(2))
        assert f"room/__init__.py:{_violation_line(root, what)}: {what}" in room.violations


def test_guard_refusal_at_call_time_is_an_exception_when_not_swallowed(tmp_path):
    root = write_room(tmp_path, "def softmax(x, axis=-1):\n    import torch\n    return x\n")
    with CleanRoom(root) as room:
        with pytest.raises(CallError) as caught:
            room.softmax(np.ones(2))
        assert caught.value.kind == "exception"
        assert caught.value.where == "room/__init__.py:2"
        assert room.violations == ["room/__init__.py:2: imports torch"]


def test_a_process_start_is_the_sandbox_s_business_not_the_import_policy_s(tmp_path):
    root = write_room(
        tmp_path,
        "import os, subprocess\n\ndef softmax(x, axis=-1):\n    return os.system.__name__\n",
    )
    assert guard.scan(root) == []
    with CleanRoom(root) as room:
        # The guard leaves os.system as it is; tests/hostile shows the sandbox stopping a shell.
        assert room.softmax(1) == "system"
        assert room.violations == []


def test_guard_allows_stdlib_numpy_and_own_package(tmp_path):
    root = write_room(
        tmp_path,
        """
        import math, json, itertools, collections.abc
        import numpy as np
        from numpy.linalg import norm
        from . import helpers
        import room.helpers

        def softmax(x, axis=-1):
            import functools
            return float(norm(np.asarray(x))) + helpers.ONE + room.helpers.ONE
        """,
        helpers="ONE = 1\n",
    )
    assert guard.scan(root) == []
    with CleanRoom(root) as room:
        assert room.softmax(np.array([3.0, 4.0])) == 7.0
        assert room.violations == []


SCAN_SOURCE = """
import numpy as np
import os
import torch
from torch import nn
import importlib
importlib.import_module("tor" + "ch")
__import__("torch")
import labctl.reference
import subprocess
os.system("ls")
exec("x = 1")
try:
    import torch.nn.functional as F
except ImportError:
    pass
from . import helpers
importlib.import_module("scipy.linalg")
__import__("sklearn", fromlist=["svm"])
importlib.import_module(".helpers", "room")
"""


def test_scan_reports_each_breach_with_file_and_line(tmp_path):
    root = write_room(tmp_path, "from .bad import *\n", bad=SCAN_SOURCE, helpers="X = 1\n")
    found = {(v.where, v.what) for v in guard.scan(root)}
    # The standard library (importlib, subprocess, os.system, exec) is no breach, nor a name
    # computed at run time (the runtime guard sees that one).
    assert found == {
        ("room/bad.py:3", "imports torch"),
        ("room/bad.py:4", "imports from torch"),
        ("room/bad.py:7", "imports torch"),
        ("room/bad.py:8", "imports labctl.reference"),
        ("room/bad.py:13", "imports torch.nn.functional"),
        ("room/bad.py:17", "imports scipy.linalg"),
        ("room/bad.py:18", "imports sklearn"),
    }
    assert all(str(v) == f"{v.where}: {v.what}" for v in guard.scan(root))


def test_scan_names_a_syntax_error(tmp_path):
    root = write_room(tmp_path, "X = 1\n\ndef f(:\n")
    assert [(v.where, v.what.split(":")[0]) for v in guard.scan(root)] == [
        ("room/__init__.py:3", "syntax error")
    ]


def test_scan_of_the_project_clean_room_is_clean():
    assert guard.scan(REPO / "clean_room") == []


# --------------------------------------------------------------------------
# labctl.wire
# --------------------------------------------------------------------------


def test_wire_round_trip():
    message = {
        "arrays": [v for v in ROUND_TRIP_VALUES.values()],
        "tuple": (1, -2.5, None, False, "text"),
        "scalar": np.float32(0.25),
        "nested": {"deeper": {"x": np.eye(2, dtype=np.int16)}},
    }
    back = wire.decode(wire.encode(message))
    assert set(back) == set(message)
    for a, b in zip(back["arrays"], message["arrays"], strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
        assert a.flags.writeable  # a fresh array, not a view of the frame
    assert back["tuple"] == message["tuple"] and isinstance(back["tuple"], tuple)
    assert back["scalar"] == np.float32(0.25) and back["scalar"].dtype == np.float32
    assert back["nested"]["deeper"]["x"].dtype == np.int16


def test_wire_frames_over_a_pipe():
    read_fd, write_fd = os.pipe()
    try:
        wire.write_frame(write_fd, {"x": np.arange(5.0)})
        wire.write_frame(write_fd, [1, 2])
        first = wire.read_frame(read_fd)
        np.testing.assert_array_equal(first["x"], np.arange(5.0))
        assert wire.read_frame(read_fd) == [1, 2]
    finally:
        os.close(read_fd)
        os.close(write_fd)


@pytest.mark.parametrize(
    ("value", "type_name"),
    [
        (np.array([1, "a"], dtype=object), "ndarray of dtype object"),
        (np.array(["a", "b"]), "ndarray of dtype <U1"),
        (object(), "object"),
        ({1: "int keys"}, "dict"),
        ({1, 2}, "set"),
    ],
)
def test_wire_refuses_what_it_does_not_carry(value, type_name):
    assert wire.decode(wire.encode(value)) == wire.Unsupported(type_name)


def _frame(header: dict, blob: bytes = b"") -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack(">I", len(raw)) + raw + blob


def test_wire_refuses_a_forged_object_array():
    payload = _frame({"tree": {"$nd": 0}, "blobs": [{"dtype": "|O", "shape": [1]}]}, b"\0" * 8)
    with pytest.raises(wire.WireError, match="not a plain numeric dtype"):
        wire.decode(payload)


@pytest.mark.parametrize("cut", [1, 3, 10, -1, -8])
def test_wire_truncated_frames_raise(cut):
    payload = wire.encode({"x": np.arange(4.0), "label": "a fairly long label"})
    with pytest.raises(wire.WireError):
        wire.decode(payload[:cut])


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        _frame({"tree": {"$pickle": 0}, "blobs": []}),
        _frame({"tree": {"$nd": 3}, "blobs": []}),
        _frame({"no tree": 1}),
        struct.pack(">I", 5) + b"{not json",
        _frame({"tree": {"$nd": 0}, "blobs": [{"dtype": "<f8", "shape": [-1]}]}),
    ],
    ids=["empty", "unknown-tag", "missing-blob", "no-tree", "bad-json", "negative-shape"],
)
def test_wire_malformed_frames_raise(payload):
    with pytest.raises(wire.WireError):
        wire.decode(payload)


def test_wire_oversized_frame_is_refused_before_reading():
    read_fd, write_fd = os.pipe()
    try:
        os.write(write_fd, struct.pack(">Q", wire.MAX_FRAME_BYTES + 1))
        with pytest.raises(wire.WireError, match="exceeds"):
            wire.read_frame(read_fd)
    finally:
        os.close(read_fd)
        os.close(write_fd)


def test_wire_pipe_closed_mid_frame_is_eof():
    read_fd, write_fd = os.pipe()
    data = wire.encode([1, 2, 3])
    os.write(write_fd, struct.pack(">Q", len(data)) + data[:-2])
    os.close(write_fd)
    try:
        with pytest.raises(EOFError):
            wire.read_frame(read_fd)
    finally:
        os.close(read_fd)


def test_a_worker_whose_reply_is_no_longer_read_ends_quietly(tmp_path):
    """labctl stops reading a call past its time: the worker's reply meets a closed pipe. It
    ends without a stack of labctl's own, which would be shown as the room's output."""
    theirs, ours = socket.socketpair()  # requests go on a socket, as CleanRoom sends them
    to_worker, requests = theirs.detach(), ours.detach()
    replies, from_worker = os.pipe()
    os.close(replies)  # nobody reads the replies any more
    boot = "import sys; from labctl.isolation.worker import main; main(sys.argv[1:])"
    args = [str(to_worker), str(from_worker), "0", "0", str(tmp_path)]
    proc = subprocess.Popen(
        [sys.executable, "-c", boot, *args],
        pass_fds=(to_worker, from_worker),
        stderr=subprocess.PIPE,
    )
    os.close(to_worker)
    os.close(from_worker)
    wire.write_frame(requests, {"op": "load", "path": str(tmp_path), "names": [], "seq": 1})
    os.close(requests)
    _, stderr = proc.communicate(timeout=60)
    assert b"Traceback" not in stderr and b"BrokenPipeError" not in stderr, stderr.decode()
    assert proc.returncode == 0


def test_the_worker_s_staged_modules_are_compiled_for_it_to_read():
    """The worker never writes bytecode (its environment, a read-only bind): without the
    compiled files staged beside them, every start compiles these modules anew."""
    import importlib.util

    from labctl.isolation import bwrap

    staged = bwrap.staged_worker() / "labctl"
    modules = sorted(staged.rglob("*.py"))
    assert len(modules) == len(bwrap.STAGED) + 2  # and the two empty package __init__s
    for module in modules:
        compiled = Path(importlib.util.cache_from_source(str(module), optimization=""))
        assert compiled.is_file(), module
        assert compiled.stat().st_mode & 0o444 == 0o444  # readable by the worker's uid


LEARNER_BASE_EXCEPTIONS = """
class _Traceless(Exception):
    __traceback__ = property(lambda self: 1 / 0)


class _Unlistable(list):
    def __iter__(self):
        raise GeneratorExit


def softmax(x, axis=-1):
    raise _Traceless("msg")


def rms_norm(x, weight, eps=1e-6):
    return _Unlistable([1])


def causal_mask(t_q, t_k=None):
    raise KeyboardInterrupt
"""


def test_what_a_room_raises_beyond_exception_ends_no_worker(tmp_path):
    """An exception whose __traceback__ raised, a value whose iteration raised GeneratorExit
    and a KeyboardInterrupt each ended the worker: labctl's own stack shown as the room's."""
    root = write_room(tmp_path, LEARNER_BASE_EXCEPTIONS)
    with CleanRoom(root) as room:
        with pytest.raises(CallError) as said:
            room.softmax(np.ones(3))
        assert said.value.kind == "exception" and said.value.exc_type == "_Traceless"
        with pytest.raises(CallError) as said:
            room.rms_norm(np.ones(3), np.ones(3))
        assert said.value.kind == "unsupported-return"
        assert "cannot send the result: GeneratorExit" in str(said.value)
        with pytest.raises(CallError) as said:
            room.causal_mask(3)
        assert said.value.exc_type == "KeyboardInterrupt"
        with pytest.raises(CallError) as said:
            room.softmax(np.ones(3))  # the same worker, still answering
        assert said.value.kind == "exception"
        assert "Traceback" not in room.output()[1]
