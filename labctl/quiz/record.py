"""A graded quiz as a record a grader can collect: every question, the answer as given, the
computed answer, the verdict; written atomically as JSON, never over an earlier one."""

from __future__ import annotations

import hashlib
import json
import secrets
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

import labctl
from labctl.evidence.environment import now_iso
from labctl.evidence.models import Strict
from labctl.evidence.store import write_new
from labctl.quiz.check import CORRECT, UNANSWERED, UNGRADED, WRONG, Graded, shown

SCHEMA = "labctl.quiz.v1"
VERDICTS = (CORRECT, WRONG, UNANSWERED, UNGRADED)


class QuizAnswer(Strict):
    id: str
    group: str
    section: str
    kind: str
    answer: Any = None
    expected: str | None = None
    verdict: Literal["correct", "wrong", "unanswered", "ungraded"]
    problem: str = ""
    lab: str = ""


class QuizRecord(Strict):
    schema_id: Literal["labctl.quiz.v1"] = Field(SCHEMA, alias="schema")
    labctl: str
    answered_at: str
    source: Literal["interactive", "file"]
    answers_sha256: str | None = None
    groups: list[str]
    questions: list[QuizAnswer]
    summary: dict[str, int]
    passed: bool

    def dump(self) -> dict:
        return self.model_dump(by_alias=True, mode="json")


def passed(graded: list[Graded]) -> bool:
    """Every checkable question answered, and answered right."""
    return all(g.verdict in (CORRECT, UNGRADED) for g in graded)


def summary(graded: list[Graded]) -> dict[str, int]:
    return {verdict: sum(g.verdict == verdict for g in graded) for verdict in VERDICTS}


def build(graded: list[Graded], groups: list[str], source: str, text: bytes | None) -> QuizRecord:
    return QuizRecord(
        labctl=labctl.__version__,
        answered_at=now_iso(),
        source=source,
        answers_sha256=None if text is None else hashlib.sha256(text).hexdigest(),
        groups=groups,
        questions=[entry(g) for g in graded],
        summary=summary(graded),
        passed=passed(graded),
    )


def entry(g: Graded) -> QuizAnswer:
    q = g.question
    return QuizAnswer(
        id=q.id,
        group=q.group,
        section=str(q.section),
        kind=q.kind,
        answer=g.answer,
        expected=None if g.expected is None else shown(q, g.expected),
        verdict=g.verdict,
        problem=str(g.problem),
        lab=q.lab,
    )


def write(record: QuizRecord, folder: Path) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    path = Path(folder) / f"quiz-{stamp}-{secrets.token_hex(4)}.json"
    text = json.dumps(record.dump(), indent=2, ensure_ascii=False) + "\n"
    write_new(path, text.encode("utf-8"))
    return path
