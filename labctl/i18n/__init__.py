"""Learner-facing text: English source strings, translated through gettext catalogs.

`_("...")` translates a message where it is shown (command help, errors,
verdict words). Two markers keep text that is defined before it is shown
(lab declarations, figures) extractable while identifiers stay out:

- `N_("...")` marks a static English string (a lab title, a metric's
  description, a column header) as a message; it returns the string unchanged,
  and the text is translated where it is shown.
- `Msg("... {name} ...", name=value)` is a message with values in it (a note
  with a measured number). The template is the message; the values are
  formatted in after translation, so a number is never part of a msgid.

Lab ids, metric names, JSON keys and evidence fields are identifiers, never
messages: they stay English in every language.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _(message: str) -> str:
    """Translate `message` into the chosen language (English until a catalog says otherwise)."""
    return message


def N_(message: str) -> str:
    """Mark `message` for extraction; translation happens where it is shown."""
    return message


class Msg:
    """A translatable template and its values: `Msg("ratio {r:.3f} at T={T}", r=0.04, T=4096)`."""

    __slots__ = ("args", "template")

    def __init__(self, template: str, /, **args: Any) -> None:
        self.template = template
        self.args = args

    def render(self, translate: Callable[[str], str] = lambda s: s) -> str:
        values = {k: v.render(translate) if isinstance(v, Msg) else v for k, v in self.args.items()}
        return translate(self.template).format(**values)

    def __str__(self) -> str:
        return self.render()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Msg) and (self.template, self.args) == (other.template, other.args)

    def __hash__(self) -> int:
        return hash((self.template, tuple(sorted(self.args))))

    def __repr__(self) -> str:
        return f"Msg({self.template!r}, **{self.args!r})"
