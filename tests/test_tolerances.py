"""The tolerance table v1 is frozen: a lab that changes a tolerance must bump the version."""

from __future__ import annotations

import json
from importlib import resources

from labctl import registry
from labctl.lab import parse_expected


def test_the_live_table_matches_the_frozen_v1_table():
    frozen = json.loads(
        resources.files("labctl").joinpath("data/tolerances-v1.json").read_text("utf-8")
    )
    live = registry.tolerance_table()
    assert live["version"] == frozen["version"] == "v1"
    changed = sorted(
        name
        for name in set(live["metrics"]) | set(frozen["metrics"])
        if live["metrics"].get(name) != frozen["metrics"].get(name)
    )
    assert not changed, (
        f"tolerances changed for {changed}: v1 is frozen; a changed table is v2 "
        "(bump registry.TOLERANCE_TABLE_VERSION and write labctl/data/tolerances-v2.json)"
    )


def test_every_tolerance_parses_and_is_justified():
    for name, entry in registry.tolerance_table()["metrics"].items():
        parse_expected(entry["expected"])
        assert entry["why"], f"{name} has no justification"
        assert entry["reproduce_abs"] >= 0 and entry["reproduce_rel"] >= 0
