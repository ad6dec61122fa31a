"""Read and write gettext `.po` catalogs: the subset labctl's catalogs use.

A translator edits the `.po` with ordinary tools (Poedit, msgfmt, Babel); labctl
reads it as text at first use instead of shipping a compiled `.mo`, so there is
no binary to drift from its source. Supported: `msgid`/`msgstr` with continued
lines, C escapes, `#,` flags (`fuzzy`), comments; `msgctxt` and plurals are
refused because no message of labctl needs them.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass, field


class CatalogError(ValueError):
    """A `.po` catalog that cannot be read: labctl's own, as shipped or as a translator
    edited it, so a fault of the package, not of a learner's input. Not a `LabctlError`:
    that family translates its messages through the catalogs this module reads."""


@dataclass
class Entry:
    msgid: str
    msgstr: str
    flags: frozenset[str] = frozenset()
    comments: list[str] = field(default_factory=list)
    line: int = 0

    @property
    def fuzzy(self) -> bool:
        return "fuzzy" in self.flags


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\"}
_ESCAPE = re.compile(r"\\(.)")


def _unquote(text: str, where: str) -> str:
    text = text.strip()
    if len(text) < 2 or text[0] != '"' or text[-1] != '"':
        raise CatalogError(f"{where}: expected a quoted string, got {text!r}")

    def unescape(match: re.Match) -> str:
        if match[1] not in _ESCAPES:
            raise CatalogError(f"{where}: unknown escape \\{match[1]} in {text!r}")
        return _ESCAPES[match[1]]

    body = text[1:-1]
    if re.search(r'(?<!\\)(?:\\\\)*"', body):
        raise CatalogError(f"{where}: a quote inside {text!r} is not escaped")
    return _ESCAPE.sub(unescape, body)


def parse(text: str, name: str = "<po>") -> list[Entry]:
    """Every entry of a `.po` text, in order, the header (msgid "") included."""
    entries: list[Entry] = []
    flags: set[str] = set()
    comments: list[str] = []
    key: str | None = None
    parts: dict[str, list[str]] = {}
    start = 0

    def finish() -> None:
        nonlocal flags, comments, parts, key
        if parts:
            if "msgid" not in parts or "msgstr" not in parts:
                raise CatalogError(f"{name}:{start}: an entry needs both msgid and msgstr")
            entries.append(
                Entry("".join(parts["msgid"]), "".join(parts["msgstr"]), frozenset(flags),
                      comments, start)
            )  # fmt: skip
        flags, comments, parts, key = set(), [], {}, None

    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        where = f"{name}:{number}"
        if not line:
            finish()
        elif line.startswith("#,"):
            if parts:
                finish()
            flags |= {f.strip() for f in line[2:].split(",") if f.strip()}
        elif line.startswith("#"):
            if parts:
                finish()
            comments.append(line)
        elif line.startswith('"'):
            if key is None:
                raise CatalogError(f"{where}: a continued string outside an entry")
            parts[key].append(_unquote(line, where))
        else:
            keyword, _, rest = line.partition(" ")
            if keyword not in ("msgid", "msgstr"):
                raise CatalogError(f"{where}: {keyword} is not supported in labctl's catalogs")
            if keyword == "msgid" and parts:
                finish()
            if not parts:
                start = number
            if keyword in parts:
                raise CatalogError(f"{where}: {keyword} twice in one entry")
            key = keyword
            parts[key] = [_unquote(rest, where)]
    finish()
    return entries


def duplicates(entries: list[Entry]) -> list[Entry]:
    """Entries whose msgid an earlier entry already has (msgfmt refuses them; `translations` keeps the first)."""
    seen: set[str] = set()
    repeated = []
    for entry in entries:
        if entry.msgid in seen:
            repeated.append(entry)
        seen.add(entry.msgid)
    return repeated


def translations(entries: list[Entry]) -> dict[str, str]:
    """msgid → msgstr for the entries a program may use: not the header, not fuzzy, not empty."""
    usable = [e for e in entries if e.msgid and e.msgstr and not e.fuzzy]
    return {e.msgid: e.msgstr for e in reversed(usable)}


def quote(text: str) -> str:
    """A `.po` string literal; a text with line breaks is split after each, as msgmerge does."""
    escaped = (
        text.replace("\\", "\\\\").replace('"', '\\"').replace("\t", "\\t").replace("\n", "\\n\n")
    )
    lines = escaped.split("\n")
    if lines[-1] == "":
        lines.pop()
    if len(lines) == 1:
        return f'"{lines[0]}"'
    return '""\n' + "\n".join(f'"{line}"' for line in lines)


def format_entry(msgid: str, msgstr: str = "", comments: list[str] | None = None) -> str:
    head = "".join(f"{c}\n" for c in comments or ())
    return f"{head}msgid {quote(msgid)}\nmsgstr {quote(msgstr)}\n"


def placeholders(template: str) -> set[str]:
    """The names a template formats in: `{x:.3f}` and `{x!r}` are both `x`."""
    names = set()
    for _, name, _, _ in string.Formatter().parse(template):
        if name is not None:
            names.add(name.split(".")[0].split("[")[0])
    return names
