"""Text that came from a learner, made safe to show on a terminal and in a spreadsheet.

A learner chooses their exception messages, printed output, file and folder
names: an ESC or OSC sequence in them would drive the grader's terminal, a
bidi control would reorder what the grader reads, a name that is not UTF-8
would stop the output (Python holds its bytes as lone surrogates). `shown`
writes each such character as a visible escape (`\\x1b`, `\\u202e`, a name's
raw byte as `\\xff`); `cell` also keeps a spreadsheet from reading a cell as
a formula. JSON documents keep the exact text (JSON escapes it itself), but
for names that are not UTF-8, which JSON cannot carry: `name` gives their
escaped form.

Standard library only, and no import of labctl: any layer may use it.
"""

from __future__ import annotations

import os
import re

# C0 and C1 controls (ESC and the OSC/CSI introducers among them), DEL, the Unicode bidi
# controls and line separators, and lone surrogates (a name's undecodable bytes).
_BIDI = "\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_UNSAFE = re.compile(f"[\x00-\x1f\x7f-\x9f{_BIDI}\ud800-\udfff]")
# The same, less newline and tab: for prose that may hold several lines.
_UNSAFE_IN_LINES = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI}\ud800-\udfff]")
_FORMULA = ("=", "+", "-", "@", "\t", "\r")


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:
        return f"\\x{code - 0xDC00:02x}"  # surrogateescape: the byte the name really holds
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def shown(text: str, lines: bool = False) -> str:
    """`text` with every control, bidi and undecodable character escaped.

    With `lines`, newlines and tabs are kept (a message of several lines)."""
    return (_UNSAFE_IN_LINES if lines else _UNSAFE).sub(_escape, text)


def name(raw: str | bytes) -> str:
    """A file or folder name as valid, one-line text: undecodable bytes and controls escaped."""
    return shown(os.fsdecode(raw))


def json_text(text: str) -> str:
    """A JSON document (`json.dumps(..., ensure_ascii=False)`) as text UTF-8 can carry.

    A lone surrogate, which only a string of the document holds, becomes its JSON
    escape (`\\udcff`): a JSON reader gets the exact text back."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def valid(value: object) -> object:
    """`value` (a tree of lists, tuples and dicts) with every lone surrogate in its text
    written as `\\udcff`: text from another process that UTF-8 can always encode."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {valid(k): valid(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(valid(v) for v in value)
    return value


def cell(value: object) -> object:
    """A spreadsheet cell: text escaped to one line, and never the start of a formula."""
    if not isinstance(value, str):
        return value
    value = shown(value)
    return "'" + value if value.startswith(_FORMULA) else value
