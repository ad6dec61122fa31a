"""The console script prints the root's help, `--version` and `labctl list` before anything
heavy is imported (`labctl.cli.entry`), the same texts the command tree prints
(`labctl.cli.plain`), and hands every other command line to the tree. The budgets
themselves (0.10x and 0.25x `import torch`) are measured by benchmarks/startup.py, not here."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from labctl.cli import entry
from labctl.cli.main import app

HEAVY = ("typer", "click", "rich.console", "pydantic", "numpy", "torch", "labctl.labs")
ENV = {"COLUMNS": "80", "NO_COLOR": "1", "LABCTL_LANG": "", "LC_ALL": "", "LANG": ""}
FAST = [["--help"], ["--version"], ["list"], ["list", "--json"], ["--lang", "zh", "--help"],
        ["--lang=zh", "list"], ["--lang", "en", "list", "--json"]]  # fmt: skip
# What the console script runs (`labctl = "labctl.cli.entry:main"`), and then the modules it
# imported: an import profile misses those imported by importlib (the commands, the labs).
SCRIPT = (
    "import atexit, json, sys\n"
    "atexit.register(lambda: print(json.dumps(sorted(sys.modules)), file=sys.stderr))\n"
    "sys.argv[0] = 'labctl'\n"
    "from labctl.cli.entry import main\n"
    "main()\n"
)


def console(*args: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    """`labctl ARGS` as the console script runs it, and the modules it imported."""
    env = {**os.environ, **ENV}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, *args], capture_output=True, text=True, env=env
    )
    return done, json.loads(done.stderr.splitlines()[-1])


@pytest.mark.parametrize("args", FAST, ids=" ".join)
def test_help_version_and_list_import_nothing_heavy_and_print_what_the_tree_prints(args):
    done, imported = console(*args)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "labctl.cli.entry" in imported and "labctl.cli.main" not in imported
    heavy = [m for m in imported if m.startswith(HEAVY)]
    assert not heavy, heavy
    tree = CliRunner().invoke(app, args, env=ENV, prog_name="labctl")
    assert tree.exit_code == 0, tree.output
    assert done.stdout == tree.stdout


def test_no_arguments_print_the_help_with_usages_exit_code():
    done, _imported = console()
    tree = CliRunner().invoke(app, [], env=ENV, prog_name="labctl")
    assert done.returncode == tree.exit_code == 2
    assert done.stdout == tree.stdout and "list" in done.stdout


@pytest.mark.parametrize(
    "args",
    [["list", "--bogus"], ["--lang", "fr", "list"], ["list", "extra"], ["--lang", "zh"]],
    ids=" ".join,
)
def test_anything_else_goes_to_the_tree_and_its_errors(args):
    assert entry.fast(args) is None
    done, imported = console(*args)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "labctl.cli.main" in imported
    assert "Traceback" not in done.stderr


def test_the_list_is_the_labs_index_in_the_language_asked_for_and_english_for_tools():
    done, _imported = console("--lang", "zh", "list")
    assert "因果注意力：用断言来证明" in done.stdout
    done, _imported = console("--lang", "zh", "list", "--json")
    listed = json.loads(done.stdout)
    assert listed["labs"][0]["id"] == "causal-attention"
    assert listed["labs"][0]["title"] == "Causal attention, proved by assertions"


def test_the_help_lists_every_command_and_each_runs_its_own_module_only():
    from labctl.cli.commands import COMMANDS

    done, _imported = console("--help")
    for command in COMMANDS:
        assert f"│ {command.name} " in done.stdout
    done, imported = console("contract", "--help")
    assert done.returncode == 0, done.stderr[-2000:]
    commands = {c.module for c in COMMANDS}
    assert [m for m in imported if m in commands] == ["labctl.cli.contract"]


MEASURING = (
    "import json, sys\n"
    "from labctl import registry\n"
    "from labctl.evidence.modules import MODULES\n"
    "found = registry.measuring(MODULES[0].required)\n"
    "labs = sorted(m for m in sys.modules if m.startswith('labctl.labs.'))\n"
    "print(json.dumps([{n: lab.id for n, (lab, _) in found.items()}, labs]))\n"
)


def test_verify_imports_only_the_labs_that_measure_the_templates_metrics():
    from labctl import registry
    from labctl.evidence.modules import MODULES

    done = subprocess.run([sys.executable, "-c", MEASURING], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    found, imported = json.loads(done.stdout)
    table = registry.metric_table()
    assert found == {name: table[name][0].id for name in MODULES[0].required}
    assert imported == sorted({f"labctl.labs.{i.replace('-', '_')}" for i in found.values()})
    assert len(imported) < len(registry.discover())


def test_a_metric_the_frozen_table_misplaces_is_found_in_the_whole_table(monkeypatch):
    from labctl import registry

    table = registry.metric_table()
    frozen = {**registry.frozen_table(registry.TOLERANCE_TABLE_VERSION)}
    frozen["future_token_invariance"] = {**frozen["future_token_invariance"], "lab": "gqa"}
    monkeypatch.setattr(registry, "frozen_table", lambda version: frozen)
    found = registry.measuring(
        ["future_token_invariance", "gqa_full_kv_vs_mha_max_error", "no-such-metric"]
    )
    assert found == {
        n: table[n] for n in ("future_token_invariance", "gqa_full_kv_vs_mha_max_error")
    }


def test_a_clean_rooms_worker_starts_without_the_isolation_levels():
    """The worker's start imports what runs a room, not what picks a level (bubblewrap's
    probes, subprocess, concurrent.futures: a tenth of a second of each of the thousands of
    worker starts a class's grading makes)."""
    code = (
        "import json, sys; import labctl.isolation.worker; print(json.dumps(sorted(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    imported = set(json.loads(done.stdout))
    assert not imported & {"labctl.isolation.levels", "labctl.isolation.bwrap", "subprocess",
                           "concurrent.futures"}, sorted(imported)  # fmt: skip
    from labctl.isolation import ISOLATION_LEVELS, resolve_isolation

    assert "sandbox" in ISOLATION_LEVELS and callable(resolve_isolation)


def test_a_clean_rooms_worker_starts_without_labctls_staging_modules():
    """The folders labctl stages for a worker are labctl's business: their `shutil` and
    `tempfile` (and the compressors and `random` these bring) were ~3 ms of every worker's
    start. The worker as the sandbox starts it: its staged modules and numpy, no site."""
    from labctl.isolation import bwrap

    staged = bwrap.staged_worker()
    code = (
        "import json, sys; sys.path[:0] = sys.argv[1:]; import labctl.isolation.worker; "
        "print(json.dumps(sorted(sys.modules)))"
    )
    command = [bwrap.python_binary(), "-I", "-S", "-c", code, str(staged / "site"), str(staged)]
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    imported = set(json.loads(done.stdout))
    assert "labctl.isolation.worker" in imported and "numpy" in imported
    assert not imported & {"shutil", "tempfile", "random", "bz2", "lzma"}, sorted(imported)


# A command through the tree, and what a process leaves for its exit: a thread still
# working, an `atexit` function, output in stdout's buffer, and an object that only the
# interpreter's teardown of the modules would finalize.
ENDING = (
    "import atexit, os, sys, threading, time\n"
    "marks = sys.argv.pop(1)\n"
    "def mark(what, marks=marks, os=os):  # its own references: a teardown clears the globals\n"
    "    fd = os.open(marks, os.O_WRONLY | os.O_APPEND | os.O_CREAT)\n"
    "    os.write(fd, what.encode() + b'\\n')\n"
    "    os.close(fd)\n"
    "class TornDown:\n"
    "    def __del__(self, mark=mark):\n"
    "        mark('teardown')\n"
    "kept = TornDown()\n"
    "threading.Thread(target=lambda: (time.sleep(0.3), mark('thread'))).start()\n"
    "atexit.register(mark, 'atexit')\n"
    "sys.argv[0] = 'labctl'\n"
    "from labctl.cli.entry import main\n"
    "main()\n"
)


@pytest.mark.parametrize(("args", "code"), [(["show", "gqa"], 0), (["show", "nosuch"], 2)])
def test_a_command_ends_with_its_threads_atexit_and_output_but_no_module_teardown(
    tmp_path, args, code
):
    """The interpreter's teardown of every module (torch's alone is ~0.5 s) is skipped; what
    anyone could see of an exit is not: threads waited for, atexit run, output flushed, and
    the exit code the command chose."""
    marks = tmp_path / "marks"
    env = {**os.environ, **ENV}
    done = subprocess.run(
        [sys.executable, "-c", ENDING, str(marks), *args], capture_output=True, text=True, env=env
    )
    assert done.returncode == code, done.stderr[-2000:]
    assert ("gqa" in done.stdout) if code == 0 else ("nosuch" in done.stderr), done
    assert marks.read_text().split() == ["thread", "atexit"]


@pytest.mark.parametrize(("code", "expected"), [(None, 0), (3, 3), (True, 1), ("stopped", 1)])
def test_exit_codes_are_those_python_gives(code, expected):
    done = subprocess.run(
        [sys.executable, "-c", f"from labctl.cli.entry import end; end({code!r})"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == expected, done
    assert done.stderr == ("stopped\n" if code == "stopped" else ""), done
