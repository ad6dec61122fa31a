"""A learner's own correct clean room, for the tests that need one: labctl's, rewritten.

Since base code earns nothing (`labctl.fingerprints.base`), a verbatim or
renamed copy of labctl's own clean room is no stand-in for a learner who wrote
their own. The tests' correct learner is labctl's room rewritten the way two
people write the same formulas differently, which the base-code rule does not
undo (tests/test_grade_basecode.py shows it is not base code, and that it passes
verify as labctl's own does): the operands of every commutative operator swapped
(`b + a`; never a sequence's), every comparison mirrored (`b > a`), keyword
arguments in the other order, and a step count kept through every function and
asserted before it returns. Each rewrite keeps every value bit for bit (IEEE
addition and multiplication commute); the layout is `ast.unparse`'s.
"""

from __future__ import annotations

import ast
import functools
import shutil
import tempfile
from pathlib import Path

from labctl import faults

ROOM = faults.project_clean_room()
COUNTER = "steps_taken"
_SWAP = (ast.Add, ast.Mult, ast.BitAnd, ast.BitOr, ast.BitXor)
_MIRROR = {ast.Lt: ast.Gt, ast.Gt: ast.Lt, ast.LtE: ast.GtE, ast.GtE: ast.LtE, ast.Eq: ast.Eq,
           ast.NotEq: ast.NotEq}  # fmt: skip


def _sequence(node: ast.expr) -> bool:
    return isinstance(node, (ast.Tuple, ast.List, ast.JoinedStr)) or (
        isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes))
    )


def _docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)


class _Rewrite(ast.NodeTransformer):
    def visit_BinOp(self, node: ast.BinOp) -> ast.BinOp:
        self.generic_visit(node)
        if isinstance(node.op, _SWAP) and not (_sequence(node.left) or _sequence(node.right)):
            node.left, node.right = node.right, node.left
        return node

    def visit_Compare(self, node: ast.Compare) -> ast.Compare:
        self.generic_visit(node)
        if len(node.ops) == 1 and type(node.ops[0]) in _MIRROR:
            node.left, node.comparators = node.comparators[0], [node.left]
            node.ops = [_MIRROR[type(node.ops[0])]()]
        return node

    def visit_Call(self, node: ast.Call) -> ast.Call:
        self.generic_visit(node)
        node.keywords = list(reversed(node.keywords))
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.FunctionDef:
        self.generic_visit(node)
        head = node.body[:1] if node.body and _docstring(node.body[0]) else []
        body = [*head, *ast.parse(f"{COUNTER} = 0").body]
        for stmt in node.body[len(head) :]:
            if isinstance(stmt, (ast.Return, ast.Raise)):
                body += [*ast.parse(f"assert {COUNTER} >= 0").body, stmt]
            else:
                body += [stmt, *ast.parse(f"{COUNTER} += 1").body]
        node.body = body
        return node


@functools.lru_cache(maxsize=64)
def rewrite(text: str) -> str:
    """One module of labctl's room as the tests' learner wrote it."""
    tree = _Rewrite().visit(ast.parse(text))
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def honest_copy(source: Path, dest: Path) -> Path:
    """The room at `source` rewritten into `dest` (every `.py` file; nothing else copied)."""
    for path in sorted(source.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        target = dest / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(rewrite(path.read_text("utf-8")), encoding="utf-8")
    return dest


def honest_room(dest: Path) -> Path:
    """A learner's own correct room at `dest` (labctl's, rewritten)."""
    return honest_copy(ROOM, dest)


def honest_fault(name: str, dest: Path) -> Path:
    """The catalogued fault `name` as a learner who wrote their own room made it: labctl's
    room with the fault, rewritten, so that only the fault is wrong."""
    with tempfile.TemporaryDirectory(prefix="labctl-fault-") as scratch:
        faulty = faults.get(name).materialize(Path(scratch) / "room")
        honest_copy(faulty, dest)
    return dest


def own_copy(dest: Path) -> Path:
    """A verbatim copy of labctl's own clean room: base code, as a learner would hand it in."""
    shutil.copytree(ROOM, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest
