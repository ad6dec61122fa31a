"""English words in Chinese output: every word that is not an identifier labctl or the course names.

A word is a run of Latin letters standing alone (between spaces, CJK text or
punctuation). A token holding `_`, `.`, `/`, `=`, `-`, a digit or a bracket is
an identifier (a metric name, a path, `--seed`, `d_k=64`, `causal-attention`)
and is never a word, nor is a quoted name ('labs'). The course's chapter titles
and section headings are quoted as written and taken out whole. What remains
must be on the allow-list, which is derived from labctl itself (lab ids,
parameter names, metric units, contract functions and their parameters, command
names and metavars, evidence field names) plus a short explicit list of names
and terms the glossary keeps in Latin letters. Nothing else passes: an English
sentence is as many findings as it has words.
"""

from __future__ import annotations

import re
from functools import cache

# Names and terms the glossary keeps in Latin letters (docs/glossary.md, "kept as written"),
# formats, tools and the values of labctl's options.
EXPLICIT = {
    # the course's terms kept in Latin letters
    "Attention", "attention", "Transformer", "Block", "token", "tokens",
    "KV", "Cache", "RoPE", "GQA", "MQA", "MHA", "FFN", "SwiGLU", "GeGLU", "ReLU", "SiLU",
    "LayerNorm", "RMSNorm", "softmax", "Softmax", "online", "logits", "logit", "decoder",
    "Decoder", "pre", "post", "norm", "FlashAttention", "Llama", "HuggingFace", "HF",
    "padding", "head", "heads", "causal", "scale", "Padding", "Mask", "Causal", "SWA",
    "FLOPs", "FLOP", "NaN", "inf", "Q", "K", "V", "O", "W", "x", "y", "i", "j", "p", "t",
    "dtype", "float", "int", "bool", "dict", "None", "True", "False", "tuple",
    "argmax", "sqrt", "exp", "max", "min", "mean", "var", "sin", "cos", "ln", "log", "pi",
    "tril", "triu", "is_causal", "view", "transpose", "reshape", "matmul", "einsum",
    "fixture", "fixtures", "pnpm", "pytest", "query", "key", "keys", "value", "values",
    "block", "blocks", "prompt", "encoder", "embedding", "silu", "sigmoid", "attn", "itemsize", "ulp",
    "nat", "hang",
    # tools, formats, systems
    "labctl", "numpy", "NumPy", "torch", "PyTorch", "Python", "matplotlib", "bubblewrap",
    "bwrap", "seccomp", "keyctl", "memfd_create", "unshare", "CLONE_NEWUSER", "EPERM",
    "JSON", "YAML", "HTML", "SVG", "JUnit", "Gradescope", "Dask", "copydetect", "pip",
    "apt", "dnf", "Debian", "Ubuntu", "Fedora", "Linux", "CJK", "UTF", "CPU", "GPU",
    "uid", "PID", "IPC", "UTS", "sha", "tracemalloc", "git", "stdin", "stdout", "stderr",
    "LABCTL_LANG", "LABCTL_DEBUG", "NO_COLOR", "COLUMNS", "CI", "locale", "schema",
    "OK", "ok", "Ctrl", "mount", "runs", "submissions", "manifest", "autograd", "BLAS", "Adam", "GLU", "repeat", "diag", "PE",
    "Step", "running", "sum", "Tp", "Tn", "Dv", "Tq", "Tk", "Hkv", "fp16", "nats",
    # 第8章 阶段四's circuits, as the chapter writes them (QK 电路, OV 电路)
    "QK", "OV",
    # contract v2's terms and the v2 labs' dimension names (the trained length)
    "GELU", "tanh", "erf", "ALiBi", "NTK", "PI", "Ttrain", "Tmax", "Infra",
    "rad", "ISO", "Canvas", "canvas", "LMS",
    # the font the report's Chinese glyphs come from, and the package that installs it
    "Noto", "Sans", "SC", "pylopdf", "fonts", "cn",
    # the values contract v2's parameters take (rope scaling, decoder_forward's positional)
    "linear", "ntk", "none", "learned", "alibi", "sinusoidal", "rope",
    # the tokens of 第8章 阶段二's attention figure, quoted as the course prints them
    "The", "cat", "sat",
    # the columns of the CSV files grade reads: learner ids and Canvas's own headers
    "learner", "Student", "ID", "SIS", "User", "Login", "Section", "CSV",
    # units
    "B", "KiB", "MiB", "GiB", "GB", "ms", "s",
    # authors and the paper the course cites, named as the course names them
    "Xiong", "Ainslie", "et", "al", "Vaswani",
    # 第8章 阶段五's serving terms, and the published models and papers the worked-examples
    # lab recomputes the chapters' memory and time from ("base": the paper's model's name)
    "Prefill", "Worker", "Decode", "RDMA", "NDR", "MB", "Mistral", "Touvron", "Jiang", "base",
    # values of labctl's options (an option's value after it is taken out whole: FORMULAS)
    "zh", "en", "auto", "all", "info",
    # typer's type names in help (`<int>`, `<path>`) and its usage line
    "OPTIONS", "COMMAND", "ARGS", "str", "path", "list",
}  # fmt: skip

TOKEN = re.compile(
    r"[^\s\u3000-\u303f\u4e00-\u9fff\uff00-\uffef，。：；、（）“”‘’《》·…—│╭╮╰╯─┃━]+"
)
WORD = re.compile(r"[A-Za-z]+(?:'[a-z]+)?")
# A token with code's punctuation, a digit, a mathematical sign, a hyphen inside or a capital inside (CamelCase:
# NotImplementedError, LayerNorm) names something; it is not prose.
IDENTIFIER = re.compile(r"[_./=\[\]{}<>@#$%^&*+|\\~`0-9ᵀ²√·×‖ΣΔ]|[A-Za-z]-[A-Za-z]|^-|[a-z][A-Z]")


@cache
def allowed() -> frozenset[str]:
    """Words that are identifiers of labctl or the course's own headings."""
    from labctl import contract, registry
    from labctl.evidence.models import EvidenceRecord

    words: set[str] = set(EXPLICIT)
    for lab in registry.discover():
        words.update(lab.id.split("-"))
        words.update(lab.params.model_fields)
        for metric in lab.metrics:
            words.update(WORD.findall(metric.unit))
    for fn in contract.functions(contract.LATEST):
        words.add(fn.name)
        words.update(p.name for p in fn.params)
        # named results and dict entries: out (B, H, Tq, Dv), embed (V, C)
        for text in (fn.returns, *(p.shape or "" for p in fn.params)):
            words.update(re.findall(r"(\w+) \(", text))
    words.update(_field_names(EvidenceRecord))
    words.update(_command_words())
    return frozenset(words)


@cache
def course_titles() -> re.Pattern:
    """The course's chapter titles, section headings and printed formulas, quoted as written
    (some hold English words): removed whole, so their words are not allowed anywhere else."""
    from labctl import registry
    from labctl.course import CHAPTERS

    titles = {c.title for c in CHAPTERS}
    titles |= {s.heading for lab in registry.discover() for s in lab.sections}
    titles |= {s.part for lab in registry.discover() for s in lab.sections}
    titles |= {s.chapter.title for lab in registry.discover() for s in lab.sections}
    # the formulas the chapters print, quoted as printed by the worked-examples lab
    from labctl.labs.worked_examples_formulas import ELSEWHERE
    from labctl.labs.worked_examples_formulas import FORMULAS as PRINTED

    titles |= {f.printed for f in PRINTED} | {printed for _, printed, _, _ in ELSEWHERE}
    ordered = sorted((t for t in titles if t), key=len, reverse=True)
    return re.compile("|".join(re.escape(t) for t in ordered))


def _field_names(model) -> set[str]:
    names: set[str] = set()
    seen: set = set()

    def walk(m) -> None:
        if m in seen or not hasattr(m, "model_fields"):
            return
        seen.add(m)
        for name, field in m.model_fields.items():
            names.add(name)
            names.update(name.split("_"))
            for arg in getattr(field.annotation, "__args__", (field.annotation,)):
                walk(arg)

    walk(model)
    return names


def _command_words() -> set[str]:
    """Command names, argument names and metavars of the command tree (options start with
    `--`, so they are identifiers already)."""
    import typer

    from labctl.cli.main import app

    words: set[str] = set()

    def walk(command, name: str) -> None:
        words.update(name.split("-"))
        for param in command.params:
            if param.param_type_name == "argument":  # named in usage and help: {file}
                words.update(param.name.split("_"))
            if getattr(param, "metavar", None):
                words.update(WORD.findall(param.metavar))
        for sub_name, sub in getattr(command, "commands", {}).items():
            walk(sub, sub_name)

    walk(typer.main.get_command(app), "labctl")
    return words


# The papers the course cites by title. Code in backticks, a default in help (a value), a
# command the text quotes and an option with its value (`--impl both`) are not prose; nor is
# "clean room", the glossary's term kept as the chapters write it ("reference", "both",
# "sandbox" alone are English on a Chinese screen: 参考实现, 两种实现, 沙箱).
FORMULAS = re.compile(
    r"On Layer Normalization in the Transformer Architecture|`[^`]*`"
    r"|A Mathematical Framework for Transformer Circuits"
    r"|\[默认：[^\]]*\]|\b(?:apt-get|pip|dnf) install \S+|(?<!\S)--[\w-]+[ =][^\s，；。、）]+"
    r"|\bclean room\b"
)


def english_words(output: str, extra: frozenset[str] = frozenset()) -> list[str]:
    """Every English word of `output` not on the allow-list, with the line it stands in.

    A single letter is a symbol of a formula (`h`, `Q`), never a word."""
    known = allowed() | extra
    found = []
    for line in course_titles().sub(" ", FORMULAS.sub(" ", output)).splitlines():
        for token in TOKEN.findall(line):
            if re.fullmatch(r"'[^']+'[.,;:]?", token):
                continue  # a quoted name: 'labs', 'nosuch'
            core = token.strip("'\"()[]{}<>,.;:!?*`")
            if not core or IDENTIFIER.search(core):
                continue
            for word in WORD.findall(core):
                if len(word) > 1 and word not in known and word.lower() not in known:
                    found.append(f"{word!r} in {line.strip()[:100]!r}")
    return found
