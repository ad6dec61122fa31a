"""No import circles among labctl's modules (the developers' guide: a package per concern,
lower layers never import higher ones).

Every module of the installed tree is read as source, not imported: `labctl/`, `labs/` as
`labctl.labs` and `clean_room/` as `labctl.clean_room`. Each `import` and `from ... import`
counts wherever it stands, inside a function body or an `if TYPE_CHECKING:` block included
(an import deferred into a function still ties the two modules together; it only hides the
circle from the first import), relative imports resolved against the importing module.

What an import points at:

- `import a.b.c` and `from a.b import c` where `a.b.c` is a module: that module.
- `from a.b import name` where `name` is not a module: `a.b` itself (a package's
  `__init__` when `a.b` is a package).
- The packages above a module are not counted as imported: Python runs `a/__init__.py`
  before `a.b`, but a package's `__init__` that imports its own submodules sits above them.
  A submodule that takes a name from its own package's `__init__` (`from labctl.isolation
  import X` inside `labctl.isolation.bwrap`) while that `__init__` imports the submodule
  is a circle, and is reported as one: it should import `X` from where `X` is defined.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TREES = (("labctl", "labctl"), ("labs", "labctl.labs"), ("clean_room", "labctl.clean_room"))


def modules() -> dict[str, Path]:
    """Every module of the installed tree, by its dotted name."""
    found: dict[str, Path] = {}
    for folder, package in TREES:
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = [package, *path.relative_to(ROOT / folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> dict[str, int]:
    """The modules of `known` that module `name` imports, each with the line of its first import."""
    is_package = path.name == "__init__.py"
    found: dict[str, int] = {}

    def add(target: str, line: int) -> None:
        if target in known and target != name:
            found.setdefault(target, line)

    for node in ast.walk(ast.parse(path.read_text("utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                add(submodule if submodule in known else source, node.lineno)
    return found


def graph() -> dict[str, dict[str, int]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def circles(edges: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def explain(component: list[str], edges: dict[str, dict[str, int]]) -> str:
    """A circle as the imports that close it: `a (line 12) -> b`, one per line."""
    members = set(component)
    known = modules()
    lines = [f"{len(component)} modules:"]
    for name in component:
        for target, line in sorted(edges[name].items()):
            if target in members:
                where = known[name].relative_to(ROOT)
                lines.append(f"  {name} -> {target}  ({where}:{line})")
    return "\n".join(lines)


def test_the_reader_finds_every_kind_of_import(tmp_path, monkeypatch):
    """A circle closed only inside a function, through a relative import, or through a
    package's `__init__` re-exporting a submodule's name is found."""
    tree = tmp_path / "labctl"
    (tree / "pkg").mkdir(parents=True)
    (tree / "__init__.py").write_text("")
    (tree / "low.py").write_text("def f():\n    from labctl import high\n")
    (tree / "high.py").write_text("from .low import f\n")
    (tree / "pkg" / "__init__.py").write_text("from labctl.pkg.sub import X\n")
    (tree / "pkg" / "sub.py").write_text("X = 1\n")
    (tree / "pkg" / "other.py").write_text("from labctl.pkg import X\nfrom . import sub\n")
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    monkeypatch.setattr(__import__(__name__), "TREES", (("labctl", "labctl"),))
    edges = graph()
    assert edges["labctl.low"] == {"labctl.high": 2}
    assert edges["labctl.high"] == {"labctl.low": 1}
    assert edges["labctl.pkg.other"] == {"labctl.pkg": 1, "labctl.pkg.sub": 2}
    assert circles(edges) == [["labctl.high", "labctl.low"]]
    (tree / "pkg" / "__init__.py").write_text("from labctl.pkg.other import X\n")
    assert sorted(circles(graph())) == [
        ["labctl.high", "labctl.low"],
        ["labctl.pkg", "labctl.pkg.other"],
    ]


def test_no_module_of_labctl_imports_itself_back():
    edges = graph()
    assert len(edges) > 150  # the whole tree was read
    found = circles(edges)
    assert not found, "\n\n".join(explain(c, edges) for c in found)
