"""`BadCase`: one call the contract's "Bad input" section says must raise ValueError or
TypeError. Below both lists of cases, v1's (`labctl.verify.bad_input`) and v2's
(`labctl.verify.bad_input_v2`), which the first serves."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from labctl.verify import rules


@dataclass(eq=False)
class BadCase:
    """A call the contract's Bad input section says must raise ValueError or TypeError."""

    function: str
    name: str
    rule: rules.Rule
    args: tuple
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def call(self) -> tuple[tuple, dict]:
        return copy.deepcopy(self.args), copy.deepcopy(dict(self.kwargs))
