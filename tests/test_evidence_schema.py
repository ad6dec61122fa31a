"""The committed JSON Schema of learn-llm.evidence.v1 is the one the pydantic model generates."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from labctl.cli.main import app
from labctl.evidence.models import (
    SCHEMA_ID,
    Artifact,
    Cost,
    Environment,
    EvidenceRecord,
    LabctlInfo,
    License,
    MetricRecord,
    committed_schema_path,
    json_schema,
    schema_text,
)

REGENERATE = (
    "the committed schema drifted from labctl/evidence/models.py; regenerate it with "
    "`labctl evidence schema > labctl/data/learn-llm.evidence.v1.schema.json`"
)


def test_committed_schema_matches_the_model():
    path = committed_schema_path()
    assert path.is_file(), f"{path} is missing; {REGENERATE}"
    assert path.read_text("utf-8") == schema_text(), REGENERATE


def test_cli_prints_the_committed_schema():
    result = CliRunner().invoke(app, ["evidence", "schema"])
    assert result.exit_code == 0, result.output
    assert result.stdout == committed_schema_path().read_text("utf-8")
    assert json.loads(result.stdout) == json_schema()


def test_schema_refuses_unknown_fields_and_versions():
    schema = json_schema()
    assert schema["$id"] == SCHEMA_ID
    assert schema["additionalProperties"] is False
    assert schema["properties"]["schema"]["const"] == SCHEMA_ID
    for name in ("MetricRecord", "Artifact", "Environment", "Cost", "License", "LabctlInfo"):
        assert schema["$defs"][name]["additionalProperties"] is False, name
    required = set(schema["required"])
    course_fields = {
        "schema",
        "module",
        "commit",
        "verified_at",
        "environment",
        "seed",
        "commands",
        "metrics",
        "artifacts",
        "cost",
        "licenses",
        "known_failures",
    }
    assert required == course_fields


def test_model_fields_are_the_committed_schema_properties():
    """Against the committed file, not a schema generated from the same model just now."""
    committed = json.loads(committed_schema_path().read_text("utf-8"))
    for model in (EvidenceRecord, MetricRecord, Artifact, Environment, Cost, License, LabctlInfo):
        aliases = {f.alias or name for name, f in model.model_fields.items()}
        properties = (
            committed["properties"]
            if model is EvidenceRecord
            else committed["$defs"][model.__name__]["properties"]
        )
        assert aliases == set(properties), f"{model.__name__}: {REGENERATE}"
