"""`labctl contract check`: does a clean room expose the functions exactly as its contract says?

A function with the right signature whose body only raises NotImplementedError
(a stub from `clean-room init`) is not a pass: it is counted and named.

The clean room is loaded in a worker process (a hang or crash at import time
is named, never inherited); only names, parameter order and defaults are
compared here. The import policy and the numbers are `verify`'s business.
Which contract a room implements is read from its `__init__.py` as text
(`contract.declared_version`), never by running it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from labctl import contract
from labctl.contract import declared_version
from labctl.isolation.sandbox import CleanRoom

__all__ = ["ContractReport", "check_clean_room", "declared_version"]


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
    # Functions with the contract's signature whose body only raises NotImplementedError.
    stubs: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        """Every function there with its signature, and none of them still a stub."""
        return not self.deviations and not self.stubs

    def matching(self) -> int:
        """Functions with the contract's signature (a stub's counts: its signature is right)."""
        return len(self.checked) - len({d.function for d in self.deviations})

    def to_json(self) -> dict:
        return {
            "passed": self.passed,
            "path": self.path,
            "contract": {"id": self.contract_id, "sha256": self.digest},
            # The contract the room declares (undeclared: v1); "contract" is the one checked.
            "declared": contract.contract_id(self.declared),
            "isolation": self.isolation,
            "stubs": len(self.stubs),
            "functions": [
                {
                    "function": name,
                    "passed": not any(d.function == name for d in self.deviations)
                    and name not in self.stubs,
                    "stub": name in self.stubs,
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
    wrong = {d.function for d in deviations}
    stubs = tuple(
        name
        for name in contract.function_names(version)
        if name not in wrong and room.signatures.get(name, {}).get("stub") is True
    )
    return ContractReport(
        path=shown or str(path),
        contract_id=contract.contract_id(version),
        digest=digest,
        checked=contract.function_names(version),
        deviations=tuple(deviations),
        isolation=level,
        version=version,
        declared=declared,
        stubs=stubs,
    )
