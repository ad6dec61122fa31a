"""What a lab takes from a clean room: each contract function's return value, checked at the
lab's boundary against the form the contract gives it.

A lab does arithmetic on a clean room's outputs (differences, logs, `|` of masks). An
output of another form (a list, a scalar, a tuple of the wrong length, a float mask, an
array of strings) would break that arithmetic with numpy's own error and crash the lab;
checked here first, it is named (`OddOutput`: which function, what it returned, what the
contract says) and the runner fails the clean room's rows with that sentence
(`labctl.runner.run_lab`). Neither values nor shapes are judged here: labs measure a wrong
shape themselves where it is the point (a cache of H heads, a split of the wrong
layout), and what is left of an odd output that still breaks a lab fails the room's rows
there too, after the reference alone has shown the lab itself is sound.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from labctl.errors import LabctlError
from labctl.i18n import Msg

MASKS = ("causal_mask", "sliding_window_mask", "padding_mask")


class OddOutput(LabctlError):
    """A clean room's function returned what the contract's table rules out (not a value
    judgement: a type, an arity or a dtype kind)."""


def _kind_ok(function: str, item: np.ndarray) -> bool:
    if function in MASKS:
        return item.dtype == np.bool_
    return item.dtype.kind in "biufc"


def check(function: str, args: tuple, kwargs: Mapping[str, Any], value: Any) -> None:
    """Raise OddOutput when `value` is not of the form the contract gives this call."""
    from labctl.verify.functions import RETURNS

    specs = RETURNS.get(function)
    if specs is None:
        return
    if len(specs) > 1:
        if not isinstance(value, (tuple, list)) or len(value) != len(specs):
            raise OddOutput(
                Msg(
                    "the clean room's {function} returned {what} where the contract says a "
                    "tuple of {n} arrays ({says})",
                    function=function,
                    what=_what(value),
                    n=len(specs),
                    says=", ".join(specs),
                )
            )
        items = tuple(value)
    else:
        items = (value,)
    for item, spec in zip(items, specs, strict=True):
        if not isinstance(item, np.ndarray) or not _kind_ok(function, item):
            raise OddOutput(
                Msg(
                    "the clean room's {function} returned {what} where the contract says an "
                    "array {spec}",
                    function=function,
                    what=_what(item),
                    spec=spec,
                )
            )


def _what(value: Any) -> Msg:
    if isinstance(value, np.ndarray):
        return Msg(
            "an array of dtype {dtype} and shape {shape}", dtype=str(value.dtype), shape=value.shape
        )
    if isinstance(value, (tuple, list)):
        return Msg("a {type} of {n}", type=type(value).__name__, n=len(value))
    return Msg("a {type}", type=type(value).__name__)


def judged(function: str) -> bool:
    """Is `function` one whose outputs are checked here (a contract function)?"""
    from labctl.verify.functions import RETURNS

    return function in RETURNS


def checked(function: str, call: Callable[..., Any]) -> Callable[..., Any]:
    """`call`, its every return value checked (`check`) before a lab reads it."""

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        value = call(*args, **kwargs)
        check(function, args, kwargs, value)
        return value

    return wrapped
