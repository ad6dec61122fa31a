"""Contract v1 (`transformer-block-v1`) as data, pinned by digest.

The frozen interface lives in `labctl/data/contract_v1.json`, transcribed from
`shared/contract-v1.md`. Its sha256 (over canonical JSON, so a reformat of the
file does not count as an edit) is pinned below: an edit of v1 is detected,
and a change to the interface means a v2 file and a new pin, never an edit.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

from labctl.errors import ContractError
from labctl.i18n import Msg, joined

CONTRACT_ID = "transformer-block-v1"
CONTRACT_VERSION = 1
CONTRACT_V1_SHA256 = "07323ccf8fa8de839983bce3fea8630486942195283e81335fcfed60e96d5464"

_MISSING = object()


@dataclass(frozen=True)
class Param:
    name: str
    default: Any = _MISSING
    shape: str | None = None

    @property
    def required(self) -> bool:
        return self.default is _MISSING

    def render(self) -> str:
        return self.name if self.required else f"{self.name}={self.default!r}"


@dataclass(frozen=True)
class Function:
    number: int
    name: str
    params: tuple[Param, ...]
    returns: str
    meaning: str

    def signature(self) -> str:
        return f"{self.name}({', '.join(p.render() for p in self.params)})"


@dataclass(frozen=True)
class Deviation:
    """One way a clean room departs from the contract, named for a learner.

    `message` is English (for --json, the evidence records and comparisons); it
    is given as a Msg, which is kept as `shown` for the terminal to translate.
    """

    function: str
    message: str
    shown: str | Msg = field(default="", repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.message, Msg):
            object.__setattr__(self, "shown", self.message)
            object.__setattr__(self, "message", str(self.message))
        elif not self.shown:
            object.__setattr__(self, "shown", self.message)


def _raw_text() -> str:
    return resources.files("labctl").joinpath("data/contract_v1.json").read_text("utf-8")


def digest(raw: dict) -> str:
    canonical = json.dumps(raw, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def raw_contract() -> dict:
    return json.loads(_raw_text())


def verify_pin(raw: dict | None = None) -> str:
    """Return the digest, or raise ContractError when the data no longer matches the pin."""
    actual = digest(raw if raw is not None else raw_contract())
    if actual != CONTRACT_V1_SHA256:
        raise ContractError(
            f"contract data labctl/data/contract_v1.json has sha256 {actual[:16]}…, "
            f"but v1 is pinned at {CONTRACT_V1_SHA256[:16]}…: v1 is frozen, "
            "a changed interface needs a v2"
        )
    return actual


@cache
def functions() -> tuple[Function, ...]:
    """The 19 contract functions, in contract order (pin verified first)."""
    raw = raw_contract()
    verify_pin(raw)
    return tuple(
        Function(
            number=f["number"],
            name=f["name"],
            params=tuple(
                Param(p["name"], p.get("default", _MISSING), p.get("shape")) for p in f["params"]
            ),
            returns=f["returns"],
            meaning=f["meaning"],
        )
        for f in raw["functions"]
    )


def function_names() -> tuple[str, ...]:
    return tuple(f.name for f in functions())


def _same_default(expected: Any, observed: Any) -> bool:
    # 10000 and 10000.0 are the same default; True and 1 are not.
    if isinstance(expected, bool) or isinstance(observed, bool):
        return type(expected) is type(observed) and expected == observed
    if isinstance(expected, (int, float)) and isinstance(observed, (int, float)):
        return float(expected) == float(observed)
    return type(expected) is type(observed) and expected == observed


def check_signatures(observed: dict[str, dict]) -> list[Deviation]:
    """Compare observed signatures with the contract.

    `observed` maps a function name to what the clean room exposes:
    `{"present": bool, "callable": bool, "params": [{"name", "kind", "default"?}]}`
    with `default` present only when the parameter has one (JSON values; a
    default that is not JSON arrives as `{"repr": "..."}`).
    """
    deviations: list[Deviation] = []
    for fn in functions():
        seen = observed.get(fn.name, {"present": False})
        if not seen.get("present"):
            deviations.append(Deviation(fn.name, Msg("missing: the package does not expose it")))
            continue
        if not seen.get("callable"):
            deviations.append(Deviation(fn.name, Msg("not callable")))
            continue
        if seen.get("params") is None:
            deviations.append(Deviation(fn.name, Msg("signature cannot be inspected")))
            continue
        deviations.extend(_compare_params(fn, seen["params"]))
    return deviations


def _compare_params(fn: Function, params: list[dict]) -> list[Deviation]:
    out: list[Deviation] = []
    expected_names = [p.name for p in fn.params]
    observed_names = [p["name"] for p in params]
    variadic = [p["name"] for p in params if p["kind"] in ("VAR_POSITIONAL", "VAR_KEYWORD")]
    if variadic:
        out.append(
            Deviation(
                fn.name,
                Msg("takes variadic *{name}: the contract lists exact names", name=variadic[0]),
            )
        )
    plain = [n for n in observed_names if n not in variadic]
    if plain != expected_names:
        missing = [n for n in expected_names if n not in plain]
        extra = [n for n in plain if n not in expected_names]
        parts: list[Msg] = []
        if missing:
            parts.append(Msg("missing {names}", names=", ".join(missing)))
        if extra:
            parts.append(Msg("unexpected {names}", names=", ".join(extra)))
        if not parts:
            parts.append(
                Msg(
                    "order is ({observed}), contract is ({expected})",
                    observed=", ".join(plain),
                    expected=", ".join(expected_names),
                )
            )
        out.append(Deviation(fn.name, Msg("parameters: {problems}", problems=joined(parts))))
        return out
    named = [p for p in params if p["name"] not in variadic]  # *args / **kwargs named above
    for want, got in zip(fn.params, named, strict=True):
        if got["kind"] not in ("POSITIONAL_OR_KEYWORD",):
            kind = got["kind"].lower().replace("_", "-")
            out.append(
                Deviation(
                    fn.name,
                    Msg(
                        "parameter {name} is {kind}; it must be positional-or-keyword",
                        name=want.name,
                        kind=kind,
                    ),
                )
            )
        has_default = "default" in got
        if want.required and has_default:
            out.append(
                Deviation(
                    fn.name,
                    Msg("parameter {name} has a default; the contract has none", name=want.name),
                )
            )
        elif not want.required and not has_default:
            out.append(
                Deviation(
                    fn.name,
                    Msg(
                        "parameter {name} needs default {default}",
                        name=want.name,
                        default=repr(want.default),
                    ),
                )
            )
        elif not want.required and not _same_default(want.default, got["default"]):
            shown = (
                got["default"]["repr"] if isinstance(got["default"], dict) else repr(got["default"])
            )
            out.append(
                Deviation(
                    fn.name,
                    Msg(
                        "parameter {name} defaults to {observed}; contract: {expected}",
                        name=want.name,
                        observed=shown,
                        expected=repr(want.default),
                    ),
                )
            )
    return out
