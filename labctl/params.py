"""`--set NAME=VALUE`: a lab's parameters from the command line, checked by its `Params` model.

A setting names a parameter of every lab being run that has it (`T=16`), or of
one lab (`causal-attention.T=16`). A value is read by the type the model
declares (integer, number, true/false, comma-separated integers for a tuple),
then the model checks the lot, bounds and cross-field rules included. Anything
refused is a usage error naming what is allowed; nothing has run yet.
"""

from __future__ import annotations

import math
import typing
from dataclasses import dataclass

import annotated_types
from pydantic import ValidationError

from labctl.errors import UsageError
from labctl.i18n import Msg, _, joined
from labctl.i18n.validation import explained
from labctl.lab import Lab, LabParams


@dataclass(frozen=True)
class Setting:
    lab: str | None
    name: str
    value: str


def parse_setting(text: str) -> Setting:
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise UsageError(Msg("--set wants NAME=VALUE or LAB.NAME=VALUE, got {text!r}", text=text))
    lab, dot, name = key.rpartition(".")
    return Setting(lab if dot else None, name, value.strip())


def describe(params: type[LabParams], name: str) -> str:
    """`T: integer, 1 ≤ T ≤ 512 (default 8)`: what a learner may give a parameter."""
    return _(description(params, name))


def description(params: type[LabParams], name: str) -> Msg:
    """`describe`'s text as a Msg, to nest in an error (kept in English for --json)."""
    field = params.model_fields[name]
    bounds = []
    for item in field.metadata:
        for attr, sign in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<")):
            if isinstance(item, getattr(annotated_types, attr.capitalize())):
                bounds.append(f"{name} {sign} {getattr(item, attr)}")
    default = field.default
    shown = ",".join(map(str, default)) if isinstance(default, tuple) else default
    return Msg(
        "{name}: {kind}{bounds} {default}",
        name=name,
        kind=_kind(field.annotation),
        bounds=f", {', '.join(bounds)}" if bounds else "",
        default=Msg("(default {default})", default=shown),
    )


def _kind(annotation: object) -> Msg:
    if annotation is bool:
        return Msg("true or false")
    if annotation is int:
        return Msg("integer")
    if annotation is float:
        return Msg("number")
    if typing.get_origin(annotation) is tuple:
        return Msg("comma-separated integers")
    return Msg("text")


def _convert(params: type[LabParams], setting: Setting) -> object:
    annotation = params.model_fields[setting.name].annotation
    text = setting.value
    try:
        if annotation is bool:
            if text.lower() not in ("true", "false", "1", "0"):
                raise ValueError(text)
            return text.lower() in ("true", "1")
        if annotation is int:
            return int(text)
        if annotation is float:
            value = float(text)
            if not math.isfinite(value):
                raise ValueError(text)
            return value
        if typing.get_origin(annotation) is tuple:
            return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise UsageError(
            Msg(
                "--set {name}={value}: not a valid value; allowed: {allowed}",
                name=setting.name,
                value=text,
                allowed=description(params, setting.name),
            )
        ) from None
    return text


def _allowed(lab: Lab) -> str | Msg:
    return joined([description(lab.params, name) for name in lab.params.model_fields])


def resolve_params(labs: list[Lab], texts: list[str]) -> dict[str, LabParams]:
    """Each lab's parameters with `texts` applied; a usage error before anything runs."""
    settings = [parse_setting(text) for text in texts]
    by_id = {lab.id: lab for lab in labs}
    chosen: dict[str, dict[str, object]] = {lab.id: {} for lab in labs}
    for setting in settings:
        if setting.lab is not None:
            if setting.lab not in by_id:
                raise UsageError(
                    Msg(
                        "--set {key}: lab {lab!r} is not being run (running: {labs})",
                        key=f"{setting.lab}.{setting.name}",
                        lab=setting.lab,
                        labs=", ".join(by_id),
                    )
                )
            targets = [by_id[setting.lab]]
        else:
            targets = [lab for lab in labs if setting.name in lab.params.model_fields]
        if not targets or any(setting.name not in lab.params.model_fields for lab in targets):
            lab = targets[0] if targets else (labs[0] if len(labs) == 1 else None)
            allowed = _allowed(lab) if lab else Msg("no lab being run has it")
            raise UsageError(
                Msg(
                    "--set: unknown parameter {name!r}; allowed: {allowed}",
                    name=setting.name,
                    allowed=allowed,
                )
            )
        for lab in targets:
            chosen[lab.id][setting.name] = _convert(lab.params, setting)
    return {lab.id: _validated(lab, chosen[lab.id]) for lab in labs}


def _validated(lab: Lab, values: dict[str, object]) -> LabParams:
    try:
        return lab.params(**values)
    except ValidationError as exc:
        problems: list[str | Msg] = []
        for error in exc.errors():
            name = ".".join(str(part) for part in error["loc"])
            # by the error's type and values: pydantic's own sentence is English only
            detail: str | Msg = explained(error)
            if name in lab.params.model_fields:
                allowed = Msg("allowed: {allowed}", allowed=description(lab.params, name))
                detail = Msg("{first}; {rest}", first=detail, rest=allowed)
            where = f"{lab.id}.{name}" if name else lab.id
            problems.append(Msg("{where}: {detail}", where=where, detail=detail))
        raise UsageError(Msg("--set refused: {problems}", problems=_piped(problems))) from None


def _piped(problems: list[str | Msg]) -> str | Msg:
    """Problems joined with " | " as one Msg, each translated when it is shown."""
    result = problems[-1]
    for problem in reversed(problems[:-1]):
        result = Msg("{first} | {rest}", first=problem, rest=result)
    return result


def record_values(params: LabParams) -> dict[str, int | float | str | bool]:
    """The parameters as an evidence record keeps them (a tuple as comma-separated text)."""
    return {
        name: ",".join(map(str, value)) if isinstance(value, tuple) else value
        for name, value in params.model_dump().items()
    }


def non_default(lab: Lab, params: LabParams) -> dict[str, object]:
    """The parameters that differ from the lab's defaults."""
    default = lab.params().model_dump()
    return {k: v for k, v in params.model_dump().items() if default.get(k) != v}
