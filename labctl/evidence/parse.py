"""Load an evidence file (YAML or JSON) safely, or say in one line why it cannot be read.

Only safe YAML loading is used: `EvidenceLoader` is a `yaml.SafeLoader` (what
`yaml.safe_load` uses) that never constructs a Python object from a tag, and
further refuses aliases (`*name`, the billion-laughs bomb), nesting deeper than
`MAX_DEPTH` and more than `MAX_NODES` nodes. JSON is YAML, so one loader reads
both. Before parsing: a size limit, and text only (no NUL bytes, valid UTF-8).

A file that cannot be read as a document gives one `Problem` on the field
`file`; a missing file or a directory is a usage error (exit 2).
"""

from __future__ import annotations

import dataclasses
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import ComposerError

from labctl.errors import UsageError
from labctl.i18n import N_, Msg, _
from labctl.inputfile import read_regular

MAX_BYTES = 1 << 20  # 1 MiB: a filled template is about 3 KiB
MAX_DEPTH = 32  # a record nests four levels deep
MAX_NODES = 50_000


# Characters that act on a terminal instead of showing: C0/C1 controls (ESC starts a
# sequence that can clear the screen or retitle the window), format characters (bidi
# overrides such as U+202E reorder what follows), line and paragraph separators.
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})


def escaped(text: str) -> str:
    """`text` with every control, format or separator character written as an escape."""
    out = []
    for char in text:
        if unicodedata.category(char) in _HIDDEN_CATEGORIES:
            code = ord(char)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            out.append(char)
    return "".join(out)


@dataclass(frozen=True)
class Problem:
    """One reason a record is refused (or, as a warning, looked at twice): `field: reason`.

    `metric` and `impl` name the claim a `metrics[i]...` problem is about, so a grader reads
    `metrics[0] (future_weight_max, clean-room): actual 0.5 does not satisfy <=1e-12`. Every
    text is stored escaped: a submission's field names and values reach a grader's terminal.

    The reason is given as a `Msg` (or a text marked with `N_`): `reason` keeps it in English,
    for `--json`, receipts and `str()`; `shown` keeps the message, which `shown_line` renders
    in the chosen language for the terminal.
    """

    field: str
    reason: str
    metric: str | None = None
    impl: str | None = None
    shown: str | Msg = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "shown", self.reason)
        object.__setattr__(self, "reason", str(self.reason))
        for name in ("field", "reason", "metric", "impl"):
            value = getattr(self, name)
            if isinstance(value, str):
                object.__setattr__(self, name, escaped(value))

    def __str__(self) -> str:
        return self.line(self.reason)

    def shown_line(self) -> str:
        """`field: reason` with the reason in the chosen language (escaped, as `reason` is)."""
        return self.line(escaped(_(self.shown)))

    def line(self, reason: str) -> str:
        if self.metric is None:
            return f"{self.field}: {reason}"
        claim = ", ".join(x for x in (self.metric, self.impl) if x)
        head, dot, rest = self.field.partition("].")
        if not dot:
            return f"{self.field} ({claim}): {reason}"
        return f"{head}] ({claim}): {rest} {reason}"

    def to_json(self) -> dict:
        named = {k: v for k, v in (("metric", self.metric), ("impl", self.impl)) if v is not None}
        return {"field": self.field, "reason": self.reason, **named}


def one_line(text: object) -> str:
    return " ".join(str(text).split())


class _Refused(ComposerError):
    """A document the loader refuses by labctl's rules, its reason kept as a message to show
    translated (PyYAML's own errors are shown as PyYAML words them)."""

    def __init__(self, message: Msg, mark) -> None:  # type: ignore[no-untyped-def]
        super().__init__(None, None, str(message), mark)
        self.message = message


class EvidenceLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` without aliases, with depth and node limits, and YAML 1.2 floats."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self._depth = 0
        self._nodes = 0

    def compose_node(self, parent, index):  # type: ignore[no-untyped-def]
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise _Refused(Msg("aliases (*name) are not allowed in evidence"), mark)
        mark = self.peek_event().start_mark
        self._nodes += 1
        if self._nodes > MAX_NODES:
            raise _Refused(Msg("more than {n} nodes", n=MAX_NODES), mark)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _Refused(Msg("nested deeper than {n} levels", n=MAX_DEPTH), mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node, deep=False):  # type: ignore[no-untyped-def]
        # PyYAML (and json.loads) keep the last of two equal keys: a claim could be written
        # twice, one value for a reader and another for labctl. Refuse instead.
        if isinstance(node, yaml.MappingNode):
            first: dict[Any, Any] = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    seen = first.setdefault(key, key_node.start_mark)
                except TypeError:
                    continue  # an unhashable key: the constructor names that problem
                if seen is not key_node.start_mark:
                    raise _Refused(
                        Msg(
                            "duplicate key {key} (first at line {line})",
                            key=repr(key),
                            line=seen.line + 1,
                        ),
                        key_node.start_mark,
                    )
        return super().construct_mapping(node, deep=deep)


# YAML 1.1 (PyYAML) reads `1e-5` as a string: it wants a dot and a signed exponent.
# JSON and YAML 1.2 write small numbers that way, so read them as floats too.
EvidenceLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:0|[1-9][0-9]*)(?:\.[0-9]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def read_bytes(path: Path, limit: int = MAX_BYTES) -> bytes | None:
    """The file's bytes, or None when it is larger than `limit` (never reads more than that)."""
    if not path.exists() and not path.is_symlink():
        raise UsageError(Msg("{path}: no such file", path=str(path)))
    if path.is_dir():
        raise UsageError(Msg("{path}: is a directory, not an evidence file", path=str(path)))
    try:
        data = read_regular(path, limit)
    except OSError as exc:
        raise UsageError(
            Msg("{path}: cannot read ({error})", path=str(path), error=exc.strerror or str(exc))
        ) from None
    return data


def decode(raw: bytes) -> tuple[str | None, Problem | None]:
    """Text from `raw`, or the one problem that makes it not a text document."""
    if b"\x00" in raw:
        return None, Problem("file", N_("binary data (NUL bytes), not a YAML or JSON text"))
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        return None, Problem(
            "file",
            Msg(
                "not UTF-8 text (byte 0x{byte:02x} at offset {offset})",
                byte=raw[exc.start],
                offset=exc.start,
            ),
        )
    if not text.strip():
        return None, Problem("file", N_("empty"))
    return text, None


def parse_text(text: str) -> tuple[Any, Problem | None]:
    """The one document in `text`, or the problem (with line and column) that stops it."""
    loader = None
    try:
        loader = EvidenceLoader(text)
        data = loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        parts = [p for p in (exc.context, exc.problem) if p]
        what = (
            exc.message if isinstance(exc, _Refused) else one_line(", ".join(parts) or "malformed")
        )
        if mark:
            reason = Msg(
                "malformed YAML/JSON at line {line}, column {column}: {what}",
                line=mark.line + 1,
                column=mark.column + 1,
                what=what,
            )
        else:
            reason = Msg("malformed YAML/JSON: {error}", error=what)
        return None, Problem("file", reason)
    except yaml.reader.ReaderError as exc:  # a control character: a position, no mark
        line = text.count("\n", 0, exc.position) + 1
        column = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        return None, Problem(
            "file",
            Msg(
                "malformed YAML/JSON at line {line}, column {column}: "
                "character U+{character:04X} is not allowed",
                line=line,
                column=column,
                character=exc.character,
            ),
        )
    except yaml.YAMLError as exc:
        return None, Problem("file", Msg("malformed YAML/JSON: {error}", error=one_line(exc)))
    except (ValueError, TypeError, OverflowError, RecursionError, MemoryError) as exc:
        # e.g. an integer of more digits than Python converts
        return None, Problem(
            "file",
            Msg(
                "not readable: {kind}: {error}",
                kind=type(exc).__name__,
                error=one_line(exc)[:200],
            ),
        )
    finally:
        if loader is not None:
            loader.dispose()
    if data is None:
        return None, Problem("file", N_("no document (empty, or only comments)"))
    surrogate = lone_surrogate(data)
    if surrogate is not None:
        return None, Problem("file", surrogate)
    return data, None


_SURROGATE = re.compile("[\ud800-\udfff]")


def lone_surrogate(data: Any) -> Msg | None:
    """Why `data` cannot be kept, when a text in it holds a lone surrogate: YAML's and JSON's
    `\\ud800` escape reads as half a character, which UTF-8 cannot encode; the record (or the
    quiz's) then ended in an internal error when it was written."""
    pending = [data]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, str) and _SURROGATE.search(item):
            return Msg(
                "the text {text} holds a lone surrogate, half of a character: write the "
                "character itself",
                text=f"'{escaped(item.encode('utf-8', 'backslashreplace').decode())[:80]}'",
            )
    return None


@dataclass(frozen=True)
class Loaded:
    """A file read for checking: its bytes, and its data or the one problem that stopped it."""

    path: Path
    raw: bytes
    data: Any
    problem: Problem | None


def load(path: Path, limit: int = MAX_BYTES) -> Loaded:
    raw = read_bytes(path, limit)
    if raw is None:
        return Loaded(
            path, b"", None, Problem("file", Msg("larger than the {limit} byte limit", limit=limit))
        )
    text, problem = decode(raw)
    if problem:
        return Loaded(path, raw, None, problem)
    data, problem = parse_text(text)
    return Loaded(path, raw, data, problem)
