"""The contracts (`transformer-block-v1`, `transformer-block-v2`) as data, pinned by digest.

Each version ships in the package twice: the document a learner reads
(`labctl/data/contract-v1.md`, `labctl/data/contract-v2.md`; `labctl contract
document` prints it) and the data transcribed from it (`labctl/data/contract_v1.json`,
`labctl/data/contract_v2.json`). Each JSON's sha256 (over canonical JSON, so a
reformat of the file does not count as an edit) is pinned below, and so are the
bytes of each document: an edit of either is detected, and a change to an
interface means a new version and a new pin, never an edit.

v2 holds every v1 function with the same name and meaning, with keyword
parameters added last: a v2 room answers every v1 call, so a function checked
against v1 may have v1's signature or v2's.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from labctl import pysource
from labctl.errors import ContractError
from labctl.i18n import Msg, joined

CONTRACT_ID = "transformer-block-v1"
CONTRACT_VERSION = 1
CONTRACT_V1_SHA256 = "8ff7564d095da2cccf09e2bb3346fb17df434fdc805313c461c8cbba1e9582df"
# v1's data while its `source` named its document outside the package: the same interface,
# so a record made then (its `contract_sha256`) is still a record of v1.
CONTRACT_V1_EARLIER_SHA256 = ("07323ccf8fa8de839983bce3fea8630486942195283e81335fcfed60e96d5464",)
CONTRACT_V2_SHA256 = "a082f5e9ed54c1f45dceac59110fd55d93e3217e5b76c6d152e1229960d7159b"
# The bytes of the documents a learner reads (labctl/data/contract-v*.md, in the wheel).
DOCUMENT_SHA256 = {
    1: "2d5e05a1e5cabb634a9f76c2c3e2cdd967382338cb9a0dc7f2d98f3183b2e4d9",
    2: "89a7687de5b54aa4bfea46238cc5a2406495ed845703bcb45fba034c6994c1b0",
}

VERSIONS = (1, 2)
LATEST = VERSIONS[-1]
PINS = {1: CONTRACT_V1_SHA256, 2: CONTRACT_V2_SHA256}

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


def contract_id(version: int = CONTRACT_VERSION) -> str:
    return f"transformer-block-v{check_version(version)}"


def check_version(version: object) -> int:
    """`version` as one of VERSIONS, or a ContractError naming the known ones."""
    if isinstance(version, bool) or version not in VERSIONS:
        raise ContractError(
            Msg(
                "no contract version {version}: labctl knows {known}",
                version=str(version),
                known=", ".join(str(v) for v in VERSIONS),
            )
        )
    return int(version)


def _file_text(version: int) -> str:
    name = f"data/contract_v{check_version(version)}.json"
    return resources.files("labctl").joinpath(name).read_text("utf-8")


def _raw_text() -> str:
    return _file_text(CONTRACT_VERSION)


def cited_version(citation: str) -> int | None:
    """The contract version a course citation cites ("contract v1 Bad input: ..."), or None."""
    match = re.search(r"\bcontract v(\d+)\b", citation)
    return int(match.group(1)) if match and int(match.group(1)) in VERSIONS else None


def document_name(version: int = LATEST) -> str:
    """Where contract `version`'s document lies in the package (and in the repository)."""
    return f"labctl/data/contract-v{check_version(version)}.md"


def document_path(version: int = LATEST) -> Path:
    """The document of contract `version` as installed, a file a learner can open."""
    return Path(str(resources.files("labctl").joinpath(document_name(version)[len("labctl/") :])))


def document_text(version: int = LATEST) -> str:
    """The document contract `version`'s JSON is transcribed from (pin verified)."""
    name = document_name(version)
    raw = document_path(version).read_bytes()
    actual = hashlib.sha256(raw).hexdigest()
    pinned = DOCUMENT_SHA256[version]
    if actual != pinned:
        raise ContractError(
            f"contract document {name} has sha256 {actual[:16]}…, "
            f"but v{version} is pinned at {pinned[:16]}…: v{version} is frozen, "
            f"a changed interface needs a v{version + 1}"
        )
    return raw.decode("utf-8")


def digest(raw: dict) -> str:
    canonical = json.dumps(raw, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def raw_contract(version: int = CONTRACT_VERSION) -> dict:
    # v1 is read through the no-argument calls it always had (tests replace them).
    return json.loads(_raw_text() if version == CONTRACT_VERSION else _file_text(version))


def data(version: int) -> dict:
    """The contract's data, as `raw_contract` reads it."""
    return raw_contract() if version == CONTRACT_VERSION else raw_contract(version)


def verify_pin(raw: dict | None = None, version: int = CONTRACT_VERSION) -> str:
    """Return the digest, or raise ContractError when the data no longer matches the pin."""
    version = check_version(version)
    actual = digest(raw if raw is not None else data(version))
    pinned = PINS[version]
    if actual != pinned:
        raise ContractError(
            f"contract data labctl/data/contract_v{version}.json has sha256 {actual[:16]}…, "
            f"but v{version} is pinned at {pinned[:16]}…: v{version} is frozen, "
            f"a changed interface needs a v{version + 1}"
        )
    return actual


@cache
def functions(version: int = CONTRACT_VERSION) -> tuple[Function, ...]:
    """The contract's functions (19 in v1, 26 in v2), in contract order (pin verified first)."""
    version = check_version(version)
    raw = data(version)
    verify_pin(raw, version)
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


def function_names(version: int = CONTRACT_VERSION) -> tuple[str, ...]:
    return tuple(f.name for f in functions(version))


def added_in(version: int) -> tuple[str, ...]:
    """The functions `version` has that the one before it has not."""
    before = set(function_names(version - 1)) if version > VERSIONS[0] else set()
    return tuple(n for n in function_names(version) if n not in before)


def _same_default(expected: Any, observed: Any) -> bool:
    # 10000 and 10000.0 are the same default; True and 1 are not.
    if isinstance(expected, bool) or isinstance(observed, bool):
        return type(expected) is type(observed) and expected == observed
    if isinstance(expected, (int, float)) and isinstance(observed, (int, float)):
        return float(expected) == float(observed)
    return type(expected) is type(observed) and expected == observed


def check_signatures(observed: dict[str, dict], version: int = CONTRACT_VERSION) -> list[Deviation]:
    """Compare observed signatures with contract `version`.

    `observed` maps a function name to what the clean room exposes:
    `{"present": bool, "callable": bool, "params": [{"name", "kind", "default"?}]}`
    with `default` present only when the parameter has one (JSON values; a
    default that is not JSON arrives as `{"repr": "..."}`). A function may have
    the signature of a later version instead (v2 only adds keyword parameters
    with v1's behaviour as default, so it answers every v1 call); the deviations
    named are those from `version`'s own signature.
    """
    deviations: list[Deviation] = []
    later = [{f.name: f for f in functions(v)} for v in VERSIONS if v > check_version(version)]
    for fn in functions(version):
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
        problems = _compare_params(fn, seen["params"])
        if problems and not any(
            fn.name in spec and not _compare_params(spec[fn.name], seen["params"]) for spec in later
        ):
            deviations.extend(problems)
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


# An __init__.py larger than this is not read for a declaration (it stays v1); verify
# refuses a room of that kind on its own terms.
_MAX_INIT_BYTES = 1 << 20


def _declared_id(source: bytes) -> str | None:
    """The string a top-level `CONTRACT = "..."` assigns, or None."""
    try:
        tree = pysource.parse(source)
    except pysource.UNPARSABLE:
        return None
    found = None
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id == "CONTRACT"
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            found = node.value.value  # the last assignment wins, as when Python runs it
    return found


def declared_version(path: str | Path) -> int:
    """The contract version the room at `path` declares (`CONTRACT = "transformer-block-vN"`
    in its `__init__.py`); 1 when it declares none. An id labctl does not know is a
    ContractError naming it."""
    init = Path(path) / "__init__.py"
    try:
        if not init.is_file() or init.stat().st_size > _MAX_INIT_BYTES:
            return 1
        source = init.read_bytes()
    except OSError:
        return 1
    declared = _declared_id(source)
    if declared is None:
        return 1
    for version in VERSIONS:
        if declared == contract_id(version):
            return version
    raise ContractError(
        Msg(
            "the clean room declares CONTRACT = {declared!r}; labctl knows {known}",
            declared=declared[:80],
            known=", ".join(contract_id(v) for v in VERSIONS),
        )
    )
