"""Find every message labctl shows, and check a catalog holds a translation of each.

A development script, not part of the library: it reads the command tree, and the CLI sits
above everything the library holds, so inside labctl it would close a circle of imports.

Messages come from three places: the source, where `_("...")`, `N_("...")` and
`Msg("...", ...)` mark them and where a pydantic `Field(description="...")`
describes a lab parameter (read with `ast`, so nothing is imported), the
command tree, whose help texts typer takes from docstrings and `help=`, and the
contract data's prose (`contract_v*.json`).

    python scripts/i18n_extract.py                 # a .pot of every message, on stdout
    python scripts/i18n_extract.py --check zh      # what the zh catalog lacks; exit 1 if anything
    python scripts/i18n_extract.py --update zh     # append the missing msgids, empty, to zh's .po
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from dataclasses import dataclass
from importlib import util
from pathlib import Path

from labctl import pysource
from labctl.i18n import DOMAIN, catalog_path, po
from labctl.i18n.po import placeholders

MARKERS = ("_", "N_", "Msg")
PACKAGE = Path(util.find_spec("labctl").origin).resolve().parent
# labs/ and clean_room/ sit beside labctl/ in the repository and inside it once installed.
SUBPACKAGES = ("labs", "clean_room")


def _sources(root: Path) -> list[Path]:
    """Every .py of the package under `root`, with the subpackages wherever they lie."""
    roots = [root]
    if root == PACKAGE:
        for name in SUBPACKAGES:
            spec = util.find_spec(f"labctl.{name}")
            roots.append(Path(spec.origin).resolve().parent)
    return sorted({path.resolve() for top in roots for path in top.rglob("*.py")})


@dataclass(frozen=True)
class Found:
    msgid: str
    where: str


def source_messages(root: Path = PACKAGE) -> tuple[list[Found], list[str]]:
    """Marked messages under `root`, and the marks whose text is not a literal (a bug for N_/Msg)."""
    found: list[Found] = []
    problems: list[str] = []
    for path in _sources(root):
        tree = pysource.parse(path.read_text("utf-8"), str(path))
        shown = path.relative_to(root.parent).as_posix()
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
                continue
            if node.func.id == "Field":
                # a parameter's description is shown by `labctl show` and in --set errors
                for keyword in node.keywords:
                    if keyword.arg == "description" and isinstance(keyword.value, ast.Constant):
                        found.append(Found(keyword.value.value, f"{shown}:{node.lineno}"))
                continue
            if node.func.id not in MARKERS or not node.args:
                continue
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                found.append(Found(first.value, f"{shown}:{node.lineno}"))
            elif node.func.id != "_":
                problems.append(
                    f"{shown}:{node.lineno}: {node.func.id}() needs a string literal, so the "
                    "message can be extracted (use Msg with values for a text with numbers)"
                )
    return found, problems


def help_messages() -> list[Found]:
    """Every help text of the command tree, as typer builds it."""
    import typer

    from labctl.cli.main import app

    found: list[Found] = []

    def walk(command, path: str) -> None:
        for text in (command.help, command.short_help):
            if text:
                found.append(Found(text, f"help: {path}"))
        for param in command.params:
            text = getattr(param, "help", None)
            if text:
                found.append(Found(text, f"help: {path} {param.name}"))
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            walk(sub, f"{path} {name}")

    walk(typer.main.get_command(app), "labctl")
    return found


def contract_messages() -> list[Found]:
    """The contract's prose (conventions, meanings, returns, parameter shapes), every version.

    `contract show` and the stubs of `clean-room init` show them translated; the data
    files stay as frozen (a translation never touches the pinned text).
    """
    found: list[Found] = []
    for path in sorted((PACKAGE / "data").glob("contract_v*.json")):
        raw = json.loads(path.read_text("utf-8"))
        where = f"labctl/data/{path.name}"
        found += [Found(text, f"{where} conventions") for text in raw.get("conventions", ())]
        for fn in raw.get("functions", ()):
            texts = [fn.get("returns"), fn.get("meaning")]
            texts += [p.get("shape") for p in fn.get("params", ())]
            found += [Found(t, f"{where} {fn.get('name')}") for t in texts if t]
    return found


def all_messages() -> tuple[dict[str, list[str]], list[str]]:
    """msgid → where it is used, and the problems found while extracting."""
    found, problems = source_messages()
    messages: dict[str, list[str]] = {}
    for item in [*found, *help_messages(), *contract_messages()]:
        messages.setdefault(item.msgid, []).append(item.where)
    return messages, problems


def check(lang: str, catalog_text: str | None = None) -> list[str]:
    """One line per gap in `lang`'s catalog (or in `catalog_text`), naming the msgid and its use."""
    messages, problems = all_messages()
    if catalog_text is None:
        catalog_text = catalog_path(lang).read_text("utf-8")
    parsed = po.parse(catalog_text, lang)
    entries = {e.msgid: e for e in reversed(parsed)}
    gaps = list(problems)
    gaps += [f"duplicate msgid at line {e.line}: {e.msgid!r}" for e in po.duplicates(parsed)]
    for msgid, where in messages.items():
        entry = entries.get(msgid)
        at = f" (used at {where[0]})"
        if entry is None:
            gaps.append(f"missing: {msgid!r}{at}")
        elif not entry.msgstr:
            gaps.append(f"empty translation: {msgid!r}{at}")
        elif entry.fuzzy:
            gaps.append(f"fuzzy translation: {msgid!r}{at}")
        else:
            try:
                ours, theirs = placeholders(msgid), placeholders(entry.msgstr)
            except ValueError as exc:
                gaps.append(f"malformed translation of {msgid!r}: {exc}")
                continue
            if ours != theirs:
                gaps.append(
                    f"placeholders differ in {msgid!r}: msgid has {sorted(ours)}, "
                    f"msgstr has {sorted(theirs)}"
                )
    return gaps


def obsolete(lang: str) -> list[str]:
    """msgids the catalog translates that nothing shows any more."""
    messages, _ = all_messages()
    entries = po.parse(catalog_path(lang).read_text("utf-8"), lang)
    return [e.msgid for e in entries if e.msgid and e.msgid not in messages]


def pot() -> str:
    messages, _ = all_messages()
    header = po.format_entry(
        "", f"Project-Id-Version: {DOMAIN}\\nContent-Type: text/plain; charset=UTF-8\\n"
    )
    return header + "".join(
        "\n" + po.format_entry(msgid, "", [f"#: {w}" for w in where[:3]])
        for msgid, where in messages.items()
    )


def update(lang: str) -> list[str]:
    """Append every missing msgid to `lang`'s catalog with an empty msgstr; returns them."""
    messages, _ = all_messages()
    path = Path(str(catalog_path(lang)))
    text = path.read_text("utf-8")
    known = {e.msgid for e in po.parse(text, lang)}
    missing = [m for m in messages if m not in known]
    if missing:
        block = "\n# ---- new messages: translate, then move into their area's block ----\n"
        block += "".join("\n" + po.format_entry(m, "", [f"#: {messages[m][0]}"]) for m in missing)
        path.write_text(text.rstrip("\n") + "\n" + block, "utf-8")
    return missing


def prune(lang: str) -> list[str]:
    """Remove from `lang`'s catalog every entry nothing shows any more; returns their msgids.
    An area's heading comment stays when its first entry goes."""
    gone = set(obsolete(lang))
    path = Path(str(catalog_path(lang)))
    kept, removed = [], []
    for block in path.read_text("utf-8").split("\n\n"):
        entries = po.parse(block, lang) if "msgid " in block else []
        if entries and entries[0].msgid in gone:
            removed.append(entries[0].msgid)
            heading = [line for line in block.split("\n") if line.startswith("# ")]
            if heading:
                kept.append("\n".join(heading))
            continue
        kept.append(block)
    if removed:
        path.write_text("\n\n".join(kept), "utf-8")
    return removed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/i18n_extract.py", description=__doc__)
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--check", metavar="LANG", help="list what LANG's catalog lacks")
    group.add_argument("--update", metavar="LANG", help="append missing msgids to LANG's catalog")
    group.add_argument("--prune", metavar="LANG", help="remove what nothing shows from LANG's")
    args = parser.parse_args(argv)
    if args.check:
        gaps = check(args.check)
        for line in gaps:
            print(line)
        for msgid in obsolete(args.check):
            print(f"obsolete (nothing shows it): {msgid!r}", file=sys.stderr)
        return 1 if gaps else 0
    if args.update:
        for msgid in update(args.update):
            print(f"added: {msgid!r}")
        return 0
    if args.prune:
        for msgid in prune(args.prune):
            print(f"removed: {msgid!r}")
        return 0
    sys.stdout.write(pot())
    return 0


if __name__ == "__main__":
    sys.exit(main())
