"""A learner's answers: read (typed, or from a file), parsed by the question's kind, graded.

An answer is graded against the value the question's `solve` computes, with the
question's tolerance; an answer that cannot be read as what the question asks
(not a number, not a shape, not one of the choices) is wrong, and says why. An
answers file is a YAML (or JSON) mapping of question id to answer; anything else
in it is refused with one line naming the file and the problem.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from labctl.errors import LabctlError, UsageError
from labctl.evidence.parse import EvidenceLoader, lone_surrogate, one_line
from labctl.i18n import N_, Msg
from labctl.inputfile import read_regular
from labctl.quiz.bank import QUESTIONS, Question, by_id

MAX_FILE_BYTES = 1 << 20
CORRECT, WRONG, UNANSWERED, UNGRADED = "correct", "wrong", "unanswered", "ungraded"
_NUMBER = re.compile(r"^[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?$")
_APPROXIMATELY = "≈~约"


class QuizError(LabctlError):
    """An answers file that cannot be read, or an answer that is not text or numbers."""


@dataclass(frozen=True)
class Graded:
    """One question as graded: the learner's answer as given (None: not answered), the
    computed answer, the verdict and, for a wrong answer, what was wrong with it."""

    question: Question
    answer: Any
    expected: Any
    verdict: str
    problem: str | Msg = ""


def select(groups: list[str] | None = None) -> list[Question]:
    """The questions of the given groups (every question without any), in the bank's order."""
    from labctl.quiz.bank import GROUPS

    unknown = [g for g in groups or [] if g not in GROUPS]
    if unknown:
        from labctl.errors import UsageError

        raise UsageError(
            Msg("unknown section {section!r}; known: {known}", section=unknown[0],
                known=", ".join(GROUPS))
        )  # fmt: skip
    return [q for q in QUESTIONS if not groups or q.group in groups]


def read_answers(path: Path) -> dict[str, Any]:
    """question id -> answer, from a YAML or JSON mapping; QuizError naming what is wrong."""
    try:
        raw = read_regular(path, MAX_FILE_BYTES)  # a FIFO or /dev/zero: refused, not read
        if raw is None:
            raise QuizError(
                Msg("{path}: {size:,} bytes is too large for an answers file (at most {most:,})",
                    path=str(path), size=path.stat().st_size, most=MAX_FILE_BYTES)
            )  # fmt: skip
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise QuizError(Msg("{path}: not UTF-8 text", path=str(path))) from None
    except FileNotFoundError:
        # a file named that is not there: usage (exit 2), as for every command's input file
        raise UsageError(Msg("{path}: no such file", path=str(path))) from None
    except OSError as exc:
        raise QuizError(
            Msg("{path}: cannot read it ({error})", path=str(path), error=exc.strerror or str(exc))
        ) from None
    try:
        # evidence's safe loader: it also refuses a key given twice, which PyYAML reads as
        # its last value, graded in silence
        data = yaml.load(text, Loader=EvidenceLoader)
    except yaml.YAMLError as exc:
        refused = getattr(exc, "message", None)  # one of labctl's own rules, in its words
        if isinstance(refused, Msg):
            raise QuizError(Msg("{path}: {checks}", path=str(path), checks=refused)) from None
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise QuizError(
            Msg("{path}: not YAML or JSON{where}", path=str(path), where=where)
        ) from None
    except (ValueError, RecursionError) as exc:  # e.g. an integer of more digits than Python reads
        reason = Msg(
            "not readable: {kind}: {error}", kind=type(exc).__name__, error=one_line(exc)[:200]
        )
        raise QuizError(Msg("{path}: {checks}", path=str(path), checks=reason)) from None
    surrogate = lone_surrogate(data)
    if surrogate is not None:
        raise QuizError(Msg("{path}: {checks}", path=str(path), checks=surrogate))
    if not isinstance(data, dict):
        raise QuizError(
            Msg("{path}: expected a mapping of question id to answer, e.g. 'dot-product: 32'",
                path=str(path))
        )  # fmt: skip
    answers: dict[str, Any] = {}
    for key, value in data.items():
        if not isinstance(key, str) or by_id(key) is None:
            raise QuizError(
                Msg("{path}: {key!r} is no question's id (`labctl quiz --list` lists them)",
                    path=str(path), key=str(key))
            )  # fmt: skip
        if not _plain(value):
            raise QuizError(
                Msg("{path}: the answer to {key} must be text, a number or a list of them",
                    path=str(path), key=key)
            )  # fmt: skip
        answers[key] = value
    return answers


def _plain(value: Any) -> bool:
    if value is None or isinstance(value, (str, int, float)):
        return not isinstance(value, bool)
    return isinstance(value, list) and all(_plain(v) and not isinstance(v, list) for v in value)


def _number(text: str) -> float | None:
    cleaned = str(text).strip().lstrip(_APPROXIMATELY).strip().replace(",", "").replace("_", "")
    cleaned = cleaned.replace(" ", "")
    if not _NUMBER.match(cleaned):
        return None
    value = float(cleaned)
    return value if math.isfinite(value) else None


def _items(answer: Any, separators: str) -> list[str]:
    if isinstance(answer, list):
        return [str(a) for a in answer]
    return [piece for piece in re.split(separators, str(answer).strip()) if piece.strip()]


def _shape(text: str) -> tuple[int, ...] | None:
    digits = re.findall(r"-?\d+", text)
    leftover = re.sub(r"[-\d\s,()\[\]x×*]", "", text)
    return tuple(int(d) for d in digits) if digits and not leftover else None


def parse(question: Question, answer: Any) -> tuple[Any, str | Msg]:
    """(the answer as the question's kind, ""), or (None, why it cannot be read)."""
    kind = question.kind
    if kind == "number":
        value = _number(answer) if not isinstance(answer, list) else None
        return (value, "") if value is not None else (None, N_("not a number"))
    if kind == "numbers":
        values = [_number(a) for a in _items(answer, r"[,;\s]+")]
        if not values or any(v is None for v in values):
            return None, N_("not a list of numbers")
        return values, ""
    if kind == "shape":
        shape = _shape(" ".join(_items(answer, r"$^")) if isinstance(answer, list) else str(answer))
        return (shape, "") if shape else (None, N_("not a shape"))
    if kind == "shapes":
        shapes = [_shape(piece) for piece in _items(answer, r";")]
        if not shapes or any(s is None for s in shapes):
            return None, N_("not shapes separated by ';'")
        return shapes, ""
    if kind == "choice":
        text = str(answer).strip().lower()
        for key, label in question.choices:
            if text in {key.lower(), str(label).lower(), _translated(label).lower()}:
                return key, ""
        return None, Msg("not one of: {choices}", choices=", ".join(k for k, _ in question.choices))
    return None, ""


def _translated(label: str | Msg) -> str:
    from labctl.i18n import _

    return _(label)


def agrees(question: Question, got: Any, expected: Any) -> bool:
    tol = question.tolerance * (1 + 1e-9)
    if question.kind == "number":
        return abs(got - float(expected)) <= tol
    if question.kind == "numbers":
        return len(got) == len(expected) and all(
            abs(g - float(e)) <= tol for g, e in zip(got, expected, strict=True)
        )
    if question.kind == "shape":
        return tuple(got) == tuple(expected)
    if question.kind == "shapes":
        return [tuple(g) for g in got] == [tuple(e) for e in expected]
    return got == expected


def grade(question: Question, answer: Any, expected: Any = None) -> Graded:
    """Grade one answer; `expected` is computed by the question's solve when not given."""
    if not question.graded:
        return Graded(question, answer, None, UNGRADED)
    if expected is None:
        expected = question.solve()
    if answer is None or (isinstance(answer, str) and not answer.strip()):
        return Graded(question, None, expected, UNANSWERED)
    got, problem = parse(question, answer)
    if got is None:
        return Graded(question, answer, expected, WRONG, problem)
    return Graded(question, answer, expected, CORRECT if agrees(question, got, expected) else WRONG)


def shown(question: Question, value: Any) -> str:
    """A computed answer as a learner would write it."""
    if value is None:
        return "—"
    if question.kind in ("shape",):
        return str(tuple(value))
    if question.kind == "shapes":
        return "; ".join(str(tuple(v)) for v in value)
    if question.kind == "numbers":
        return ", ".join(_figure(question, v) for v in value)
    if question.kind == "number":
        return _figure(question, value)
    return str(value)


def _figure(question: Question, value: float) -> str:
    value = float(value)
    if value.is_integer() and question.tolerance < 1:
        return f"{int(value):,}"
    decimals = max(0, -math.floor(math.log10(question.tolerance * 2))) if question.tolerance else 6
    return f"{value:.{decimals}f}"
