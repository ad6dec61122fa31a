"""The diagnosis, rule by rule, on the catalogue's own rooms observed in this process.

tests/test_verify_faults.py proves the whole path (each fault room in its own sandboxed
worker, then verify and diagnosis). Here the fault rooms are labctl's own code (the
project's clean room with one catalogued fault), so they are imported and called in this
process: the same fixtures, checks and comparison, without a worker per room, so each rule
(localising, matching, naming, ordering, caching) is checked exactly and quickly. A
learner's room is never run this way.
"""

from __future__ import annotations

import copy
import importlib.util
import itertools
import shutil
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import misdiagnosed
import numpy as np
import pytest
from checktools import HF_ROPE_WITHOUT_ODD_CHECK, learner_room

from labctl import contract, faults
from labctl.errors import CallError
from labctl.i18n import Msg
from labctl.isolation import calltrace, guard, loader, replies
from labctl.isolation.loader import observe_signatures
from labctl.isolation.sandbox import argument_names
from labctl.verify import blame
from labctl.verify import diagnosis as dg
from labctl.verify import fixtures as fx
from labctl.verify import likeness as lk
from labctl.verify.calls import Call
from labctl.verify.check_base import FAIL, CheckResult
from labctl.verify.checks import evaluate
from labctl.verify.observe import (
    FunctionRun,
    Located,
    Outcome,
    RoomObservation,
    function_at,
    observe,
    run_function,
)

_names = itertools.count()
# The faulty rooms overflow and divide by zero on purpose.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


class InProcessRoom:
    """`CleanRoom.invoke`'s answers for a package imported here: labctl's own rooms only."""

    def __init__(self, package, root: Path):
        self.package = package
        self.root = root
        self.violations: list[str] = []
        self.recorder = calltrace.Recorder()
        calltrace.install(package, contract.function_names(), self.recorder)

    def invoke(self, name: str, *args, trace: bool = False, **kwargs):
        fn = getattr(self.package, name, None)
        if fn is None:
            raise CallError(name, "missing", f"the clean room has no {name}")
        sent = copy.deepcopy((list(args), kwargs))
        if trace:
            self.recorder.start()
        try:
            value = fn(*args, **kwargs)
        except Exception as exc:  # the worker reports every exception the same way
            place = loader.where(self.root, exc.__traceback__)
            error = CallError(name, "exception", str(exc), place, type(exc).__name__)
            error.trace = self.recorder.stop()
            raise error from None
        # Named as the worker's reply names them (`x`, `params['wq']`), not by path.
        names = argument_names().get(name, [])
        changed = [
            replies.argument_name(path, names)
            for path in replies.mutated(*sent, [list(args), kwargs])
        ]
        found = self.recorder.stop()
        return SimpleNamespace(value=value, mutated=changed, elapsed_s=0.0, trace=found)


# A learner's softmax at temperature 1/2: an unknown bug everything built on softmax inherits.
HALF_TEMPERATURE_SOFTMAX = """
def softmax(x, axis=-1):
    x = np.asarray(x)
    e = np.exp(2.0 * (x - np.max(x, axis=axis, keepdims=True)))
    return (e / np.sum(e, axis=axis, keepdims=True)).astype(_float_dtype(x), copy=False)
"""


def observe_here(root: Path, functions: tuple[str, ...] | None = None) -> RoomObservation:
    """What `observe` finds in the room at `root`, its calls made in this process."""
    seen = RoomObservation(root, isolation="process")
    found = [v for v in guard.scan(root) if not v.what.startswith("syntax error")]
    if found:
        seen.status = "refused"
        seen.violations = [Located(v.where, v.what, function_at(root, v.where)) for v in found]
        return seen
    name = f"_diagnosed_room_{next(_names)}"
    spec = importlib.util.spec_from_file_location(
        name, root / "__init__.py", submodule_search_locations=[str(root)]
    )
    package = importlib.util.module_from_spec(spec)
    sys.modules[name] = package
    spec.loader.exec_module(package)
    seen.deviations = contract.check_signatures(
        observe_signatures(package, contract.function_names())
    )
    room = InProcessRoom(package, root)
    for function in functions or contract.function_names():
        seen.runs[function] = run_function(room, function, set())
    return seen


class RoomsHere(dg.FaultRooms):
    """The catalogue's rooms, observed in this process; records which faults were observed.

    With `kept`, what a room showed is kept there, by fault, and only the functions missing
    from it are observed (as `FaultRooms` keeps them); without, every ask observes anew."""

    def __init__(self, where: Path, kept: dict | None = None):
        super().__init__()
        self.where = where
        self.kept = kept
        self.asked: list[str] = []
        self.limits: set[tuple[float, int]] = set()  # (timeout_s, memory_mb) asked for

    def observe(self, fault, functions, timeout_s, memory_mb, seed=5, contract=None):
        assert seed == 5, "observe_here draws the published seed's fixtures"
        assert fault.name != "sinusoidal-hang", "the hanging room needs a worker to time out"
        self.asked.append(fault.name)
        self.limits.add((timeout_s, memory_mb))
        before = None if self.kept is None else self.kept.get(fault)
        missing = tuple(f for f in functions if before is None or f not in before.runs)
        if before is not None and not missing:
            return before
        root = fault.materialize(self.where / f"{fault.name}-{next(_names)}")
        seen = observe_here(root, missing)
        if before is not None:
            before.runs.update(seen.runs)
            return before
        if self.kept is not None:
            self.kept[fault] = seen
        return seen


# Each fault room as `diagnose` observed it, by fault, for every later diagnosis here: the
# diagnosis only reads them, and a room observed at seed 5 shows the same whoever asks.
_KEPT: dict = {}


def diagnose(tmp_path: Path, room: Path):
    seen = observe_here(room)
    results = evaluate(seen)
    rooms = RoomsHere(tmp_path / "faults", _KEPT)
    return dg.diagnose(seen, results, 1.0, 512, rooms=rooms), rooms, seen, results


# Functions whose own and inlined faults all run in this process (none hangs or imports torch).
HERE = [
    f
    for f in faults.CATALOGUE
    if not {f.function, *dg.transitive_dependencies(f.function)}
    & {"sinusoidal_positions", "merge_heads", "multi_head_attention"}
    and not f.measured  # its symptom is a worker's memory: no worker here
]


def test_the_functions_diagnosed_here_cover_most_of_the_catalogue():
    assert len(HERE) >= 15
    assert {f.function for f in HERE} >= {"softmax", "causal_mask", "scaled_dot_product_attention"}


@pytest.mark.parametrize("fault", HERE, ids=lambda f: f.name)
def test_each_fault_is_named_at_its_function_with_its_course_section(tmp_path, fault):
    found, _, _, _ = diagnose(tmp_path, fault.materialize(tmp_path / "room"))
    named = [d for d in found if d.function == fault.function]
    assert len(named) == 1, found
    (d,) = named
    assert (d.kind, d.fault, d.fault_function, d.course) == (
        "fault",
        fault.name,
        fault.function,
        fault.course,
    )
    assert d.message.startswith(f"{fault.function}: matches fault `{fault.name}`: ")
    assert d.message.split("; see ")[1].startswith(fault.course)
    assert d.to_json() == {
        "function": fault.function,
        "kind": "fault",
        "message": d.message,
        "fault": fault.name,
        "fault_function": fault.function,
        "course": fault.course,
    }
    assert isinstance(d.shown, Msg) and str(d.shown) == d.message  # translated where shown
    # Every other failing function is explained by this one, never named after a fault.
    assert all(
        o.kind == "dependency" and o.chain[-1] == fault.function for o in found if o is not d
    )


def test_a_learners_bug_in_a_dependency_is_localised_down_the_chain(tmp_path):
    """A softmax at temperature 1/2: everything built on it fails, and is sent to it."""
    room = learner_room(
        tmp_path,
        "primitives",
        HALF_TEMPERATURE_SOFTMAX,
    )
    found, rooms, _, _ = diagnose(tmp_path, room)
    assert found[0].function == "softmax" and found[0].kind == "unmatched"
    by_function = {d.function: d for d in found}
    sdpa = by_function["scaled_dot_product_attention"]
    assert sdpa.kind == "dependency"
    assert sdpa.chain == ("scaled_dot_product_attention", "softmax")
    assert sdpa.message == (
        "scaled_dot_product_attention fails because softmax fails: it is built on it; "
        "fix softmax first"
    )
    assert sdpa.to_json()["chain"] == ["scaled_dot_product_attention", "softmax"]
    block = by_function["transformer_block"]
    assert block.chain[0] == "transformer_block" and block.chain[-1] == "softmax"
    assert len(block.chain) == 4  # block -> multi-head -> sdpa -> softmax
    assert block.message == (
        "transformer_block fails because multi_head_attention fails, which fails because "
        "scaled_dot_product_attention fails, which fails because softmax fails: it is built "
        "on it; fix softmax first"
    )
    # Root causes first, then what they explain; each in contract order.
    kinds = [d.kind for d in found]
    assert kinds == sorted(kinds, key=lambda k: k == "dependency")
    order = contract.function_names()
    dependents = [order.index(d.function) for d in found if d.kind == "dependency"]
    assert dependents == sorted(dependents)
    # Only softmax's own faults were tried: what depends on it was localised, not matched.
    assert set(rooms.asked) == {f.name for f in faults.CATALOGUE if f.function == "softmax"}


def test_an_unknown_bug_matches_nothing_and_names_its_failing_checks(tmp_path):
    room = learner_room(
        tmp_path,
        "primitives",
        """
        def relu_ffn(x, w1, b1, w2, b2):
            return np.maximum(x @ w1 + b1, 0.0) @ w2  # forgets b2
        """,
    )
    found, rooms, _, _ = diagnose(tmp_path, room)
    (d,) = [d for d in found if d.function == "relu_ffn"]
    assert d.kind == "unmatched" and d.fault is None
    assert (
        d.message
        == "relu_ffn: its values differ from the reference; no catalogued fault matches it"
    )
    assert d.to_json() == {"function": "relu_ffn", "kind": "unmatched", "message": d.message}
    assert set(rooms.asked) == {f.name for f in faults.CATALOGUE if f.function == "relu_ffn"}


def test_the_checks_a_diagnosis_names_are_in_the_learners_language(tmp_path):
    """`softmax：未通过 contract`: the check's name stayed English inside the Chinese
    diagnosis, where the failures list beside it says 接口合同."""
    from labctl.i18n import _, set_language

    room = learner_room(
        tmp_path,
        "primitives",
        """
        _softmax = softmax

        def softmax(*args, **kwargs):
            return _softmax(*args, **kwargs)
        """,
    )
    found = diagnose(tmp_path, room)[0]
    (d,) = [d for d in found if d.function == "softmax"]
    assert str(d.message) == "softmax: fails contract; no catalogued fault matches it"
    previous = set_language("zh")
    try:
        assert _(d.shown) == "softmax：未通过 接口合同；目录中没有与之相符的故障"
    finally:
        set_language(previous)


@pytest.mark.parametrize(
    ("source", "returned", "expected"),
    [
        (
            "def relu_ffn(x, w1, b1, w2, b2):\n"
            "    return (np.maximum(x @ w1 + b1, 0.0) @ w2 + b2).astype(np.float32)\n",
            "float32",
            "float64",
        ),
        (
            "def relu_ffn(x, w1, b1, w2, b2):\n"
            "    out = np.maximum(x @ w1 + b1, 0.0) @ w2 + b2\n"
            "    return out.astype(np.float16) if out.dtype == np.float32 else out\n",
            "float16",
            "float32",
        ),
    ],
)
def test_a_dtype_other_than_float64_for_float32_is_said_as_it_is(
    tmp_path, source, returned, expected
):
    """Every wrong dtype was explained as float64 returned for float32 input, with advice about
    float64 arrays the function does not make: a float32 result of float64 inputs (the
    commonest), a float16 one. Each is said as it is."""
    room = learner_room(tmp_path, "primitives", source)
    found, _rooms, _, _ = diagnose(tmp_path, room)
    (d,) = [d for d in found if d.function == "relu_ffn"]
    assert f"it returns {returned} where the contract keeps {expected}" in d.message
    assert "float64 for float32 input" not in d.message


def test_a_bug_with_an_extra_symptom_is_named_and_the_extra_said(tmp_path):
    """HF's rotate_half layout, written without the odd-D check the contract asks for."""
    room = learner_room(tmp_path, "primitives", HF_ROPE_WITHOUT_ODD_CHECK)
    found, _, _, results = diagnose(tmp_path, room)
    (d,) = [d for d in found if d.function == "rope"]
    assert {r.name for r in results if r.function == "rope" and r.failed} == {"parity", "bad-input"}
    assert d.fault == "rope-half-split"
    assert d.message.endswith(" (it also fails bad-input)")


def test_an_inlined_fault_of_a_dependency_is_named_as_such(tmp_path):
    """A learner's sdpa with a softmax of its own that forgets the max: the package's
    softmax passes, so the failure is sdpa's, and it behaves as softmax-no-max's sdpa."""
    room = learner_room(
        tmp_path,
        "attention",
        """
        def softmax(x, axis=-1):  # attention.py's own, shadowing the package's
            x = _as_float(x, "x")
            e = np.exp(x)
            return (e / np.sum(e, axis=axis, keepdims=True)).astype(_float_dtype(x), copy=False)
        """,
    )
    found, rooms, _, results = diagnose(tmp_path, room)
    assert not any(r.failed for r in results if r.function == "softmax")
    (d,) = [d for d in found if d.function == "scaled_dot_product_attention"]
    assert (d.kind, d.fault, d.fault_function) == ("fault", "softmax-no-max", "softmax")
    assert d.message.startswith(
        "scaled_dot_product_attention: matches fault `softmax-no-max` (a fault of softmax, "
        "inlined here): "
    )
    # sdpa's own faults were tried, and none matched; then those of what it is built on.
    own = {f.name for f in faults.CATALOGUE if f.function == "scaled_dot_product_attention"}
    assert own < set(rooms.asked)


def test_a_function_that_raises_not_implemented_is_said_so(tmp_path):
    room = learner_room(
        tmp_path,
        "primitives",
        """
        def relu_ffn(x, w1, b1, w2, b2):
            raise NotImplementedError
        """,
    )
    found, rooms, _, _ = diagnose(tmp_path, room)
    (d,) = [d for d in found if d.function == "relu_ffn"]
    assert (d.kind, d.message) == ("not-implemented", "relu_ffn: not implemented yet")
    assert rooms.asked == []


def test_a_function_that_calls_itself_is_its_own_failure_not_a_dependencys(tmp_path):
    """A softmax that calls itself until the stack runs out was said to fail "because softmax
    fails: it is built on it; fix softmax first", which says nothing; its RecursionError is
    its own, named where it is raised."""
    room = learner_room(
        tmp_path,
        "primitives",
        """
        def softmax(x, axis=-1):
            return softmax(x, axis)
        """,
    )
    found, _, _, _ = diagnose(tmp_path, room)
    (d,) = [d for d in found if d.function == "softmax"]
    assert d.kind == "unmatched", d.message
    assert d.message.startswith("softmax: it raises RecursionError at "), d.message
    assert "because" not in d.message and not d.chain


def test_a_function_built_on_a_stub_is_sent_to_the_stub(tmp_path):
    """softmax left as a stub: what calls it raises NotImplementedError too, from softmax."""
    room = learner_room(
        tmp_path,
        "primitives",
        """
        def softmax(x, axis=-1):
            raise NotImplementedError
        """,
    )
    found, rooms, seen, _ = diagnose(tmp_path, room)
    assert seen.runs["scaled_dot_product_attention"].not_implemented
    by_function = {d.function: d for d in found}
    assert by_function["softmax"].kind == "not-implemented"
    d = by_function["scaled_dot_product_attention"]
    assert (d.kind, d.chain) == ("dependency", ("scaled_dot_product_attention", "softmax"))
    assert d.message == (
        "scaled_dot_product_attention fails only because it calls a stub: softmax "
        "(not implemented yet); fix softmax first"
    )
    assert found[0].function == "softmax"  # the root cause before what it explains
    assert rooms.asked == []


def test_every_stub_a_function_reaches_is_named_in_contract_order(tmp_path):
    """Its fixtures reach layer_norm's stub, its probes softmax's, one call raises in its own
    body and one says nowhere: the stubs are softmax then layer_norm, as the contract lists them."""
    root = tmp_path / "room"
    root.mkdir()
    (root / "primitives.py").write_text(
        "def layer_norm(x, w, b, eps=1e-5):\n    raise NotImplementedError\n\n\n"
        "def softmax(x, axis=-1):\n    raise NotImplementedError\n\n\n"
        "def transformer_block(x, params):\n    raise NotImplementedError\n"
    )
    stub = {
        line: Outcome(
            "not-implemented", exc_type="NotImplementedError", where=f"room/primitives.py:{line}"
        )
        for line in (2, 6, 10)
    }
    run = FunctionRun(
        "transformer_block",
        fixtures={"a": stub[2], "b": stub[10], "c": Outcome("not-implemented")},
        probes={"p": stub[6]},
    )
    d = dg._not_implemented(RoomObservation(root, runs={run.function: run}), run)
    assert (d.function, d.kind) == ("transformer_block", "dependency")
    assert d.chain == ("transformer_block", "softmax", "layer_norm")
    assert d.message == (
        "transformer_block fails only because it calls a stub: softmax, layer_norm "
        "(not implemented yet); fix softmax first"
    )
    run.probes = {}
    assert dg._not_implemented(RoomObservation(root), run).chain == (
        "transformer_block",
        "layer_norm",
    )


def test_a_stub_of_one_s_own_helper_is_the_function_not_implemented(tmp_path):
    """A stub that raises from a helper of its own (no contract function) is still a stub."""
    room = learner_room(
        tmp_path,
        "primitives",
        """
        def _todo():
            raise NotImplementedError

        def relu_ffn(x, w1, b1, w2, b2):
            return _todo()
        """,
    )
    found, _, _, _ = diagnose(tmp_path, room)
    (d,) = [d for d in found if d.function == "relu_ffn"]
    assert (d.kind, d.chain) == ("not-implemented", ())


def test_a_function_the_package_does_not_expose_is_said_so(tmp_path):
    room = faults.project_clean_room()
    seen = observe_here(room)
    for name in ("relu_ffn", "swiglu_ffn"):
        seen.runs[name] = FunctionRun(name, fixtures={"f": Outcome("missing", message="none")})
    results = evaluate(seen)
    found = dg.diagnose(seen, results, 1.0, 512, rooms=RoomsHere(tmp_path))
    assert [(d.function, d.kind, d.message) for d in found if d.kind == "missing"] == [
        ("relu_ffn", "missing", "relu_ffn: the package does not expose it"),
        ("swiglu_ffn", "missing", "swiglu_ffn: the package does not expose it"),
    ]


def test_a_name_that_is_no_function_is_said_not_callable(tmp_path):
    """The package holds an int under a contract function's name: every check and the
    diagnosis say it is not callable (as the contract check does), not that it is absent."""
    room = shutil.copytree(faults.project_clean_room(), tmp_path / "room")
    with (room / "__init__.py").open("a") as init:
        init.write("softmax = 3\n")
    seen = observe(room.resolve(), 1.0, 512, functions=("softmax",), in_process=True)
    said = {r.name: r.message for r in evaluate(seen) if r.function == "softmax"}
    assert said["contract"] == "not callable"
    assert said["runs"].startswith("fixture rows: not callable (an object of type int);")
    assert said["shape"] == "not run: not callable"
    run = seen.runs["softmax"]
    found = dg.diagnose(seen, evaluate(seen), 1.0, 512, rooms=RoomsHere(tmp_path))
    assert [(d.kind, d.message) for d in found if d.function == "softmax"] == [
        ("missing", "softmax: not callable (an object of type int)")
    ]
    assert run.unexposed is not None


def test_a_room_that_does_not_load_is_one_line_naming_where(tmp_path):
    seen = RoomObservation(tmp_path, status="unloadable", message="does not load: SyntaxError")
    seen.load_error = Located("primitives.py:3", "invalid syntax", "softmax")
    found = dg.diagnose(seen, [], 1.0, 512, rooms=RoomsHere(tmp_path))
    assert [(d.function, d.kind, d.message) for d in found] == [
        ("softmax", "load", "the clean room does not load: SyntaxError")
    ]
    seen.load_error = None
    (d,) = dg.diagnose(seen, [], 1.0, 512, rooms=RoomsHere(tmp_path))
    assert d.function == "(package)"


def test_a_clean_room_that_passes_gets_no_diagnosis(tmp_path):
    found, rooms, _, results = diagnose(tmp_path, faults.project_clean_room())
    assert not any(r.failed for r in results)
    assert found == [] and rooms.asked == []


@pytest.mark.parametrize("copies", [("twin",), ("twin", "copy")])
def test_several_matching_faults_are_named_best_first(tmp_path, monkeypatch, copies):
    """A copy of a fault under another name matches as well: the first is named, the copies
    are listed after it (one copy: two matches, the least that lists them)."""
    original = faults.get("mask-reversed")
    twins = tuple(
        faults.Fault(
            f"mask-reversed-{n}",
            original.function,
            original.module,
            original.description,
            original.course,
            original.source,
        )
        for n in copies
    )
    monkeypatch.setattr(dg.catalogue, "CATALOGUE", (*faults.CATALOGUE, *twins))
    found, _, _, _ = diagnose(tmp_path, original.materialize(tmp_path / "room"))
    (d,) = [d for d in found if d.function == "causal_mask"]
    assert d.fault == "mask-reversed"
    assert (
        d.message
        == f"{dg.describe(original, 'causal_mask')} (also matches "
        + ", ".join(f"`mask-reversed-{n}`" for n in copies)
        + ")"
    )


# -- the comparison of two runs ---------------------------------------------------------


def _run(**outcomes: Outcome) -> FunctionRun:
    return FunctionRun("softmax", fixtures=dict(outcomes))


def test_same_behaviour_needs_both_runs_or_neither():
    assert lk.same_behaviour("softmax", None, None)
    assert not lk.same_behaviour("softmax", None, _run())
    assert not lk.same_behaviour("softmax", _run(), None)


def test_same_behaviour_compares_outcomes_edits_and_values(tmp_path):
    seen = observe_here(faults.project_clean_room(), ("softmax",))
    base = seen.runs["softmax"]
    assert lk.same_behaviour("softmax", base, copy.deepcopy(base))
    name = next(iter(base.fixtures))
    for changed in (
        Outcome("exception", message="boom", exc_type="ValueError"),
        Outcome("value", value=base.fixtures[name].value, mutated=("x",)),
        Outcome("value", value=base.fixtures[name].value + 1e-3),
        Outcome("value", value=base.fixtures[name].value.astype("float32")),
        Outcome("value", value=(base.fixtures[name].value,)),
    ):
        other = copy.deepcopy(base)
        other.fixtures[name] = changed
        assert not lk.same_behaviour("softmax", base, other), changed
    other = copy.deepcopy(base)
    del other.fixtures[name]
    assert not lk.same_behaviour("softmax", base, other)
    probe = next(iter(base.probes))
    other = copy.deepcopy(base)
    del other.probes[probe]
    assert not lk.same_behaviour("softmax", base, other)
    other = copy.deepcopy(base)
    other.probes[probe] = Outcome("timeout", message="hung")
    assert not lk.same_behaviour("softmax", base, other)
    # A fixture is compared at the parity tolerance, not a probe's float32 one.
    close = copy.deepcopy(base)
    close.fixtures[name] = Outcome("value", value=base.fixtures[name].value * (1 + 1e-6))
    assert not lk.same_behaviour("softmax", base, close)
    # Two runs that raise the same way behave alike, whatever the message says.
    a, b = copy.deepcopy(base), copy.deepcopy(base)
    a.fixtures[name] = Outcome("exception", message="one", exc_type="ValueError")
    b.fixtures[name] = Outcome("exception", message="two", exc_type="TypeError")
    assert lk.same_behaviour("softmax", a, b)


def test_a_probe_is_compared_at_float32_precision_relative_to_the_reference(tmp_path):
    seen = observe_here(faults.project_clean_room(), ("softmax",))
    base = seen.runs["softmax"]
    probe = next(n for n, o in base.probes.items() if o.kind == "value")
    value = base.probes[probe].value
    scale = max(1.0, float(abs(value).max()))
    near, far = copy.deepcopy(base), copy.deepcopy(base)
    near.probes[probe] = Outcome("value", value=value + 0.5e-4 * scale)
    far.probes[probe] = Outcome("value", value=value + 2e-4 * scale)
    assert lk.same_behaviour("softmax", base, near)
    assert not lk.same_behaviour("softmax", base, far)


def test_malformed_outputs_are_alike_only_with_the_same_types_and_shapes():
    assert lk._shape_signature([1, (2.0,)]) == ("list", ("int", ("tuple", ("float",))))
    import numpy as np

    a = np.zeros((2, 3))
    assert lk._shape_signature(a) == ("array", (2, 3), "float64")
    assert lk._shape_signature(a) != lk._shape_signature(a.T)
    assert lk._shape_signature(a) != lk._shape_signature(a.astype("float32"))


def test_bad_inputs_are_alike_when_each_is_refused_the_same_way():
    def run(**bad: Outcome) -> FunctionRun:
        return FunctionRun("softmax", bad=dict(bad))

    refused = Outcome("exception", message="x", exc_type="ValueError")
    accepted = Outcome("value", value=1.0)
    assert lk._same_bad_input(None, None)
    assert not lk._same_bad_input(run(), None) and not lk._same_bad_input(None, run())
    assert lk._same_bad_input(run(a=refused), run(a=refused))
    assert not lk._same_bad_input(run(a=refused), run(a=accepted))
    assert not lk._same_bad_input(run(a=refused), run(b=refused))
    assert not lk._same_bad_input(run(a=refused, b=refused), run(a=refused))


def test_matches_requires_the_same_failing_checks_and_side_symptoms(tmp_path):
    fault = faults.get("mask-reversed")
    fault_seen = observe_here(fault.materialize(tmp_path / "fault"))
    learner_seen = observe_here(fault.materialize(tmp_path / "learner"))
    results = evaluate(learner_seen)
    assert lk.matches("causal_mask", learner_seen, results, fault_seen) == set()
    # A clean room's run of the function does not match a fault's.
    clean = observe_here(faults.project_clean_room())
    assert lk.matches("causal_mask", clean, evaluate(clean), fault_seen) is None
    # The same failing checks but other values: no match.
    other = observe_here(faults.get("causal-top-left").materialize(tmp_path / "other"))
    assert lk.matches("causal_mask", other, evaluate(other), fault_seen) is None


def test_an_import_violation_matches_only_the_same_violation(tmp_path):
    fault = faults.get("merge-heads-imports-torch")
    fault_seen = observe_here(fault.materialize(tmp_path / "fault"))
    assert fault_seen.status == "refused"
    learner_seen = copy.deepcopy(fault_seen)
    results = evaluate(learner_seen)
    assert lk.matches("merge_heads", learner_seen, results, fault_seen) is not None
    learner_seen.violations = [
        Located(v.where, v.what.replace("torch", "socket"), v.function)
        for v in learner_seen.violations
    ]
    assert lk.matches("merge_heads", learner_seen, evaluate(learner_seen), fault_seen) is None


def test_a_signature_deviation_matches_only_the_same_deviation(tmp_path):
    fault = faults.get("rms-eps-default")
    fault_seen = observe_here(fault.materialize(tmp_path / "fault"))
    learner_seen = observe_here(fault.materialize(tmp_path / "learner"))
    assert any(d.function == "rms_norm" for d in fault_seen.deviations)
    assert lk.matches("rms_norm", learner_seen, evaluate(learner_seen), fault_seen) is not None
    learner_seen.deviations = [
        contract.Deviation(d.function, d.message + " (another)") if d.function == "rms_norm" else d
        for d in learner_seen.deviations
    ]
    assert lk.matches("rms_norm", learner_seen, evaluate(learner_seen), fault_seen) is None


# -- the chain and its words ---------------------------------------------------------


def test_dependencies_are_listed_nearest_first_each_once():
    deps = dg.transitive_dependencies("transformer_block")
    assert deps[:3] == ["rms_norm", "multi_head_attention", "swiglu_ffn"]
    assert len(deps) == len(set(deps))
    assert deps.index("softmax") > deps.index("scaled_dot_product_attention")
    assert dg.transitive_dependencies("softmax") == []


def test_a_chain_of_calls_is_followed_to_the_function_at_fault_and_stops_at_a_cycle(
    monkeypatch,
):
    sent = {"a": "b", "b": "c", "c": "b"}
    monkeypatch.setattr(
        blame, "blamed", lambda seen, results, f: Call(sent[f], 1, (), {}) if f in sent else None
    )
    d = dg._sent_on(RoomObservation(Path(".")), [], "a", Call("b", 1, (), {}))
    assert d.chain == ("a", "b", "c")
    assert d.message == (
        "a fails because b fails, which fails because c fails: it is built on it; fix c first"
    )


def test_a_fault_citing_the_contract_says_how_to_open_it():
    """The contract ships with labctl: the section a diagnosis cites is one command away."""
    fault = faults.get("window-unchecked")
    assert fault.course.startswith("contract v1 Bad input")
    shown = str(dg.describe(fault, fault.function))
    assert shown.endswith(f"see {fault.course} (`labctl contract document --contract 1`)")
    assert "## Bad input" in contract.document_text(1)
    # a citation of the course alone names no command
    course_only = faults.get("softmax-no-max")
    assert "labctl contract" not in str(dg.describe(course_only, "softmax"))


def test_a_fault_of_the_function_itself_is_described_without_the_inlined_note():
    fault = faults.get("softmax-no-max")
    assert str(dg.describe(fault, "softmax")) == (
        f"softmax: matches fault `softmax-no-max`: {fault.description}; see {fault.course}"
    )
    assert str(dg.describe(fault, "scaled_dot_product_attention")).startswith(
        "scaled_dot_product_attention: matches fault `softmax-no-max` (a fault of softmax, "
        "inlined here): "
    )


# -- fault rooms are observed once per process ------------------------------------------


def test_fault_rooms_are_materialized_once_and_observed_only_for_what_is_missing(
    tmp_path, monkeypatch
):
    calls: list[tuple[str, tuple[str, ...]]] = []

    def fake_observe(
        root, timeout_s, memory_mb, functions, seed, in_process, contract_version=None, own=False
    ):
        assert own  # a fault room's replies are labctl's own (replies.OWN), not a learner's
        assert (timeout_s, memory_mb) in ((1.0, 512), (2.0, 512))
        assert in_process  # labctl's own room, and a fault that does not hang
        calls.append((root.parent.name, tuple(functions)))
        seen = RoomObservation(root)
        seen.runs = {f: FunctionRun(f) for f in functions}
        return seen

    monkeypatch.setattr(dg, "observe", fake_observe)
    rooms = dg.FaultRooms()
    fault = faults.get("softmax-no-max")
    first = rooms.observe(fault, ("softmax",), 1.0, 512)
    assert rooms.observe(fault, ("softmax",), 1.0, 512) is first
    both = rooms.observe(fault, ("softmax", "rope"), 1.0, 512)
    assert both is first and set(both.runs) == {"softmax", "rope"}
    rooms.observe(fault, ("softmax",), 2.0, 512)  # another timeout: observed anew
    rooms.observe(fault, ("softmax",), 1.0, 512, 6)  # another seed: observed anew
    assert calls == [
        ("softmax-no-max", ("softmax",)),
        ("softmax-no-max", ("rope",)),
        ("softmax-no-max", ("softmax",)),
        ("softmax-no-max", ("softmax",)),
    ]
    path = rooms.path(fault)
    assert path == rooms.path(fault) and path.name == "clean_room"
    assert (
        (path / "primitives.py")
        .read_text("utf-8")
        .endswith(textwrap.dedent(fault.source).strip() + "\n")
    )


def test_a_fault_room_that_does_not_load_is_not_observed_again(monkeypatch):
    calls = []

    def fake_observe(
        root, timeout_s, memory_mb, functions, seed, in_process, contract_version=None, own=False
    ):
        calls.append(functions)
        return RoomObservation(root, status="unloadable")

    monkeypatch.setattr(dg, "observe", fake_observe)
    rooms = dg.FaultRooms()
    fault = faults.get("softmax-no-max")
    first = rooms.observe(fault, ("softmax",), 1.0, 512)
    assert rooms.observe(fault, ("rope",), 1.0, 512) is first
    assert len(calls) == 1


def test_what_labctl_faults_observed_is_remembered(monkeypatch):
    monkeypatch.setattr(dg, "observe", lambda *a, **k: pytest.fail("observed again"))
    rooms = dg.FaultRooms()
    fault = faults.get("softmax-no-max")
    seen = RoomObservation(Path("x"))
    seen.runs = {"softmax": FunctionRun("softmax")}
    rooms.remember(fault, 1.0, 512, seen)
    # asked as the diagnosis asks: at the seed and the contract the learner's room was checked at
    assert rooms.observe(fault, ("softmax",), 1.0, 512, seen.seed, seen.contract) is seen


def test_fault_rooms_keep_one_seeds_observations(monkeypatch):
    """Observations are replies held against labctl's budget: a process that diagnoses at a
    new seed lets the old seed's go, or a long-lived grading worker would fill the budget."""
    observed = []

    def fake_observe(
        path, timeout_s, memory_mb, functions, seed, in_process, contract_version=None, own=False
    ):
        observed.append(seed)
        seen = RoomObservation(Path("x"), seed=seed)
        seen.runs = {f: FunctionRun(f) for f in functions}
        return seen

    monkeypatch.setattr(dg, "observe", fake_observe)
    monkeypatch.setattr(dg.FaultRooms, "path", lambda self, fault: Path("x"))
    rooms = dg.FaultRooms()
    fault = faults.get("softmax-no-max")
    first = rooms.observe(fault, ("softmax",), 1.0, 512, seed=1)
    assert rooms.observe(fault, ("softmax",), 1.0, 512, seed=1) is first
    rooms.observe(fault, ("softmax",), 1.0, 512, seed=2)
    assert [key[3] for key in rooms._seen] == [2]
    rooms.observe(fault, ("softmax",), 1.0, 512, seed=1)
    assert observed == [1, 2, 1]


def test_fault_rooms_are_observed_within_the_diagnosis_time_limit(tmp_path):
    room = faults.get("mask-reversed").materialize(tmp_path / "room")
    seen = observe_here(room)
    for given, used in ((1.0, 1.0), (30.0, dg.DIAGNOSIS_TIMEOUT_S)):
        rooms = RoomsHere(tmp_path / f"faults-{given}")
        dg.diagnose(seen, evaluate(seen), given, 256, rooms=rooms)
        assert rooms.limits == {(used, 256)}


def test_a_dependency_that_fails_only_a_side_check_explains_nothing(tmp_path):
    """rope accepts an odd D (bad-input) and multi-head attention fails parity: rope's
    failure is not one that would break what is built on it, so mha is not sent to rope."""
    seen = observe_here(faults.project_clean_room())
    results = [
        CheckResult("rope", "bad-input", FAIL, "accepts an odd D"),
        CheckResult("multi_head_attention", "parity", FAIL, "differs"),
    ]
    found = dg.diagnose(seen, results, 1.0, 512, rooms=RoomsHere(tmp_path))
    kinds = {d.function: d.kind for d in found}
    assert kinds == {"rope": "unmatched", "multi_head_attention": "unmatched"}


def test_a_group_of_fault_rooms_is_observed_ahead_in_parallel_only_when_there_are_several(
    tmp_path,
):
    group = [faults.get("softmax-no-max"), faults.get("softmax-blocked-nan")]
    rooms = RoomsHere(tmp_path)
    dg._prefetch(rooms, group[:1], "softmax", 1.5, 128)
    assert rooms.asked == []
    dg._prefetch(rooms, group, "softmax", 1.5, 128)
    assert sorted(rooms.asked) == sorted(f.name for f in group)
    assert rooms.limits == {(1.5, 128)}


def test_the_fault_rooms_folder_is_named_for_labctl_and_removed_at_exit(monkeypatch):
    registered = []
    monkeypatch.setattr(dg.atexit, "register", lambda *args: registered.append(args))
    rooms = dg.FaultRooms()
    path = rooms.path(faults.get("softmax-no-max"))
    top = path.parents[1]
    assert top.name.startswith("labctl-faults-")
    assert registered == [(shutil.rmtree, top, True)]
    rooms.path(faults.get("mask-reversed"))
    assert len(registered) == 1  # one folder for every fault room
    registered[0][0](*registered[0][1:])
    assert not top.exists()


def test_diagnoses_are_root_causes_first_each_group_in_contract_order(tmp_path):
    """softmax at temperature 1/2 and relu_ffn without b2 (unknown bugs), padding_mask not
    written yet: the three roots in contract order, then everything built on softmax."""
    room = learner_room(
        tmp_path,
        "primitives",
        HALF_TEMPERATURE_SOFTMAX
        + textwrap.dedent(
            """
        def padding_mask(lengths, t):
            raise NotImplementedError

        def relu_ffn(x, w1, b1, w2, b2):
            return np.maximum(x @ w1 + b1, 0.0) @ w2
        """
        ),
    )
    found, _, _, _ = diagnose(tmp_path, room)
    assert [(d.function, d.kind) for d in found] == [
        ("softmax", "unmatched"),
        ("padding_mask", "not-implemented"),
        ("relu_ffn", "unmatched"),
        ("scaled_dot_product_attention", "dependency"),
        ("multi_head_attention", "dependency"),
        ("attention_decode", "dependency"),
        ("transformer_block", "dependency"),
        ("decoder_forward", "dependency"),
    ]
    assert found[0].message == (
        "softmax: its output holds NaN or inf; its values differ from the reference; its "
        "outputs do not sum to 1 along the axis it is given; no catalogued fault matches it"
    )


def test_a_matching_bug_with_two_extra_symptoms_names_both(tmp_path):
    """The Hugging Face layout again, with a parameter the contract does not have: a
    signature deviation as well as the missing odd-D check."""
    source = HF_ROPE_WITHOUT_ODD_CHECK.replace(
        "theta=10000.0)", "theta=10000.0, interleaved=False)"
    )
    found, _, _, _ = diagnose(tmp_path, learner_room(tmp_path, "primitives", source))
    (d,) = [d for d in found if d.function == "rope"]
    fault = faults.get("rope-half-split")
    assert d.message == (
        f"rope: matches fault `rope-half-split`: {fault.description}; see {fault.course} "
        "(`labctl contract document --contract 1`) (it also fails bad-input, contract)"
    )


def test_a_probe_s_float32_tolerance_grows_with_the_reference_s_scale():
    function = "scaled_dot_product_attention"
    probe = next(p for p in fx.probes(function) if p.name == "gqa-tq<tk-float32")
    out, weights = reference = fx.reference_output(probe)
    scale = float(np.max(np.abs(out)))
    assert 1.0 < scale < 2.0  # between the floor of 1 and twice it: both ends matter
    tolerance = lk.FLOAT32_DIAGNOSIS_RELATIVE * scale
    inside, beyond = 0.9 * tolerance, (tolerance + lk.FLOAT32_DIAGNOSIS_RELATIVE * 2.0) / 2
    assert lk._same_value(function, probe, reference, (out + inside, weights), probe=True)
    assert not lk._same_value(function, probe, reference, (out + beyond, weights), probe=True)


def test_malformed_outputs_of_the_same_form_behave_alike():
    fixture = fx.fixtures("softmax")[0]
    assert lk._same_value("softmax", fixture, [1.0], [2.0], probe=False)
    assert not lk._same_value("softmax", fixture, [1.0], (1.0,), probe=False)
    assert not lk._same_value("softmax", fixture, [1.0], fx.reference_output(fixture), False)


def test_a_clean_room_that_does_not_load_is_diagnosed_before_its_functions(tmp_path):
    seen = RoomObservation(tmp_path, status="unloadable", message="does not load: ImportError")
    results = [
        CheckResult("causal_mask", "runs", FAIL, "not loaded"),
        CheckResult("softmax", "runs", FAIL, "not loaded"),
    ]
    found = dg.diagnose(seen, results, 1.0, 512, rooms=RoomsHere(tmp_path / "faults"))
    assert [(d.function, d.kind) for d in found] == [
        ("(package)", "load"),
        ("softmax", "unmatched"),
        ("causal_mask", "unmatched"),
    ]


# -- matches, on observations edited by hand ----------------------------------------------

SDPA = "scaled_dot_product_attention"


@pytest.fixture(scope="module")
def sdpa_seen():
    """The project's room observed for sdpa only, twice: a learner's and a fault's, alike."""
    room = faults.project_clean_room()
    return lambda: observe_here(room, (SDPA,))


def test_a_fault_that_fails_nothing_matches_nothing(sdpa_seen):
    """The learner fails only a side check (contract); the fault's room fails nothing here."""
    seen, fault_seen = sdpa_seen(), sdpa_seen()
    results = [
        CheckResult(SDPA, "contract", FAIL, "a parameter renamed"),
        *(r for r in evaluate(seen, (SDPA,)) if r.name != "contract"),
    ]
    assert lk.matches(SDPA, seen, results, fault_seen) is None


def test_a_fault_whose_bad_input_differs_from_the_learner_s_does_not_match(sdpa_seen):
    """Both accept a bad input, so both fail bad-input, but not the same one: no match. The
    same accepted input is a match."""
    seen, fault_seen = sdpa_seen(), sdpa_seen()
    seen.runs[SDPA].bad["batch-mismatch"] = Outcome("value")
    fault_seen.runs[SDPA].bad["head-width-mismatch"] = Outcome("value")
    results = evaluate(seen, (SDPA,))
    assert "bad-input" in {r.name for r in results if r.failed}
    assert lk.matches(SDPA, seen, results, fault_seen) is None
    fault_seen.runs[SDPA].bad["head-width-mismatch"] = seen.runs[SDPA].bad["head-width-mismatch"]
    fault_seen.runs[SDPA].bad["batch-mismatch"] = Outcome("value")
    assert lk.matches(SDPA, seen, results, fault_seen) == set()


# --------------------------------------------------------------------------
# Blame from the calls each fixture made (issue 21's rooms, in this process)
# --------------------------------------------------------------------------

ATTENTION = ("rope", "multi_head_attention", "attention_decode", "transformer_block")


def seen_in(tmp_path: Path, functions: tuple[str, ...], *parts):
    seen = observe_here(misdiagnosed.room(tmp_path, *parts), functions)
    return seen, evaluate(seen, functions)


def test_a_stub_reached_on_some_fixtures_explains_those_and_nothing_else(tmp_path):
    seen, results = seen_in(
        tmp_path,
        ATTENTION,
        ("primitives", misdiagnosed.ROPE_STUB),
        ("transformer_block", misdiagnosed.LEAKY_MHA),
    )
    failed = [r.name for r in results if r.function == "multi_head_attention" and r.failed]
    found = blame.explain("multi_head_attention", seen.runs["multi_head_attention"], failed)
    # The raise on the RoPE fixture is rope's, and so is the NotImplementedError an odd D (a
    # bad input) meets in the stub; the leak and the values are its own.
    assert "bad-input" in failed
    assert {c.function for c in found.by} == {"rope"}  # the fixture and its float32 probe
    assert set(found.own) == {"parity", "causal"}
    assert blame.blamed(seen, results, "multi_head_attention") is None
    own = dg._own(seen, results, "multi_head_attention")
    assert own.message == (
        "multi_head_attention: the future leaks: an earlier output changes when a later token "
        "changes: apply the causal mask, so that each position sees only itself and the "
        "positions before it; its values differ from the reference; no catalogued fault "
        "matches it"
    )
    # The project's decode reaches the stub and fails nowhere else: "only because it calls a stub".
    call = blame.blamed(seen, results, "attention_decode")
    assert (call.function, call.raised) == ("rope", "NotImplementedError")
    assert dg._sent_on(seen, results, "attention_decode", call).message == (
        "attention_decode fails only because it calls a stub: rope (not implemented yet); "
        "fix rope first"
    )
    block = blame.blamed(seen, results, "transformer_block")
    assert dg._sent_on(seen, results, "transformer_block", block).chain == (
        "transformer_block",
        "multi_head_attention",
    )


def test_a_function_never_called_is_never_blamed_and_the_float64_source_is_named(tmp_path):
    seen, results = seen_in(
        tmp_path,
        ATTENTION,
        ("primitives", misdiagnosed.ROPE_STUB),
        ("transformer_block", misdiagnosed.TRI_MASK_MHA),
    )
    run = seen.runs["multi_head_attention"]
    reached = {c.function for o in run.outcomes() for c in o.calls}
    assert "rope" not in reached and "softmax" not in reached
    assert blame.explain("multi_head_attention", run, ["dtype"]).by == ()
    message = dg._own(seen, results, "multi_head_attention").message
    assert message.startswith(
        "multi_head_attention: it returns float64 for float32 input (first seen in the x it "
        "passes to merge_heads): "
    )


def test_float32_rounding_names_the_first_call_whose_precision_dropped(tmp_path):
    functions = ("rms_norm", "transformer_block")
    seen, results = seen_in(
        tmp_path, functions, ("primitives", misdiagnosed.RMS_NORM_RETURNS_FLOAT32)
    )
    assert blame.blamed(seen, results, "transformer_block") is None  # dtype explains no parity
    block = dg._own(seen, results, "transformer_block")
    assert block.kind == "precision"
    assert ", first in rms_norm, which it calls; " in block.message
    assert 1e-9 < block.to_json()["numbers"]["relative_error"] <= 1e-5
    norm = dg._own(seen, results, "rms_norm")
    assert (norm.kind, ", in its own code; " in norm.message) == ("precision", True)


def test_a_parity_error_beyond_float32_rounding_is_not_called_precision(tmp_path):
    seen, results = seen_in(
        tmp_path,
        ("rope",),
        ("primitives", misdiagnosed.ROPE_FLOAT32_TABLES.replace("theta)", "theta * 1.001)")),
    )
    assert blame.float32_rounding("rope", seen.runs["rope"]) is None
    assert dg._own(seen, results, "rope").kind == "unmatched"


def test_a_function_not_run_because_a_dependency_hung_is_sent_to_that_dependency():
    seen = RoomObservation(Path("."))
    skipped = Outcome("skipped", message="not run", skipped_for="sinusoidal_positions")
    seen.runs["decoder_forward"] = FunctionRun("decoder_forward", fixtures={"default": skipped})
    results = [CheckResult("decoder_forward", "runs", FAIL, "not run")]
    call = blame.blamed(seen, results, "decoder_forward")
    assert (call.function, call.raised) == ("sinusoidal_positions", "timeout")
    seen.runs["decoder_forward"].fixtures["default"] = Outcome("skipped", message="not run")
    assert blame.blamed(seen, results, "decoder_forward") is None


class BusyRooms(RoomsHere):
    """Fault rooms on a busy machine: at first the room does not load in time, or a call
    runs out of the diagnosis's 2 s, on the fixtures (the rest of the function's calls
    are then skipped) or on a bad input."""

    def __init__(self, path, late="fixtures"):
        super().__init__(path)
        self.late = late

    def observe(self, fault, functions, timeout_s, memory_mb, seed=5, contract=None):
        seen = super().observe(fault, functions, timeout_s, memory_mb, seed, contract)
        if timeout_s <= dg.DIAGNOSIS_TIMEOUT_S and self.late == "load":
            seen.status, seen.load_timed_out, seen.runs = "unloadable", True, {}
        elif timeout_s <= dg.DIAGNOSIS_TIMEOUT_S:
            for run in seen.runs.values():
                calls = run.fixtures if self.late == "fixtures" else run.bad
                if not calls:
                    continue
                first = next(iter(calls))
                for name in calls:
                    calls[name] = (
                        Outcome("timeout", message="did not return in time")
                        if name == first
                        else Outcome("skipped", message="not run: it timed out")
                    )
                run.timed_out = True
        return seen


@pytest.mark.parametrize(
    "fault,where",
    [("rms-eps-default", "fixtures"), ("rope-half-split", "bad"), ("softmax-no-max", "load")],
)
def test_a_fault_room_out_of_time_on_a_busy_machine_is_given_more_time(tmp_path, fault, where):
    function = faults.get(fault).function
    room = faults.get(fault).materialize(tmp_path / "room")
    seen = observe_here(room)
    results = evaluate(seen)
    busy = BusyRooms(tmp_path / "busy", where)
    found = dg.diagnose(seen, results, 10.0, 512, rooms=busy)
    named = next(d for d in found if d.function == function)
    assert (named.kind, named.fault) == ("fault", fault)
    # asked again, with more time (the learner's calls took milliseconds: the minimum)
    assert (dg.RETRY_MIN_S, 512) in busy.limits
    # without the retry (the learner's time no longer than the diagnosis's) nothing matches
    found = dg.diagnose(
        seen, results, dg.DIAGNOSIS_TIMEOUT_S, 512, rooms=BusyRooms(tmp_path / "b2", where)
    )
    assert next(d for d in found if d.function == function).kind == "unmatched"


def test_a_fault_room_is_given_again_what_the_learners_calls_needed_not_the_whole_timeout():
    """A fault that hangs (sinusoidal-hang, inlined in the decoder) ran out of the
    diagnosis's 2 s; observed again with the learner's 60 s it cost a minute of every
    verify whose decoder failed. It gets four times the learner's slowest call and 2 s,
    at least RETRY_MIN_S, at most the learner's timeout."""
    from labctl.verify.observe import FunctionRun, RoomObservation

    def seen_with(*seconds):
        run = FunctionRun("decoder_forward")
        for i, s in enumerate(seconds):
            run.fixtures[f"f{i}"] = Outcome("value", elapsed_s=s)
        return RoomObservation(Path("."), runs={"decoder_forward": run})

    assert dg._time_again(seen_with(0.01, 0.2), "decoder_forward", 60.0) == dg.RETRY_MIN_S
    assert dg._time_again(seen_with(0.5, 3.0), "decoder_forward", 60.0) == 4 * 3.0 + 2.0
    assert dg._time_again(seen_with(30.0), "decoder_forward", 60.0) == 60.0
    assert dg._time_again(seen_with(), "softmax", 4.0) == 4.0


def test_a_fault_room_is_observed_once_on_every_failing_function_it_is_compared_on():
    """softmax-no-max may explain softmax (its own) and the block (inlined): its room is
    asked for both at once, in contract order, so it loads once."""
    no_max, reversed_mask = faults.get("softmax-no-max"), faults.get("mask-reversed")
    plans = [
        ("transformer_block", [], [no_max, reversed_mask]),
        ("softmax", [no_max], []),
    ]
    wanted = dg._wanted(plans)
    assert wanted == {
        "softmax-no-max": ("softmax", "transformer_block"),
        "mask-reversed": ("transformer_block",),
    }

    class Asked:
        def __init__(self):
            self.asked = []

        def observe(self, fault, functions, timeout_s, memory_mb, seed, contract=None):
            self.asked.append((fault.name, tuple(functions)))

    rooms = Asked()
    dg._prefetch(rooms, [no_max, reversed_mask], "softmax", 2.0, 128, 5, wanted)
    assert sorted(rooms.asked) == [
        ("mask-reversed", ("transformer_block",)),
        ("softmax-no-max", ("softmax", "transformer_block")),
    ]


ABORTING_SOFTMAX = "import os\n\n\ndef softmax(x, axis=-1):\n    os.abort()"
# softmax ends the process only on what the room's attention hands it: on labctl's own
# fixtures it is the project's softmax.
ABORTING_FROM_SDPA = """
import os
from . import primitives as _primitives

_softmax = _primitives.softmax
_sdpa = scaled_dot_product_attention


def softmax(x, axis=-1):
    if getattr(_primitives, "_inside_sdpa", False):
        os.abort()
    return _softmax(x, axis)


def scaled_dot_product_attention(q, k, v, mask=None, scale=None):
    _primitives._inside_sdpa = True
    try:
        return _sdpa(q, k, v, mask, scale)
    finally:
        _primitives._inside_sdpa = False
"""


def _crash_diagnosis(tmp_path, module: str, source: str):
    room = learner_room(tmp_path / "room", module, source)
    functions = ("softmax", "scaled_dot_product_attention")
    seen = observe(room, 10.0, 512, functions=functions, isolation="process", seed=5)
    rooms = RoomsHere(tmp_path / "faults")
    found = {d.function: d for d in dg.diagnose(seen, evaluate(seen), 10.0, 512, rooms=rooms)}
    return room, found, rooms


def test_a_function_that_crashes_its_process_is_said_to_crash_where_and_no_fault_room_is_observed(
    tmp_path,
):
    """The worker prints its stack as it ends: labctl names the room's line the process
    ended in, and sends attention, which ended it inside softmax, to softmax, which ends it
    on labctl's own fixtures too. A match needs the same outcome on every fixture, and no
    catalogued fault ends its process: no fault room is observed (it cost 19 s), in either
    language."""
    from labctl.i18n import _ as shown
    from labctl.i18n import set_language

    room, found, rooms = _crash_diagnosis(tmp_path, "primitives", ABORTING_SOFTMAX)
    line = (room / "primitives.py").read_text().splitlines().index("    os.abort()") + 1
    assert rooms.asked == []
    assert found["softmax"].kind == "unmatched"
    assert found["softmax"].message == (
        f"softmax: it crashes at clean_room/primitives.py:{line} (the clean-room process died "
        "with SIGABRT); no catalogued fault matches it"
    )
    sdpa = found["scaled_dot_product_attention"]
    assert sdpa.kind == "dependency" and sdpa.chain == ("scaled_dot_product_attention", "softmax")
    assert "fix softmax first" in sdpa.message
    set_language("zh")
    try:
        assert shown(found["softmax"].shown) == (
            f"softmax：它崩溃了，位于 clean_room/primitives.py:{line}（clean room 进程因 SIGABRT "
            "终止）；目录中没有与之相符的故障"
        )
    finally:
        set_language("en")


def test_a_crash_inside_a_callee_that_never_crashes_on_its_own_is_the_callers(tmp_path):
    """softmax ends the process only on what attention hands it: attention is named, at the
    line the process ended in, and softmax is not blamed."""
    room, found, _ = _crash_diagnosis(tmp_path, "attention", ABORTING_FROM_SDPA)
    assert "softmax" not in found
    sdpa = found["scaled_dot_product_attention"]
    assert sdpa.kind == "unmatched", sdpa.message
    assert sdpa.message.startswith(
        "scaled_dot_product_attention: it crashes at clean_room/attention.py:"
    )


class LimitsKept(dg.FaultRooms):
    """The real fault rooms (a hang in a worker), each limit asked for recorded by fault;
    with `late`, a fault room that hangs does not load within the hang limit (a busy
    machine)."""

    def __init__(self, late: bool = False):
        super().__init__()
        self.late = late
        self.limits: dict[str, list[float]] = {}

    def observe(self, fault, functions, timeout_s, memory_mb, seed=5, contract=None):
        self.limits.setdefault(fault.name, []).append(timeout_s)
        if self.late and fault.hangs and timeout_s == dg.HANG_TIMEOUT_S:
            late = RoomObservation(Path("late"), status="unloadable", seed=seed)
            late.load_timed_out = True
            return late
        return super().observe(fault, functions, timeout_s, memory_mb, seed, contract)


def test_a_fault_that_hangs_is_observed_within_the_hang_limit_and_still_named(tmp_path):
    """sinusoidal-hang loops forever on its first call: its room was given the diagnosis's
    whole 2 s, so a learner whose sinusoidal_positions hangs waited 2 s more for the name.
    Observed within HANG_TIMEOUT_S it is named all the same (the learner's call and the
    fault's both time out), and the faults that do not hang keep DIAGNOSIS_TIMEOUT_S. A
    hang's room that does not even load in that time is observed again, not taken for a
    learner's room that loaded."""
    learner = faults.get("sinusoidal-hang").materialize(tmp_path / "learner" / "clean_room")
    seen = observe(learner, 2.5, 512, functions=("sinusoidal_positions",), seed=5)
    assert seen.runs["sinusoidal_positions"].timed_out
    for late, asked in ((False, [dg.HANG_TIMEOUT_S]), (True, [dg.HANG_TIMEOUT_S, 2.5])):
        rooms = LimitsKept(late)
        found = dg.diagnose(seen, evaluate(seen), 2.5, 512, rooms=rooms)
        named = next(d for d in found if d.function == "sinusoidal_positions")
        assert (named.kind, named.fault) == ("fault", "sinusoidal-hang"), late
        assert rooms.limits["sinusoidal-hang"] == asked
    assert dg.HANG_TIMEOUT_S < dg.DIAGNOSIS_TIMEOUT_S
    others = {name: asked for name, asked in rooms.limits.items() if name != "sinusoidal-hang"}
    assert all(asked == [dg.DIAGNOSIS_TIMEOUT_S] for asked in others.values()), others
    # a learner allowed less than either keeps its own limit
    assert dg.fault_limit(faults.get("sinusoidal-hang"), 0.3) == 0.3
    assert dg.fault_limit(faults.get("softmax-no-max"), 1.0) == 1.0


# A learner's RMSNorm that divides its input in place: its own output is right, but the
# block that calls it then adds the normalised x, not x, to the attention.
IN_PLACE_RMS_NORM = """
def rms_norm(x, weight, eps=1e-6):
    x /= np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return x * weight
"""


def test_a_caller_broken_by_a_callee_that_edits_its_input_is_sent_to_the_callee(tmp_path):
    """transformer_block failed parity and pure only because rms_norm wrote into the x it
    was given; it was said as the block's own bug ("its values differ from the reference")."""
    room = learner_room(tmp_path, "primitives", IN_PLACE_RMS_NORM)
    found, _, _, _ = diagnose(tmp_path, room)
    by_function = {d.function: d for d in found}
    norm = by_function["rms_norm"]
    assert norm.kind == "unmatched"
    assert norm.message == (
        "rms_norm: it writes into its input x in place (x -= ..., x /= ..., x[...] = ... or "
        "out=x), so its caller's array changes: compute into a new array (x = x - ...); no "
        "catalogued fault matches it"
    )
    block = by_function["transformer_block"]
    assert block.kind == "dependency" and block.chain == ("transformer_block", "rms_norm")
    assert block.message == (
        "transformer_block fails because rms_norm fails: it is built on it; fix rms_norm first"
    )
