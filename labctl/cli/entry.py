"""The console script `labctl`: the root's help, `--version` and `labctl list` at once, the
rest through the command tree.

Those three are what a learner waits for most, and they read nothing a parser must check:
printed from `labctl.cli.plain` here, before typer, rich, pydantic or numpy is imported,
they take a tenth of what importing the tree does. Any other command line, or any form of
these that is not written exactly so (a typo, an option of `list` it lacks, `--lang` with
a value labctl does not speak), goes to `labctl.cli.main`, which parses it, reports errors
and prints the same texts from the same module.

Every command ends in `end`: what the interpreter does at exit that anyone can see (threads
waited for, `atexit`, stdout and stderr flushed), without its teardown of every module,
which for torch alone takes ~0.5 s (a third of `python -c "import torch"`) after the
command's work and output are done.
"""

import atexit
import codecs
import contextlib
import os
import signal
import sys
import threading

EXIT_USAGE = 2  # labctl.errors.EXIT_USAGE: no args is help, as click does
LANGUAGES = ("zh", "en")  # the values --lang takes (labctl.cli.lang.Language)


def fast(args: list[str]) -> tuple[str | None, str, bool] | None:
    """(the language asked for, what to print, json) for a command line printed here;
    None for every other."""
    lang = None
    words = list(args)
    while words[:1] and words[0].startswith("--lang"):
        if words[0] == "--lang" and len(words) > 1:
            lang, words = words[1], words[2:]
        elif words[0].startswith("--lang="):
            lang, words = words[0].split("=", 1)[1], words[1:]
        else:
            return None
        if lang.lower() not in LANGUAGES:
            return None
    if words == [] and not args:
        return None, "no-args", False
    if words == ["--help"]:
        return lang, "help", False
    if words == ["--version"]:
        return lang, "version", False
    if words in (["list"], ["list", "--json"]):
        return lang, "list", words == ["list", "--json"]
    return None


def standard_streams() -> None:
    """Descriptors 0, 1 and 2 open, on /dev/null where the caller closed them (`<&-`, `>&-`):
    a closed one is the next file labctl opens (a clean room's socket became its worker's
    stdin, which the worker's start replaced: a working room was `unloadable`), and Python
    leaves its stream None, whose first write raised. What labctl writes to a stream its
    caller closed is lost, as the caller asked."""
    for fd, mode in ((0, os.O_RDONLY), (1, os.O_WRONLY), (2, os.O_WRONLY)):
        try:
            os.fstat(fd)
        except OSError:
            opened = os.open(os.devnull, mode)
            if opened != fd:
                os.dup2(opened, fd)
                os.close(opened)
    for name, fd, mode in (("stdin", 0, "r"), ("stdout", 1, "w"), ("stderr", 2, "w")):
        if getattr(sys, name) is None:
            # the process's own stream, open until it ends: no context to close it in
            stream = open(fd, mode, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
            setattr(sys, name, stream)


def _escaped(error: UnicodeEncodeError) -> tuple[str, int]:
    """What a stream that cannot encode a character writes for it: JSON's own escape (`\\u4e2d`,
    a surrogate pair past the BMP), so a `--json` document stays the same document."""
    escapes = []
    for char in error.object[error.start : error.end]:
        code = ord(char)
        if code > 0xFFFF:
            code -= 0x10000
            escapes += [0xD800 + (code >> 10), 0xDC00 + (code & 0x3FF)]
        else:
            escapes.append(code)
    return "".join(f"\\u{c:04x}" for c in escapes), error.end


def encodable_streams() -> None:
    """stdout and stderr write every character, whatever their encoding: one they cannot encode
    (PYTHONIOENCODING=ascii, a Latin-1 terminal) is written as its JSON escape, where Python's
    default raised at the first Chinese word (a traceback, and half a JSON document)."""
    codecs.register_error("labctl-escape", _escaped)
    for stream in (sys.stdout, sys.stderr):
        encoding = codecs.lookup(getattr(stream, "encoding", None) or "utf-8").name
        if encoding.startswith("utf") or getattr(stream, "errors", "") != "strict":
            continue
        with contextlib.suppress(AttributeError, ValueError, OSError):
            stream.reconfigure(errors="labctl-escape")


def main() -> None:
    standard_streams()
    encodable_streams()
    # Stopped by SIGTERM (a job's time limit, `kill`), labctl ends as on Ctrl-C: its clean
    # rooms closed, its temporary folders removed, `interrupted` said (in JSON too); the
    # default ended it at once and left them for no later run to remove.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    chosen = fast(sys.argv[1:])
    text = None
    if chosen is not None:
        lang, what, json_ = chosen
        text = _text(lang, what, json_)
    if text is None:
        from labctl.cli.main import main as parsed

        try:
            parsed()
        except SystemExit as stop:
            end(stop.code)
        end(0)
    code = EXIT_USAGE if what == "no-args" else 0
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:
        # stdout's reader went away (`labctl list | head -1`): quietly, exit 1, as the tree does
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 1
    end(code)


def end(code: object) -> None:
    """Exit with `code` as Python's own exit does its first three steps (`Py_FinalizeEx`):
    the threads that are not daemons waited for (a lab interrupted by Ctrl-C ends and closes
    its clean room), the `atexit` functions run (temporary folders, logging), stdout and stderr
    flushed; then the process ends without tearing its modules down. An interpreter without
    `threading._shutdown` exits the usual way."""
    if isinstance(code, str):  # sys.exit("message"), as Python prints it
        print(code, file=sys.stderr)
        code = 1
    code = 0 if code is None else code if isinstance(code, int) else 1
    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is None:
        sys.exit(code)
    shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BrokenPipeError:
            # stdout's reader went away after all: as labctl.cli.main does, exit 1
            code = 1
        except (OSError, ValueError):
            continue
    os._exit(code)


def _text(lang: str | None, what: str, json_: bool) -> str | None:
    """What to print, in the language asked for; None where making it failed (the command
    tree then runs it again and reports the failure as it reports every other)."""
    try:
        from labctl.cli import plain
        from labctl.i18n import choose, set_language

        set_language(choose(lang.lower() if lang else None))
        if what == "list":
            return plain.list_labs(json_)
        return plain.version() if what == "version" else plain.root_help()
    except Exception:
        return None
