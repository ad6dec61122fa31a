"""The learner's screen: every command, every lab, in both languages, at 80 columns.

Each scenario runs as a learner's terminal would show it: with COLUMNS=80, and with no
COLUMNS at all (a pipe or a CI log: 80 columns too, and the same text); and once more at
1,000 columns, where nothing wraps, to know the words. Then:

- no line is wider than 80 terminal cells (a Chinese character takes two);
- no word is split across lines (`floa|t64`, `.js|on`): two pieces at a line's end and the
  next one's start that are one word at 1,000 columns; a word wider than the line aside;
- no line starts with closing punctuation (`，`, `；`, `）`...);
- under `--lang zh`, no English word outside the allow-list (`zhwords`, tightened here:
  "reference", "both", "sandbox" alone are English on a Chinese screen).

The scenarios are the success and the failure paths a learner meets: list, show (every
lab), the contract, clean-room init (and its refusal), contract check of stubs and of a
whole room, verify of a passing room (with the template's metrics), of a failing room and
of stubs, doctor, the evidence template and a refused submission, every lab's run (slow),
a lab run on a broken room, the report, and the errors of each kind (usage, refusal,
unknown command). Rooms are named with an underscore (`room_ok`), so their names are
identifiers wherever they are quoted.
"""

from __future__ import annotations

import copy
import hashlib
import re
import shutil
from itertools import pairwise
from pathlib import Path

import pytest
from rich.cells import cell_len
from typer.testing import CliRunner
from zhwords import english_words

from labctl import faults, i18n, registry
from labctl import report as report_module
from labctl import runner as runner_module
from labctl.cli.main import app
from labctl.i18n import set_language
from labctl.verify import verify as verify_module

runner = CliRunner()
WIDTH = 80
WIDE = 1000
LOCALE = {"LABCTL_LANG": "", "LC_ALL": "", "LC_MESSAGES": "", "LANG": ""}
SMALL = ["--set", "mask-ablation.steps=24", "--set", "mask-ablation.tail=4"]
CLOSING = "，。、；：！？）」』】》"
# Box drawing, the heatmaps' shades and the verdict marks: a table's frame, not its words.
FRAME = "│┃║╭╮╰╯─━┏┓┗┛┡┩╇╈┼├┤┬┴ ░▒▓█✓✗·–●◉*"


@pytest.fixture(autouse=True)
def english_after():
    yield
    set_language("en")


@pytest.fixture(scope="module")
def place(tmp_path_factory):
    """A working directory with the rooms and files the scenarios name."""
    where = tmp_path_factory.mktemp("screen")
    shutil.copytree(faults.project_clean_room(), where / "room_ok",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    faults.get("mask-reversed").materialize(where / "room_bad")
    result = runner.invoke(app, ["clean-room", "init", str(where / "room_stub")], env=LOCALE)
    assert result.exit_code == 0, result.output
    (where / "bad_submission.yaml").write_text(
        "schema: learn-llm.evidence.v1\nmodule: m1\nseed: five\ncommit: xyz\n", "utf-8"
    )
    return where


@pytest.fixture(scope="module")
def cached(place):
    """Labs and verifies compute once per arguments, reports once per language and
    arguments; each width and language renders anew.

    What a width changes is the rendering, which every call still does; the same seed and
    parameters give the same numbers, the same records the same report file."""
    computed: dict = {}
    real_lab, real_verify = runner_module.run_lab, verify_module.verify_clean_room
    real_report = report_module.build_report

    def run_lab(lab, seed, impls, params=None):
        # Not by language: a lab's result holds its text untranslated (N_, Msg), shown in the
        # language of the screen; one carrying English would fail the Chinese scenarios,
        # which look for English words after the English ones computed it.
        key = ("lab", lab.id, seed, repr(params), _described(impls))
        if key not in computed:
            computed[key] = real_lab(lab, seed, impls, params)
        return copy.deepcopy(computed[key])

    def verify_clean_room(target, *args, **kwargs):
        # Not by language either: a report holds its messages and diagnoses untranslated
        # (`shown`, a Msg), so the Chinese scenarios show what the English ones computed.
        # nor by `progress`, a new closure at every call (its repr an address): it only
        # reports how far the verify is
        said = sorted((k, v) for k, v in kwargs.items() if k != "progress")
        key = ("verify", str(target), repr(args), repr(said))
        if key not in computed:
            computed[key] = real_verify(target, *args, **kwargs)
        return computed[key]

    def build_report(root, out=None):
        # what the records hold is part of the key: a test edits them and draws again
        files = sorted(p for p in Path(root).rglob("*") if p.is_file())
        held = hashlib.sha256(b"".join(bytes(p) + p.read_bytes() for p in files)).hexdigest()
        key = ("report", i18n.language(), str(root), str(out), held)
        if key not in computed:
            computed[key] = real_report(root, out)
        return copy.deepcopy(computed[key])

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(report_module, "build_report", build_report)
        patch.setattr(runner_module, "run_lab", run_lab)
        patch.setattr(verify_module, "verify_clean_room", verify_clean_room)
        yield


def _described(impls: dict) -> tuple:
    """Each implementation by what it runs: its name, whether it is shown, and its module or
    room folder (an Implementation's repr is its address, new at every run)."""
    described = []
    for name, impl in sorted(impls.items()):
        target = impl._target
        runs = getattr(target, "path", None) or getattr(target, "__name__", type(target).__name__)
        described.append((name, impl.hidden, str(runs), getattr(target, "isolation", None)))
    return tuple(described)


def _invoke(args: list[str], lang: str, columns: int | None):
    env = {**LOCALE, "COLUMNS": None if columns is None else str(columns)}
    return runner.invoke(app, ["--lang", lang, *args], env=env, prog_name="labctl")


def too_wide(text: str, width: int = WIDTH) -> list[str]:
    return [line for line in text.splitlines() if cell_len(line) > width]


_WORD = re.compile(r"[A-Za-z0-9_.]+")


def split_words(narrow: str, wide: str, width: int = WIDTH) -> list[str]:
    """Words of `wide` that `narrow` shows split across two lines: the last piece of a line
    and the first of the next, joined, make a word that `wide` holds and that is not wider
    than the line (such a word is folded, as it must be)."""
    words = set(_WORD.findall(wide))
    lines = [line.strip(FRAME) for line in narrow.splitlines()]
    found = []
    for line, following in pairwise(lines):
        end, start = re.search(r"[A-Za-z0-9_.]+$", line), re.match(r"[A-Za-z0-9_.]+", following)
        if end and start:
            joined = end.group() + start.group()
            # both pieces of a word have a letter: numbers at a row's end and the next row's
            # start are cells (`32` / `K/V heads`)
            pieces = (end.group(), start.group())
            lettered = all(re.search("[A-Za-z]", piece) for piece in pieces)
            if joined in words and len(joined) <= width and lettered:
                found.append(f"{end.group()}|{start.group()}: {line[-30:]!r} / {following[:30]!r}")
    return found


def starting_with_closing(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip(FRAME)[:1] in tuple(CLOSING)]


def _scenario(args: list[str], codes: tuple[int, ...], lang: str, typed=()):
    narrow = _invoke(args, lang, WIDTH)
    assert narrow.exit_code in codes, narrow.output
    assert "Traceback" not in narrow.output, narrow.output
    unset = _invoke(args, lang, None)  # a pipe or a CI log: 80 columns too
    assert unset.exit_code == narrow.exit_code, unset.output
    wide = _invoke(args, lang, WIDE)
    problems = {
        "wider than 80": too_wide(narrow.output) + too_wide(unset.output),
        "split words": split_words(narrow.output, wide.output),
        "lines starting with closing punctuation": starting_with_closing(narrow.output),
    }
    if lang == "zh":
        problems["English words"] = english_words(wide.output, frozenset(typed))
    assert not any(problems.values()), {k: v for k, v in problems.items() if v}
    return narrow, wide


SCENARIOS = [
    (["list"], (0,)),
    (["show", "nosuch"], (2,)),
    (["show", "all"], (2,)),
    (["contract", "show"], (0,)),
    (["contract", "show", "--contract", "2"], (0,)),
    (["contract", "check", "--path", "room_stub"], (1,)),
    (["contract", "check", "--path", "room_ok"], (0,)),
    (["clean-room", "init", "room_stub"], (1,)),
    (["verify", "clean-room"], (2,)),
    (["doctor"], (0, 1)),
    (["evidence", "template"], (0,)),
    (["evidence", "validate", "bad_submission.yaml"], (1,)),
    (["evidence", "submit", "bad_submission.yaml"], (1,)),
    (["evidence", "validate", "no_such_file.yaml"], (2,)),
    (["run", "nosuch"], (2,)),
    (["run", "gqa", "--set", "C=abc"], (2,)),
    (["run", "gqa", "--set", "H=3"], (2,)),
    (["nosuch"], (2,)),
    (["report", "--root", "no_such_folder"], (2,)),
]
TYPED = ("nosuch", "m1", "abc", "xyz")


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("args", [s[0] for s in SCENARIOS], ids=" ".join)
def test_every_command_fits_80_columns_in_words_of_its_language(place, monkeypatch, args, lang):
    monkeypatch.chdir(place)
    codes = dict((tuple(a), c) for a, c in SCENARIOS)[tuple(args)]
    _scenario(args, codes, lang, TYPED)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_lab_s_show_fits_in_words_of_its_language(place, monkeypatch, lang):
    monkeypatch.chdir(place)
    for lab in registry.discover():
        _scenario(["show", lab.id], (0,), lang)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_help_fits_80_columns(place, monkeypatch, lang):
    import typer

    monkeypatch.chdir(place)
    paths: list[list[str]] = []

    def walk(command, path: list[str]) -> None:
        paths.append(path)
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])
    for path in paths:
        _scenario([*path, "--help"], (0,), lang)


@pytest.mark.slow
@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize(
    ("args", "codes"),
    [
        (["verify", "clean-room", "--path", "room_ok", "--seed", "5", "--out", "v"], (0,)),
        (["verify", "clean-room", "--path", "room_bad", "--seed", "5", "--no-metrics",
          "--out", "v"], (1,)),
        (["verify", "clean-room", "--path", "room_stub", "--seed", "5", "--no-metrics",
          "--out", "v"], (1,)),
        (["run", "kv-cache", "positions", "--clean-room", "room_bad", "--out", "r"], (1,)),
    ],
    ids=["verify-passing", "verify-failing", "verify-stubs", "run-failing"],
)  # fmt: skip
def test_verify_and_a_failing_run_fit_in_words_of_their_language(
    place, cached, monkeypatch, args, codes, lang
):
    monkeypatch.chdir(place)
    narrow, _wide = _scenario(args, codes, lang)
    if args[0] == "verify" and lang == "zh":
        # the check names, heads and legend are words of the catalog, not `imp sig run`
        assert "导入策略" in narrow.output and "parity" not in narrow.output


@pytest.mark.slow
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_lab_runs_within_80_columns_in_words_of_its_language(
    place, cached, monkeypatch, lang
):
    monkeypatch.chdir(place)
    narrow, wide = _scenario(["run", "all", "--out", f"runs-{lang}", *SMALL], (0,), lang)
    for lab in registry.discover():
        assert lab.id in narrow.output
    # nothing is cut: the only "…" are those the labs write themselves
    assert narrow.output.count("…") == wide.output.count("…")
    report = _scenario(["report", "--root", f"runs-{lang}", "--out", f"report-{lang}.html"],
                       (0,), lang)  # fmt: skip
    assert Path(place / f"report-{lang}.html").is_file(), report


# ---- the checks themselves ------------------------------------------------------------------


def test_a_split_word_a_wide_line_and_a_line_starting_with_a_comma_are_caught():
    wide = "dtype float64 returned; see results.json for more"
    assert split_words("dtype floa\nt64 returned; see results.js\non for more", wide) == [
        "floa|t64: 'dtype floa' / 't64 returned; see results.js'",
        "results.js|on: 't64 returned; see results.js' / 'on for more'",
    ]
    assert split_words("dtype float64\nreturned", wide) == []
    assert too_wide("中" * 41) == ["中" * 41] and too_wide("中" * 40) == []
    assert starting_with_closing("一二三\n，四五") == ["，四五"]
    assert english_words("熵，reference") and english_words("实现 both")
    assert not english_words("熵，参考实现；clean room；`--impl both`")


@pytest.mark.slow
def test_the_report_shows_the_verify_history_s_diagnosis_in_its_language(place, monkeypatch):
    """The history kept verify's diagnosis in English only: the Chinese report showed
    'the causal triangle is reversed' in a Chinese page."""
    import json

    monkeypatch.chdir(place)
    args = ["verify", "clean-room", "--path", "room_bad", "--seed", "5", "--no-metrics"]
    result = _invoke([*args, "--out", "history_root/verify"], "en", WIDTH)
    assert result.exit_code == 1, result.output
    history = place / "history_root" / "verify" / "history.jsonl"
    entry = json.loads(history.read_text("utf-8").splitlines()[-1])
    assert len(entry["diagnosis_messages"]) == len(entry["diagnosis"])
    shown = _invoke(["report", "--root", "history_root", "--out", "history.html"], "zh", WIDTH)
    assert shown.exit_code == 0, shown.output
    page = (place / "history.html").read_text("utf-8")
    assert "因果三角写反了" in page and "the causal triangle is reversed" not in page
    # a history written before the messages were kept is still shown, in its English
    del entry["diagnosis_messages"]
    history.write_text(json.dumps(entry) + "\n", "utf-8")
    _invoke(["report", "--root", "history_root", "--out", "history.html"], "zh", WIDTH)
    assert "the causal triangle is reversed" in (place / "history.html").read_text("utf-8")
