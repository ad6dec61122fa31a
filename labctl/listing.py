"""The labs as `labctl list` shows them, read from `labctl/data/labs.json`: no lab is imported.

A lab's module brings numpy and pydantic with it, and listing every lab by importing them
took `labctl list` to 0.37x `import torch`. The file is the list's document, made from the
labs themselves (`python -m labctl.listing > labctl/data/labs.json`), as the frozen
tolerance tables are; tests/test_listing.py fails when it no longer says what the labs
declare. Texts are kept in English and translated where they are shown.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

INDEX = "data/labs.json"


@cache
def _index() -> dict[str, Any]:
    return json.loads(resources.files("labctl").joinpath(INDEX).read_text("utf-8"))


def index() -> dict[str, Any]:
    """The list's document in English: the tolerance table's version and every lab, in the
    order the registry gives them, with its sections and metrics."""
    return json.loads(json.dumps(_index()))  # a copy: callers translate in place


def from_labs() -> dict[str, Any]:
    """The same document, made by importing every lab (what `labs.json` must hold)."""
    from labctl import registry

    return {
        "tolerances": registry.TOLERANCE_TABLE_VERSION,
        "labs": [
            {
                "id": lab.id,
                "title": lab.title,
                "sections": [citation(s) for s in lab.sections],
                "metrics": [metric(m) for m in lab.metrics],
            }
            for lab in registry.discover()
        ],
    }


def metric(declared) -> dict[str, Any]:
    """A `labctl.lab.Metric` as the list shows it (`show` adds its description and why)."""
    return {
        "name": declared.name,
        "unit": declared.unit,
        "expected": declared.expected,
        "impls": list(declared.impls),
        "timing": declared.timing,
    }


def citation(section) -> dict[str, str]:
    """A `labctl.course.Section` as data."""
    return {
        "chapter": section.chapter.title,
        "number": section.number,
        "heading": section.heading,
        "part": section.part,
        "text": str(section),
    }


if __name__ == "__main__":
    print(json.dumps(from_labs(), indent=2, ensure_ascii=False))
