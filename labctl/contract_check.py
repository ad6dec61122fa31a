"""`labctl contract check`: does a clean room expose the functions exactly as its contract says?

The clean room is loaded in a worker process (a hang or crash at import time
is named, never inherited); only names, parameter order and defaults are
compared here. The import policy and the numbers are `verify`'s business.
Which contract a room implements is read from its `__init__.py` as text
(`declared_version`), never by running it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from labctl import contract
from labctl.errors import ContractError
from labctl.i18n import Msg
from labctl.isolation.sandbox import CleanRoom

# An __init__.py larger than this is not read for a declaration (it stays v1); verify
# refuses a room of that kind on its own terms.
_MAX_INIT_BYTES = 1 << 20


def _declared_id(source: bytes) -> str | None:
    """The string a top-level `CONTRACT = "..."` assigns, or None."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
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
    for version in contract.VERSIONS:
        if declared == contract.contract_id(version):
            return version
    raise ContractError(
        Msg(
            "the clean room declares CONTRACT = {declared!r}; labctl knows {known}",
            declared=declared[:80],
            known=", ".join(contract.contract_id(v) for v in contract.VERSIONS),
        )
    )


@dataclass(frozen=True)
class ContractReport:
    path: str
    contract_id: str
    digest: str
    checked: tuple[str, ...]
    deviations: tuple[contract.Deviation, ...]
    isolation: str = ""
    version: int = contract.CONTRACT_VERSION
    declared: int = contract.CONTRACT_VERSION

    @property
    def passed(self) -> bool:
        return not self.deviations

    def to_json(self) -> dict:
        return {
            "passed": self.passed,
            "path": self.path,
            "contract": {
                "id": self.contract_id,
                "version": self.version,
                "sha256": self.digest,
                "declared": contract.contract_id(self.declared),
            },
            "isolation": self.isolation,
            "functions": [
                {
                    "function": name,
                    "passed": not any(d.function == name for d in self.deviations),
                    "deviations": [d.message for d in self.deviations if d.function == name],
                }
                for name in self.checked
            ],
        }


def check_clean_room(
    path: str | Path,
    timeout_s: float = 20.0,
    shown: str | None = None,
    isolation: str = "auto",
    version: int | None = None,
) -> ContractReport:
    """Load the clean room at `path` in a worker and compare its signatures with a contract:
    `version`, or the one the room declares when None.

    The worker observes the signatures (`inspect`, where the code runs) and
    sends them as plain data; the comparison happens here. The import policy
    is verify's business, so the worker's import guard is off; the isolation
    level is not. `shown` is how the report names the path (never absolute).
    """
    declared = declared_version(path)
    version = declared if version is None else contract.check_version(version)
    digest = contract.verify_pin(version=version)
    with CleanRoom(path, timeout_s, isolation=isolation, guard=False) as room:
        deviations = contract.check_signatures(room.signatures, version)
        level = room.isolation
    return ContractReport(
        path=shown or str(path),
        contract_id=contract.contract_id(version),
        digest=digest,
        checked=contract.function_names(version),
        deviations=tuple(deviations),
        isolation=level,
        version=version,
        declared=declared,
    )
