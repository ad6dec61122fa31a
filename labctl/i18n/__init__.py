"""Learner-facing text: English source strings, translated through gettext catalogs.

`_("...")` translates a message where it is shown (command help, errors,
verdict words); given a `Msg` it renders it translated. Two markers keep text
that is defined before it is shown (lab declarations, figures) extractable
while identifiers stay out:

- `N_("...")` marks a static English string (a lab title, a metric's
  description, a column header) as a message; it returns the string unchanged,
  and the text is translated where it is shown, by `_(text)`.
- `Msg("... {name} ...", name=value)` is a message with values in it (a note
  with a measured number). The template is the message; the values are
  formatted in after translation, so a number is never part of a msgid.

Lab ids, metric names, JSON keys and evidence fields are identifiers, never
messages: they stay English in every language.

The language is English until `set_language` says otherwise; the CLI chooses
it once per invocation with `choose` (`--lang`, `LABCTL_LANG`, the locale).
Catalogs are the `.po` files under `locale/<lang>/LC_MESSAGES/labctl.po`, read
at first use (`labctl.i18n.po`); `scripts/i18n_extract.py` lists the
messages they must hold.
"""

from __future__ import annotations

import contextlib
import numbers
import os
from collections.abc import Callable, Iterator, Mapping
from functools import cache
from typing import Any

LANGUAGES = ("en", "zh")
SOURCE_LANGUAGE = "en"
DOMAIN = "labctl"

_current = SOURCE_LANGUAGE


def choose(option: str | None = None, environ: Mapping[str, str] | None = None) -> str:
    """The language of this invocation: `--lang`, else LABCTL_LANG, else the locale, else English.

    LABCTL_LANG and the locale may carry a region and encoding (`zh_CN.UTF-8`);
    of LC_ALL, LC_MESSAGES and LANG the first that is set decides, as in POSIX.
    A value naming no language of labctl falls through to the next source.
    """
    env = os.environ if environ is None else environ
    for value in (option, env.get("LABCTL_LANG")):
        found = _language_of(value)
        if found:
            return found
    for name in ("LC_ALL", "LC_MESSAGES", "LANG"):
        value = env.get(name)
        if value:
            return "zh" if value.lower().startswith("zh") else SOURCE_LANGUAGE
    return SOURCE_LANGUAGE


def _language_of(value: str | None) -> str | None:
    if not value:
        return None
    prefix = value.lower().replace("-", "_").split("_")[0].split(".")[0]
    return prefix if prefix in LANGUAGES else None


def set_language(language: str) -> str:
    """Make `language` the one `_` translates into; returns the previous one."""
    global _current
    if language not in LANGUAGES:
        raise ValueError(f"unknown language {language!r}; known: {', '.join(LANGUAGES)}")
    previous, _current = _current, language
    return previous


def language() -> str:
    return _current


@contextlib.contextmanager
def speaking(language: str) -> Iterator[None]:
    """`_` translates into `language` within the block: a document for tools is written in
    English whatever the screen speaks."""
    previous = set_language(language)
    try:
        yield
    finally:
        set_language(previous)


@cache
def catalog(lang: str) -> dict[str, str]:
    """msgid → msgstr of one language's catalog (empty for the source language)."""
    from labctl.i18n import po

    if lang == SOURCE_LANGUAGE:
        return {}
    return po.translations(po.parse(catalog_path(lang).read_text("utf-8"), f"{lang}/{DOMAIN}.po"))


def catalog_path(lang: str):
    # Imported here: the sandbox's worker imports this module at every start, and needs no
    # catalog (importlib.resources brings tempfile, shutil, random: 3 ms of each start).
    from importlib import resources

    return resources.files("labctl.i18n").joinpath(f"locale/{lang}/LC_MESSAGES/{DOMAIN}.po")


def _(message: str | Msg) -> str:
    """Translate `message` into the chosen language; a message without a translation stays English."""
    if isinstance(message, Msg):
        return message.render(_)
    if _current == SOURCE_LANGUAGE or not message:
        return message
    return catalog(_current).get(message, message)


def N_(message: str) -> str:
    """Mark `message` for extraction; translation happens where it is shown."""
    return message


def declared(text: str, /, **args: Any) -> Msg:
    """A text marked with `N_` where it is declared (a fixture's note, a table of
    templates), as a Msg with `args` formatted in when it is shown.

    For a declared text that ends up inside another Msg: it is translated when that
    one is shown. The text is extracted where `N_` marks it, not here.
    """
    # Built without calling Msg(...), which the extractor rightly asks to see with a literal.
    message = Msg.__new__(Msg)
    message.template, message.args = text, args
    return message


# The implementations a lab compares, by the names records and figures keep (identifiers),
# as a person reads them in a title or a column ("（参考实现）", never "（reference）"); "both"
# is `--impl both`. A Msg's value named `impl` that holds one of these names is shown so.
IMPLEMENTATIONS = {
    "reference": N_("reference"),
    "clean-room": N_("clean-room"),
    "both": N_("both"),
}


def implementation(name: str) -> str | Msg:
    """An implementation's name for a message: translated when shown, English in --json."""
    return declared(IMPLEMENTATIONS[name]) if name in IMPLEMENTATIONS else name


def message_data(text: str | Msg) -> str | dict:
    """A message as a record keeps it: plain text, or its template and values, to be shown
    later in any language (`labctl.report.collect.message`)."""
    if isinstance(text, Msg):
        return {"msg": text.template, "args": {k: _data(v) for k, v in text.args.items()}}
    return text


def _data(value: Any) -> Any:
    """A message's value as JSON holds it: a number as a number (numpy's too), a Msg as a
    message, anything else as its text."""
    if isinstance(value, Msg):
        return message_data(value)
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, (list, tuple)):
        return [_data(v) for v in value]
    return str(value)


def _chained(messages: list[str | Msg], link: Callable[[str | Msg, str | Msg], Msg]) -> str | Msg:
    """`messages` linked pairwise from the last, each translated when it is shown."""
    if not messages:
        return ""
    result = messages[-1]
    for message in reversed(messages[:-1]):
        result = link(message, result)
    return result


def joined(messages: list[str | Msg]) -> str | Msg:
    """Messages joined with "; " as one Msg, each translated when it is shown."""
    return _chained(messages, lambda first, rest: Msg("{first}; {rest}", first=first, rest=rest))


def listed(messages: list[str | Msg]) -> str | Msg:
    """Messages listed with ", " as one Msg, each translated when it is shown (Chinese lists
    with "、")."""
    return _chained(messages, lambda first, rest: Msg("{first}, {rest}", first=first, rest=rest))


class Msg:
    """A translatable template and its values: `Msg("ratio {r:.3f} at T={T}", r=0.04, T=4096)`."""

    __slots__ = ("args", "template")

    def __init__(self, template: str, /, **args: Any) -> None:
        self.template = template
        self.args = args

    def render(self, translate: Callable[[str], str] = lambda s: s) -> str:
        values = {k: _value(k, v, translate) for k, v in self.args.items()}
        return translate(self.template).format(**values)

    def __str__(self) -> str:
        return self.render()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Msg) and (self.template, self.args) == (other.template, other.args)

    def __hash__(self) -> int:
        return hash((self.template, tuple(sorted(self.args))))

    def __repr__(self) -> str:
        return f"Msg({self.template!r}, **{self.args!r})"


def _value(name: str, value: Any, translate: Callable[[str], str]) -> Any:
    """A Msg's value as shown: a Msg rendered, an implementation's name (`impl`) translated."""
    if isinstance(value, Msg):
        return value.render(translate)
    if name == "impl" and isinstance(value, str) and value in IMPLEMENTATIONS:
        return translate(IMPLEMENTATIONS[value])
    return value
