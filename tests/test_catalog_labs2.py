"""The Chinese catalog covers every message of the second-wave labs, placeholders intact."""

from __future__ import annotations

import ast
import re
import string
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CATALOG = ROOT / "labctl" / "i18n" / "locale" / "zh" / "LC_MESSAGES" / "labctl.po"
MODULES = ("tiled_attention", "sliding_window", "decoder", "attention_inspect")


def unquote(text: str) -> str:
    return re.sub(r'\\(["\\n])', lambda m: "\n" if m[1] == "n" else m[1], text)


def catalog() -> dict[str, str]:
    """msgid -> msgstr, joining continued lines."""
    entries: dict[str, str] = {}
    key, parts = None, {"msgid": [], "msgstr": []}
    for line in [*CATALOG.read_text("utf-8").splitlines(), ""]:
        match = re.match(r'^(msgid|msgstr) "(.*)"$', line)
        if match:
            key = match[1]
            parts[key] = [match[2]]
        elif line.startswith('"') and key:
            parts[key].append(line[1:-1])
        elif not line.strip() and parts["msgid"]:
            entries[unquote("".join(parts["msgid"]))] = unquote("".join(parts["msgstr"]))
            key, parts = None, {"msgid": [], "msgstr": []}
    return entries


def messages(module: str) -> list[str]:
    tree = ast.parse((ROOT / "labs" / f"{module}.py").read_text("utf-8"))
    return [
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("N_", "Msg")
        and isinstance(node.args[0], ast.Constant)
    ]


def fields(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


@pytest.mark.parametrize("module", MODULES)
def test_every_message_is_translated_with_its_placeholders(module):
    zh = catalog()
    for message in messages(module):
        assert zh.get(message), f"no Chinese for {message!r}"
        assert fields(zh[message]) == fields(message), message
