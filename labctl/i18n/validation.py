"""pydantic's refusals as labctl's messages: by error type and its values, never its English.

pydantic words each error in English (`Input should be greater than or equal to
2`). A refusal is shown from the error's `type` and `ctx` instead, through the
catalog, so a Chinese learner reads it in Chinese. A validator that raises
`ValueError(Msg(...))` (a lab's cross-field rule) is shown as that message; an
error of a type not known here is named by its type (an identifier), never by
pydantic's sentence.
"""

from __future__ import annotations

import re
from typing import Any

from labctl.i18n import N_, Msg, declared
from labctl.i18n.po import placeholders

# type → message; the placeholders are the error's ctx keys.
MESSAGES = {
    "greater_than_equal": N_("should be at least {ge}"),
    "greater_than": N_("should be greater than {gt}"),
    "less_than_equal": N_("should be at most {le}"),
    "less_than": N_("should be less than {lt}"),
    "multiple_of": N_("should be a multiple of {multiple_of}"),
    "int_parsing": N_("should be an integer"),
    "int_type": N_("should be an integer"),
    "int_from_float": N_("should be an integer, not a fraction"),
    "float_parsing": N_("should be a number"),
    "float_type": N_("should be a number"),
    "finite_number": N_("should be a finite number"),
    "bool_parsing": N_("should be true or false"),
    "bool_type": N_("should be true or false"),
    "string_type": N_("should be text"),
    "string_too_short": N_("should have at least {min_length} characters"),
    "string_too_long": N_("should have at most {max_length} characters"),
    "list_type": N_("should be a list"),
    "dict_type": N_("should be a mapping"),
    "model_type": N_("should be a mapping"),
    "model_attributes_type": N_("should be a mapping"),
    "too_short": N_("should have at least {min_length} values"),
    "too_long": N_("should have at most {max_length} values"),
    "tuple_type": N_("should be a list of values"),
    "enum": N_("should be one of {expected}"),
    "literal_error": N_("should be one of {expected}"),
    "missing": N_("is required"),
    "extra_forbidden": N_("is not a parameter"),
    "frozen_instance": N_("cannot be changed"),
}
UNKNOWN = N_("not accepted ({type})")
_NOT_ONE_OF = re.compile(r"(?P<value>'[^']*') is not one of (?P<choices>'[^']*'(?:, '[^']*')*)\.?")
NOT_EMPTY = N_("should not be empty")


def explained(error: dict[str, Any]) -> Msg:
    """One pydantic error (an item of `ValidationError.errors()`) as a message."""
    kind = str(error.get("type", ""))
    ctx = error.get("ctx") or {}
    if kind in ("value_error", "assertion_error"):
        cause = ctx.get("error")
        reason = cause.args[0] if isinstance(cause, Exception) and cause.args else None
        if isinstance(reason, Msg):
            return reason
        # typer checks a choice (an Enum option) with pydantic, and words it itself.
        choice = _NOT_ONE_OF.fullmatch(reason) if isinstance(reason, str) else None
        if choice is not None:
            return Msg("{value} is not one of {choices}", **choice.groupdict())
        return declared(UNKNOWN, type=kind)
    if kind in ("string_too_short", "too_short") and ctx.get("min_length") == 1:
        return declared(NOT_EMPTY)
    template = MESSAGES.get(kind)
    if template is None:
        return declared(UNKNOWN, type=kind)
    values = {key: _shown(ctx.get(key, "?")) for key in placeholders(template)}
    if isinstance(values.get("expected"), str):
        # pydantic joins the last choice with an English "or": a list reads in any language
        values["expected"] = values["expected"].replace("' or '", "', '")
    return declared(template, **values)


def _shown(value: Any) -> Any:
    """A bound as a person writes it: `0`, not the `0.0` a float field keeps."""
    return int(value) if isinstance(value, float) and value.is_integer() else value
