"""Python source as normalised tokens: what two programs share once a copier's mechanical
rewrites are undone.

MOSS and JPlag compare programs as token streams, not text: winnowing
(Schleimer, Wilkerson and Aiken, 2003) hashes K-grams of tokens after
"removing whitespace, capitalisation, punctuation" and "replacing all variable
names by V", and JPlag's front ends emit one token per syntactic construct,
never the names or the layout. labctl does the same from Python's own syntax
tree (`labctl.pysource.parse`; nothing is run):

- every identifier (a variable, an argument, a function, an attribute, a
  keyword argument's name, an imported name) is the one token `V`;
- parentheses, layout, comments, docstrings and type annotations are not in the
  tree, so wrapping every name in parentheses, re-indenting or annotating
  changes nothing; string literals are one token `S`, numbers keep their value;
- unused code is removed from every function before its tokens are taken:
  statements without effect (`pass`, a bare constant or name) and assignments
  to local names the function never reads, again until none is left, and
  blocks that hold nothing else once they are gone. Padding a copied function
  with dead statements changes nothing either.

Each token carries its source line, so a match is shown where it lies. A file
that does not parse is lexed instead (Pygments), with the same rules for
names, strings, parentheses and layout, and without the pruning.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from labctl.pysource import UNPARSABLE, parse

Token = tuple[str, int]  # (normalised token, source line)

NAME = "V"
STRING = "S"
# A function that reads its own locals by name: none of its assignments can be called unused.
_INTROSPECTION = frozenset({"locals", "vars", "eval", "exec", "globals", "dir"})
_FIXPOINT = 32  # rounds of pruning at most: each round removes a statement or ends


@dataclass
class Unit:
    """A stretch of a file compared as a whole: a function (or method) with what it nests,
    or the file's code outside its functions."""

    name: str | None  # the function's name (`Class.method` for a method); None: module code
    first: int  # its first and last line
    last: int
    tokens: list[Token] = field(default_factory=list)
    calls: frozenset[str] = frozenset()  # names it calls (`f(...)`), to find its helpers


# ---- pruning unused code ------------------------------------------------------------------


def _loaded(node: ast.AST) -> set[str]:
    names: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and not isinstance(sub.ctx, ast.Store):
            names.add(sub.id)
        elif isinstance(sub, (ast.Global, ast.Nonlocal)):
            names.update(sub.names)
    return names


def _targets_unused(targets: list[ast.expr], used: set[str]) -> bool:
    for target in targets:
        if isinstance(target, ast.Name):
            if target.id in used:
                return False
        elif isinstance(target, (ast.Tuple, ast.List)):
            if not _targets_unused(list(target.elts), used):
                return False
        elif isinstance(target, ast.Starred):
            if not _targets_unused([target.value], used):
                return False
        else:
            return False  # an attribute or an item: it changes something outside
    return True


def _constant_false(test: ast.expr) -> bool:
    return isinstance(test, ast.Constant) and not test.value


def _dead(stmt: ast.stmt, used: set[str]) -> bool:
    if isinstance(stmt, ast.Pass):
        return True
    if isinstance(stmt, ast.Expr):
        return isinstance(stmt.value, (ast.Constant, ast.Name))
    if isinstance(stmt, ast.Assign):
        return _targets_unused(stmt.targets, used)
    if isinstance(stmt, (ast.AugAssign, ast.AnnAssign)):
        return _targets_unused([stmt.target], used)
    if isinstance(stmt, (ast.If, ast.While)):
        return (_constant_false(stmt.test) or not stmt.body) and not stmt.orelse
    if isinstance(stmt, (ast.For, ast.AsyncFor)):
        return not stmt.body and not stmt.orelse and _targets_unused([stmt.target], used)
    return False


def _prune_body(body: list[ast.stmt], used: set[str]) -> tuple[list[ast.stmt], bool]:
    kept: list[ast.stmt] = []
    changed = False
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            kept.append(stmt)  # pruned as a function of its own
            continue
        for name in ("body", "orelse", "finalbody"):
            inner = getattr(stmt, name, None)
            if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                pruned, inner_changed = _prune_body(inner, used)
                setattr(stmt, name, pruned)
                changed |= inner_changed
        if isinstance(stmt, ast.Try):
            for handler in stmt.handlers:
                handler.body, inner_changed = _prune_body(handler.body, used)
                changed |= inner_changed
        if _dead(stmt, used):
            changed = True
            continue
        kept.append(stmt)
    return kept, changed


def prune(function: ast.FunctionDef | ast.AsyncFunctionDef, used: set[str] | None = None) -> None:
    """Remove `function`'s unused code in place (see the module docstring); `used`: the names
    it reads, when the caller has them already."""
    used = _loaded(function) if used is None else used
    if _INTROSPECTION & used:
        return
    for _round in range(_FIXPOINT):
        function.body, changed = _prune_body(function.body, used)
        if not changed:
            return
        used = _loaded(function)


# ---- tokens from the tree -----------------------------------------------------------------

_NAMED = (
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
    ast.Attribute,
    ast.keyword,
    ast.Global,
    ast.Nonlocal,
    ast.ImportFrom,
)
_SKIP_FIELDS = frozenset({"ctx", "type_comment", "annotation", "returns", "kind"})
# Nodes that end a block: their tokens are closed by an `end` token, as a brace would.
_BLOCKS = (
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
    ast.If,
    ast.For,
    ast.AsyncFor,
    ast.While,
    ast.With,
    ast.AsyncWith,
    ast.Try,
    ast.ExceptHandler,
)


def _constant(value: object) -> str:
    if isinstance(value, (str, bytes)):
        return STRING
    return repr(value)


def _emit(root: ast.AST, line: int, out: list[Token]) -> None:
    """`root`'s tokens in source order (pre-order), appended to `out`; iterative, so a
    learner's 10,000-term expression costs no recursion."""
    stack: list[tuple[ast.AST | None, int]] = [(root, line)]
    while stack:
        node, line = stack.pop()
        if node is None:
            out.append(("end", line))
            continue
        line = getattr(node, "lineno", line)
        if isinstance(node, ast.Constant):
            out.append((_constant(node.value), line))
            continue
        if isinstance(node, ast.JoinedStr):
            out.append((STRING, line))
            continue
        if isinstance(node, (ast.Name, ast.arg, ast.alias)):
            out.append((NAME, line))
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # a docstring, or a bare constant: no effect
        out.append((type(node).__name__, line))
        if isinstance(node, _NAMED):
            out.append((NAME, line))  # its name, the attribute's, the keyword's, the module's
        if isinstance(node, _BLOCKS):
            stack.append((None, getattr(node, "end_lineno", None) or line))
        children: list[ast.AST] = []
        for name, value in ast.iter_fields(node):
            if name in _SKIP_FIELDS:
                continue
            for child in value if isinstance(value, list) else [value]:
                if isinstance(child, ast.AST):
                    children.append(child)
        stack.extend((child, line) for child in reversed(children))


def _function_unit(node: ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> Unit:
    # One walk: the names it calls (to find its helpers), reads, and the functions it nests.
    calls: set[str] = set()
    used: set[str] = set()
    nested = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            if not isinstance(sub.ctx, ast.Store):
                used.add(sub.id)
        elif isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name):
            calls.add(sub.func.id)
        elif isinstance(sub, (ast.Global, ast.Nonlocal)):
            used.update(sub.names)
        elif isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)) and sub is not node:
            nested.append(sub)
    for inner in nested:
        prune(inner)
    prune(node, used)
    unit = Unit(name, node.lineno, node.end_lineno or node.lineno, calls=frozenset(calls))
    _emit(node, node.lineno, unit.tokens)
    return unit


@dataclass
class Parsed:
    """A file's units, and what each of its top-level names is bound to (the last binding
    wins, as when the module runs): `("def", unit index)`, `("name", other name)`,
    `("import", module, name, level)`; `star` lists the modules imported with `*`."""

    units: list[Unit] = field(default_factory=list)
    bindings: dict[str, tuple] = field(default_factory=dict)
    star: list[tuple[str, int]] = field(default_factory=list)


def _bind(parsed: Parsed, node: ast.stmt) -> None:
    if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name):
        for target in node.targets:
            if isinstance(target, ast.Name):
                parsed.bindings[target.id] = ("name", node.value.id)
    elif isinstance(node, ast.ImportFrom):
        for alias in node.names:
            if alias.name == "*":
                parsed.star.append((node.module or "", node.level))
            else:
                parsed.bindings[alias.asname or alias.name] = (
                    "import",
                    node.module or "",
                    alias.name,
                    node.level,
                )


def parse_file(text: str) -> Parsed:
    """The units of one file, in order (each function and method, then the module's own
    code), and its bindings; a file that does not parse is one unit of lexed tokens."""
    parsed = Parsed()
    try:
        tree = parse(text)
    except UNPARSABLE:
        tokens = lexed(text)
        if tokens:
            parsed.units.append(Unit(None, 1, tokens[-1][1], tokens))
        return parsed
    module = Unit(None, 1, 1)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            parsed.bindings[node.name] = ("def", len(parsed.units))
            parsed.units.append(_function_unit(node, node.name))
            continue
        _bind(parsed, node)
        if isinstance(node, ast.ClassDef):
            parsed.bindings.pop(node.name, None)
            methods = [
                n for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            ]
            for method in methods:
                parsed.units.append(_function_unit(method, f"{node.name}.{method.name}"))
            # The class's own statements are module code; its methods are units of their own.
            node.body = [n for n in node.body if n not in methods]
        _emit(node, node.lineno, module.tokens)
    if module.tokens:
        module.first = min(line for _, line in module.tokens)
        module.last = max(line for _, line in module.tokens)
        parsed.units.append(module)
    return parsed


def lexed(text: str) -> list[Token]:
    """Tokens by the lexer, for a file that does not parse: names `V`, strings `S`; no
    comment, docstring, parenthesis or layout."""
    from pygments.lexers.python import PythonLexer
    from pygments.token import Comment, Name, String, Text

    found: list[Token] = []
    line = 1
    for _, kind, value in PythonLexer().get_tokens_unprocessed(text):
        here = line
        line += value.count("\n")
        stripped = value.strip()
        if kind in Comment or kind in Text or kind in String.Doc or not stripped:
            continue
        if stripped in ("(", ")"):
            continue
        if kind in Name:
            found.append((NAME, here))
        elif kind in String:
            if not found or found[-1][0] != STRING:
                found.append((STRING, here))
        else:
            found.append((stripped, here))
    return found
