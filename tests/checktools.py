"""Helpers for the check tests: observations built by hand, and checks that assert their row.

No worker runs: each test states exactly what a clean room did (`observed`), and every
result a check gives is asserted to be its own row (`named`).
"""

from __future__ import annotations

from pathlib import Path

from labctl.verify import checks
from labctl.verify import fixtures as fx
from labctl.verify.observe import FunctionRun, Outcome, RoomObservation


def named(check_fn):
    """`check_fn`, asserting that every result it gives is its own row: its function, its name."""
    name = next(c.name for c in checks.CHECKS if c.evaluate is check_fn)

    def run(seen, function):
        result = check_fn(seen, function)
        assert (result.function, result.name) == (function, name)
        return result

    return run


def observed(function: str, value_of=fx.reference_output, probes=True, **run_fields):
    """An observation of `function` whose fixtures (and probes) returned `value_of(fixture)`;
    `value_of` may return an Outcome instead of a value; `run_fields` set the FunctionRun's
    other calls (`causal`, `bad`)."""
    run = FunctionRun(function)

    def outcome(fixture):
        value = value_of(fixture)
        return value if isinstance(value, Outcome) else Outcome("value", value=value)

    for fixture in fx.fixtures(function):
        run.fixtures[fixture.name] = outcome(fixture)
    if probes:
        for fixture in fx.probes(function):
            run.probes[fixture.name] = outcome(fixture)
    for name, value in run_fields.items():
        setattr(run, name, value)
    return RoomObservation(root=Path("room"), runs={function: run})


def learner_room(directory: Path, module: str, source: str) -> Path:
    """The project's clean room with a learner's own version of a function appended to
    `module`.py (it shadows the project's), written under `directory`."""
    from labctl import faults

    return faults.Fault("learner", "-", module, "-", "-", source).materialize(
        directory / "clean_room"
    )


# Hugging Face's rotate_half layout of RoPE, written without the odd-D check the contract
# asks for: it matches fault rope-half-split, and also fails bad-input.
HF_ROPE_WITHOUT_ODD_CHECK = """
def rope(x, positions, theta=10000.0):
    x = np.asarray(x)
    half = x.shape[-1] // 2
    freq = theta ** (-np.arange(half) * 2.0 / x.shape[-1])
    angle = np.asarray(positions)[:, None] * freq[None, :]
    a, b = x[..., :half], x[..., half : 2 * half]
    return np.concatenate(
        [a * np.cos(angle) - b * np.sin(angle), a * np.sin(angle) + b * np.cos(angle)],
        axis=-1,
    ).astype(x.dtype)
"""


# The project's clean room's modules, each after those it imports from.
_ROOM_MODULES = ("primitives", "positions", "ffn", "attention", "transformer_block")


def one_file_room(directory: Path, source: str, contract: int = 1) -> Path:
    """The project's clean room as one file (`__init__.py`, its modules in import order, their
    relative imports dropped), with a learner's own version of a function appended (it shadows
    the project's); declaring contract v2 when asked. A room of one file, as many learners
    write one."""
    import ast
    import textwrap

    from labctl import faults

    base = faults.project_clean_room()
    parts = ["from __future__ import annotations"]
    for module in _ROOM_MODULES:
        tree = ast.parse((base / f"{module}.py").read_text(encoding="utf-8"))
        tree.body = [
            node
            for node in tree.body
            if not (
                isinstance(node, ast.ImportFrom) and (node.level or node.module == "__future__")
            )
        ]
        parts.append(ast.unparse(tree))
    if contract > 1:
        parts.append(f'CONTRACT = "transformer-block-v{contract}"')
    parts.append(textwrap.dedent(source).strip())
    room = directory / "clean_room"
    room.mkdir(parents=True)
    (room / "__init__.py").write_text("\n\n".join(parts) + "\n", encoding="utf-8")
    return room


def declared_v2(room: Path) -> Path:
    """`room` (a copy of the project's, several files), declaring contract v2."""
    init = room / "__init__.py"
    init.write_text(
        init.read_text(encoding="utf-8") + '\nCONTRACT = "transformer-block-v2"\n', encoding="utf-8"
    )
    return room
