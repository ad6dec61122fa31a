"""Pydantic models of the course's evidence schema, `learn-llm.evidence.v1`.

The learner template at the end of 第8章 · Attention 与 Transformer Block (学习者提交模板) fixes the fields:
schema, module, commit, verified_at, environment, seed, commands, metrics
(name, expected, actual), artifacts, cost, licenses, known_failures. labctl
adds optional fields of its own (per-metric impl and verdict, the contract and
tolerance-table versions, wall time) and nothing else: unknown fields and
unknown schema versions are refused, and values are never coerced.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from datetime import date, datetime
from pathlib import Path
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)

from labctl.i18n import N_
from labctl.lab import parse_expected

SCHEMA_ID = "learn-llm.evidence.v1"
SCHEMA_FILE = f"{SCHEMA_ID}.schema.json"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_COMMIT = re.compile(r"^([0-9a-f]{7,64}|unknown)$")
# A sanitized environment names versions and a device; these would identify a machine or a person.
_UNSANITIZED = re.compile(r"(/home/|/Users/|/root/|[A-Za-z]:\\|@)")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)


class Environment(Strict):
    python: str
    numpy: str
    torch: str
    platform: str
    device: str

    @field_validator("*")
    @classmethod
    def _sanitized(cls, value: str) -> str:
        if _UNSANITIZED.search(value):
            raise ValueError(N_("must not hold a path, user or host name"))
        return value


class MetricRecord(Strict):
    name: str = Field(min_length=1)
    expected: str
    actual: float
    impl: Literal["reference", "clean-room", "both"] | None = None
    passed: bool | None = None
    unit: str | None = None
    timing: bool | None = None

    @field_validator("expected")
    @classmethod
    def _tolerance(cls, value: str) -> str:
        parse_expected(value)
        return value

    @field_validator("actual")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError(N_("must be a finite number"))
        return value


class Artifact(Strict):
    path: str = Field(min_length=1)
    sha256: str | None = None

    @field_validator("sha256")
    @classmethod
    def _hex(cls, value: str | None) -> str | None:
        if value is not None and not _SHA256.match(value):
            raise ValueError(N_("must be 64 lowercase hex digits"))
        return value


class Cost(Strict):
    gross_usd: float = Field(ge=0)
    credit_usd: float = Field(ge=0)


class License(Strict):
    source: str
    version: str
    license: str
    attribution: str
    redistribution: str


def files_digest(files: dict[str, str]) -> str:
    """One sha256 for a clean room: over each file's relative path and the sha256 of its bytes,
    in path order (`labctl.evidence.room` lists them)."""
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(f"{name}\0{files[name]}\n".encode("utf-8", "surrogateescape"))
    return digest.hexdigest()


class CleanRoomInfo(Strict):
    """Which clean room a record's code ran: its path (relative to the repository), the
    sha256 over its files, each file's sha256 (so a change can be named), whether it is
    labctl's own clean room rather than a learner's, and the contract version it declares
    (1 when it declares none, and in records written before rooms declared one)."""

    path: str = Field(min_length=1)
    sha256: str
    own: bool
    files: dict[str, str]
    contract: Literal[1, 2] = 1

    @field_validator("sha256")
    @classmethod
    def _hex(cls, value: str) -> str:
        if not _SHA256.match(value):
            raise ValueError(N_("must be 64 lowercase hex digits"))
        return value

    @field_validator("files")
    @classmethod
    def _file_digests(cls, value: dict[str, str]) -> dict[str, str]:
        if any(not _SHA256.match(sha) for sha in value.values()):
            raise ValueError(N_("each file's digest must be 64 lowercase hex digits"))
        return value

    @model_validator(mode="after")
    def _one_digest(self) -> CleanRoomInfo:
        if files_digest(self.files) != self.sha256:
            raise ValueError(N_("sha256 is not the digest of the files listed"))
        return self


class LabctlInfo(Strict):
    """What labctl adds: enough to know which contract, tolerances and code produced a record."""

    version: str
    contract_id: str
    contract_sha256: str
    tolerances: Literal["v1", "v2", "v3", "v4"]
    impl: Literal["reference", "clean-room", "both"] | None = None
    lab: str | None = None
    # Which clean room ran; an older labctl wrote its path alone.
    clean_room: CleanRoomInfo | str | None = None
    # How the clean room's code was run: "sandbox" (an OS boundary) or "process"
    # (a worker process, not a security boundary); a grader can require "sandbox".
    isolation: Literal["sandbox", "process"] | None = None
    # The sandbox's layers it ran without (`labctl doctor` lists them): [] when it had
    # every one; None at the process level, which is no boundary.
    isolation_missing: (
        list[Literal["namespaces", "uid drop", "seccomp", "user namespaces disabled"]] | None
    ) = None
    # The lab's parameters as run, and whether any differs from the lab's default.
    params: dict[str, int | float | str | bool] | None = None
    params_default: bool | None = None
    passed: bool | None = None
    wall_time_s: float | None = None

    @field_validator("clean_room", mode="wrap")
    @classmethod
    def _room(cls, value: object, handler: ValidatorFunctionWrapHandler) -> object:
        # A mapping is the room's identity: its own errors, by field, not one per union member.
        if isinstance(value, dict):
            return CleanRoomInfo.model_validate(value)
        if value is None or isinstance(value, (str, CleanRoomInfo)):
            return handler(value)
        raise ValueError(N_("must be a mapping (path, sha256, own, files)"))


class EvidenceRecord(Strict):
    """A learn-llm.evidence.v1 record: one `labctl run` of a lab, or a learner's submission
    for a course module (第8章 · Attention 与 Transformer Block, 学习者提交模板)."""

    schema_id: Literal["learn-llm.evidence.v1"] = Field(alias="schema")
    module: str = Field(min_length=1)
    commit: str
    commit_dirty: bool | None = None
    verified_at: str
    environment: Environment | str
    seed: int
    commands: list[str]
    metrics: list[MetricRecord]
    artifacts: list[Artifact | str]
    cost: Cost
    licenses: list[License]
    known_failures: list[str]
    labctl: LabctlInfo | None = None

    @field_validator("commit")
    @classmethod
    def _commit(cls, value: str) -> str:
        if not _COMMIT.match(value):
            raise ValueError(N_("must be a git commit sha (7 to 64 hex digits) or 'unknown'"))
        return value

    @field_validator("verified_at", mode="before")
    @classmethod
    def _iso_8601(cls, value: object) -> object:
        # YAML reads an unquoted timestamp as a datetime: that is ISO 8601 too.
        if isinstance(value, datetime):
            return value.isoformat()
        if isinstance(value, date):
            return value.isoformat()
        if isinstance(value, str):
            try:
                datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                raise ValueError(N_("must be an ISO 8601 date-time")) from None
        return value

    @field_validator("environment")
    @classmethod
    def _environment_text(cls, value: Environment | str) -> Environment | str:
        if isinstance(value, str) and _UNSANITIZED.search(value):
            raise ValueError(N_("must not hold a path, user or host name"))
        return value

    def dump(self) -> dict:
        """The record as plain data, with the course's field names."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


def json_schema() -> dict:
    """The JSON Schema of the record, as committed in `labctl/data/` (`SCHEMA_FILE`)."""
    schema = EvidenceRecord.model_json_schema(by_alias=True, mode="validation")
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID, **schema}


def schema_text() -> str:
    """`json_schema()` as the committed file holds it (and `labctl evidence schema` prints it)."""
    return json.dumps(json_schema(), indent=2, ensure_ascii=False) + "\n"


def committed_schema_path() -> Path:
    return Path(__file__).resolve().parent.parent / "data" / SCHEMA_FILE
