"""Clean rooms written independently for the similarity tests: five learners, five styles.

Each learner filled in the same ten functions of the `clean-room init` stubs
(the rest stay stubs, which are base code), in a style of their own: loops,
einsum, small helpers, a class of checks, float32 internals. `renamed` is
learner `einsum`'s room with every name of its own changed, a comment added
and its layout shifted: what a copier does.
"""

from __future__ import annotations

import ast
import io
import keyword
import re
import tokenize
from pathlib import Path

from labctl.verify.stubs import init_source, module_source

LOOPS = {
    "softmax": """
def softmax(x, axis=-1):
    x = np.asarray(x)
    moved = np.moveaxis(x, axis, -1)
    out = np.zeros(moved.shape, dtype=x.dtype if x.dtype.kind == "f" else float)
    for idx in np.ndindex(moved.shape[:-1]):
        row = moved[idx]
        top = row.max()
        if top == -np.inf:
            continue
        ex = np.exp(row - top)
        out[idx] = ex / ex.sum()
    return np.moveaxis(out, -1, axis)
""",
    "causal_mask": """
def causal_mask(t_q, t_k=None):
    if t_k is None:
        t_k = t_q
    mask = np.zeros((t_q, t_k), dtype=bool)
    for i in range(t_q):
        for j in range(t_k):
            if j > t_k - t_q + i:
                mask[i, j] = True
    return mask
""",
    "padding_mask": """
def padding_mask(lengths, t):
    lengths = np.asarray(lengths)
    out = np.zeros((len(lengths), 1, 1, t), dtype=bool)
    for b in range(len(lengths)):
        for j in range(t):
            out[b, 0, 0, j] = j >= lengths[b]
    return out
""",
    "scaled_dot_product_attention": """
def scaled_dot_product_attention(q, k, v, mask=None, scale=None):
    B, H, Tq, D = q.shape
    group = H // k.shape[1]
    if scale is None:
        scale = 1.0 / np.sqrt(D)
    out = np.zeros(q.shape[:3] + (v.shape[-1],), dtype=q.dtype)
    for b in range(B):
        for h in range(H):
            kh = k[b, h // group]
            vh = v[b, h // group]
            s = q[b, h] @ kh.T * scale
            if mask is not None:
                m = np.broadcast_to(mask, (B, H, Tq, kh.shape[0]))[b, h]
                s = np.where(m, -np.inf, s)
            out[b, h] = softmax(s, axis=-1) @ vh
    return out
""",
    "split_heads": """
def split_heads(x, n_heads):
    B, T, C = x.shape
    size = C // n_heads
    out = np.empty((B, n_heads, T, size), dtype=x.dtype)
    for h in range(n_heads):
        out[:, h] = x[:, :, h * size:(h + 1) * size]
    return out
""",
    "merge_heads": """
def merge_heads(x):
    B, H, T, D = x.shape
    out = np.empty((B, T, H * D), dtype=x.dtype)
    for h in range(H):
        out[:, :, h * D:(h + 1) * D] = x[:, h]
    return out
""",
    "rms_norm": """
def rms_norm(x, weight, eps=1e-6):
    squares = np.zeros(x.shape[:-1] + (1,), dtype=x.dtype)
    for c in range(x.shape[-1]):
        squares[..., 0] += x[..., c] ** 2
    return x / np.sqrt(squares / x.shape[-1] + eps) * weight
""",
    "layer_norm": """
def layer_norm(x, weight, bias, eps=1e-5):
    n = x.shape[-1]
    total = np.zeros(x.shape[:-1] + (1,), dtype=x.dtype)
    for c in range(n):
        total[..., 0] += x[..., c]
    mu = total / n
    dev = np.zeros_like(total)
    for c in range(n):
        dev[..., 0] += (x[..., c] - mu[..., 0]) ** 2
    return (x - mu) / np.sqrt(dev / n + eps) * weight + bias
""",
    "relu_ffn": """
def relu_ffn(x, w1, b1, w2, b2):
    h = x @ w1 + b1
    h[h < 0] = 0
    return h @ w2 + b2
""",
    "swiglu_ffn": """
def swiglu_ffn(x, w_gate, w_up, w_down):
    g = x @ w_gate
    sig = 0.5 * (1 + np.tanh(g / 2))
    return (g * sig * (x @ w_up)) @ w_down
""",
}

EINSUM = {
    "softmax": """
def softmax(x, axis=-1):
    z = np.asarray(x, dtype=np.result_type(x, np.float32))
    peak = np.amax(z, axis=axis, keepdims=True)
    peak[~np.isfinite(peak)] = 0
    num = np.exp(z - peak)
    den = num.sum(axis=axis, keepdims=True)
    safe = np.where(den == 0, 1, den)
    return np.where(den == 0, 0, num / safe)
""",
    "causal_mask": """
def causal_mask(t_q, t_k=None):
    t_k = t_q if t_k is None else t_k
    return np.triu(np.ones((t_q, t_k), dtype=bool), k=t_k - t_q + 1)
""",
    "padding_mask": """
def padding_mask(lengths, t):
    keys = np.arange(t)
    blocked = np.less_equal.outer(np.asarray(lengths), keys)
    return blocked.reshape(len(lengths), 1, 1, t)
""",
    "scaled_dot_product_attention": """
def scaled_dot_product_attention(q, k, v, mask=None, scale=None):
    rep = q.shape[1] // k.shape[1]
    k = np.repeat(k, rep, axis=1)
    v = np.repeat(v, rep, axis=1)
    factor = scale if scale is not None else q.shape[-1] ** -0.5
    logits = np.einsum("bhqd,bhkd->bhqk", q, k) * factor
    if mask is not None:
        logits = np.where(mask, -np.inf, logits)
    weights = softmax(logits, axis=-1)
    return np.einsum("bhqk,bhkd->bhqd", weights, v)
""",
    "split_heads": """
def split_heads(x, n_heads):
    b, t, c = x.shape
    return np.einsum("bthd->bhtd", x.reshape(b, t, n_heads, c // n_heads)).copy()
""",
    "merge_heads": """
def merge_heads(x):
    b, h, t, d = x.shape
    return np.einsum("bhtd->bthd", x).reshape(b, t, h * d)
""",
    "rms_norm": """
def rms_norm(x, weight, eps=1e-6):
    ms = np.einsum("...c,...c->...", x, x)[..., None] / x.shape[-1]
    return np.einsum("...c,c->...c", x / np.sqrt(ms + eps), weight)
""",
    "layer_norm": """
def layer_norm(x, weight, bias, eps=1e-5):
    centred = x - x.mean(axis=-1, keepdims=True)
    var = np.einsum("...c,...c->...", centred, centred)[..., None] / x.shape[-1]
    return np.einsum("...c,c->...c", centred / np.sqrt(var + eps), weight) + bias
""",
    "relu_ffn": """
def relu_ffn(x, w1, b1, w2, b2):
    hidden = np.einsum("...c,cf->...f", x, w1) + b1
    hidden = np.clip(hidden, 0, None)
    return np.einsum("...f,fc->...c", hidden, w2) + b2
""",
    "swiglu_ffn": """
def swiglu_ffn(x, w_gate, w_up, w_down):
    gate = np.einsum("...c,cf->...f", x, w_gate)
    up = np.einsum("...c,cf->...f", x, w_up)
    act = gate / (1.0 + np.exp(-gate))
    return np.einsum("...f,fc->...c", act * up, w_down)
""",
}

HELPERS = {
    "softmax": """
def _stable_exp(values, axis):
    biggest = values.max(axis=axis, keepdims=True)
    return np.exp(values - np.where(np.isneginf(biggest), 0.0, biggest))


def softmax(x, axis=-1):
    e = _stable_exp(np.asarray(x), axis)
    s = e.sum(axis=axis, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = e / s
    return np.nan_to_num(r, nan=0.0)
""",
    "causal_mask": """
def _positions(t_q, t_k):
    return np.arange(t_q).reshape(-1, 1) + (t_k - t_q), np.arange(t_k).reshape(1, -1)


def causal_mask(t_q, t_k=None):
    rows, cols = _positions(t_q, t_q if t_k is None else t_k)
    return cols > rows
""",
    "padding_mask": """
def padding_mask(lengths, t):
    _, cols = _positions(1, t)
    lens = np.asarray(lengths).reshape(-1, 1)
    return (cols >= lens)[:, np.newaxis, np.newaxis, :]
""",
    "scaled_dot_product_attention": """
def _expand_kv(t, heads):
    return t if t.shape[1] == heads else np.repeat(t, heads // t.shape[1], axis=1)


def _masked(scores, mask):
    return scores if mask is None else np.where(mask, -np.inf, scores)


def scaled_dot_product_attention(q, k, v, mask=None, scale=None):
    keys = _expand_kv(k, q.shape[1])
    vals = _expand_kv(v, q.shape[1])
    s = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    scores = _masked(np.matmul(q, np.swapaxes(keys, -1, -2)) * s, mask)
    return np.matmul(softmax(scores), vals)
""",
    "split_heads": """
def split_heads(x, n_heads):
    parts = np.split(x, n_heads, axis=-1)
    return np.stack(parts, axis=1)
""",
    "merge_heads": """
def merge_heads(x):
    return np.concatenate([x[:, i] for i in range(x.shape[1])], axis=-1)
""",
    "rms_norm": """
def _mean_last(t):
    return np.mean(t, axis=-1, keepdims=True)


def rms_norm(x, weight, eps=1e-6):
    return weight * x / np.sqrt(_mean_last(np.square(x)) + eps)
""",
    "layer_norm": """
def layer_norm(x, weight, bias, eps=1e-5):
    mu = _mean_last(x)
    sigma2 = _mean_last(np.square(x - mu))
    return bias + weight * (x - mu) / np.sqrt(sigma2 + eps)
""",
    "relu_ffn": """
def _linear(t, w, b=None):
    y = np.matmul(t, w)
    return y if b is None else y + b


def relu_ffn(x, w1, b1, w2, b2):
    return _linear(np.maximum(_linear(x, w1, b1), 0), w2, b2)
""",
    "swiglu_ffn": """
def _silu(t):
    return t * (1 / (1 + np.exp(-np.clip(t, -60, 60))))


def swiglu_ffn(x, w_gate, w_up, w_down):
    return _linear(_silu(_linear(x, w_gate)) * _linear(x, w_up), w_down)
""",
}

CHECKED = {
    "softmax": """
class ContractError(ValueError):
    pass


def _need(condition, what):
    if not condition:
        raise ContractError(what)


def softmax(x, axis=-1):
    arr = np.array(x, dtype=float if np.asarray(x).dtype.kind != "f" else np.asarray(x).dtype)
    shift = np.max(arr, axis=axis, keepdims=True)
    shift = np.nan_to_num(shift, neginf=0.0)
    expd = np.exp(arr - shift)
    norm = np.sum(expd, axis=axis, keepdims=True)
    return np.divide(expd, norm, out=np.zeros_like(expd), where=norm != 0)
""",
    "causal_mask": """
def causal_mask(t_q, t_k=None):
    _need(isinstance(t_q, int) and t_q >= 0, "t_q must be a non-negative int")
    width = t_q if t_k is None else t_k
    offset = width - t_q
    return ~np.tril(np.ones((t_q, width), dtype=bool), offset)
""",
    "padding_mask": """
def padding_mask(lengths, t):
    arr = np.asarray(lengths)
    _need(arr.ndim == 1, "lengths must be 1-D")
    grid = np.broadcast_to(np.arange(t), (arr.shape[0], t))
    return np.expand_dims(grid >= arr[:, None], (1, 2))
""",
    "scaled_dot_product_attention": """
def scaled_dot_product_attention(q, k, v, mask=None, scale=None):
    _need(q.ndim == 4 and k.ndim == 4 and v.ndim == 4, "q, k, v must be 4-D")
    heads, kv_heads = q.shape[1], k.shape[1]
    _need(heads % kv_heads == 0, "H must be a multiple of Hkv")
    k_full = np.repeat(k, heads // kv_heads, axis=1)
    v_full = np.repeat(v, heads // kv_heads, axis=1)
    alpha = (1.0 / math.sqrt(q.shape[-1])) if scale is None else float(scale)
    att = (q @ k_full.transpose(0, 1, 3, 2)) * alpha
    if mask is not None:
        att = np.ma.masked_array(att, np.broadcast_to(mask, att.shape)).filled(-np.inf)
    return softmax(att, axis=-1) @ v_full
""",
    "split_heads": """
def split_heads(x, n_heads):
    _need(x.shape[-1] % n_heads == 0, "C must be divisible by n_heads")
    return np.transpose(np.reshape(x, (*x.shape[:2], n_heads, -1)), (0, 2, 1, 3))
""",
    "merge_heads": """
def merge_heads(x):
    _need(x.ndim == 4, "x must be (B, H, T, D)")
    swapped = np.transpose(x, (0, 2, 1, 3))
    return np.reshape(swapped, (*swapped.shape[:2], -1))
""",
    "rms_norm": """
def rms_norm(x, weight, eps=1e-6):
    _need(weight.shape == x.shape[-1:], "weight must be (C,)")
    denom = np.sqrt(np.mean(np.power(x, 2), axis=-1, keepdims=True) + eps)
    return np.multiply(np.divide(x, denom), weight)
""",
    "layer_norm": """
def layer_norm(x, weight, bias, eps=1e-5):
    _need(weight.shape == bias.shape == x.shape[-1:], "weight and bias must be (C,)")
    var = np.var(x, axis=-1, keepdims=True)
    return np.add(np.multiply((x - np.mean(x, axis=-1, keepdims=True)) / np.sqrt(var + eps), weight), bias)
""",
    "relu_ffn": """
def relu_ffn(x, w1, b1, w2, b2):
    _need(w1.shape[1] == w2.shape[0], "w1 and w2 do not chain")
    pre = np.dot(x, w1) + b1
    return np.dot(pre * (pre > 0), w2) + b2
""",
    "swiglu_ffn": """
def swiglu_ffn(x, w_gate, w_up, w_down):
    _need(w_gate.shape == w_up.shape, "w_gate and w_up must match")
    a = np.dot(x, w_gate)
    silu = a * 0.5 * (1.0 + np.tanh(0.5 * a))
    return np.dot(silu * np.dot(x, w_up), w_down)
""",
}

FLOAT32 = {
    "softmax": """
def softmax(x, axis=-1):
    src = np.asarray(x)
    work = src.astype(np.float32)
    work = work - np.max(work, axis=axis, keepdims=True, initial=-np.inf, where=np.isfinite(work))
    p = np.exp(work)
    z = np.sum(p, axis=axis, keepdims=True)
    p = np.where(z > 0, p / np.maximum(z, np.finfo(np.float32).tiny), 0.0)
    return p.astype(src.dtype if src.dtype.kind == "f" else np.float64)
""",
    "causal_mask": """
def causal_mask(t_q, t_k=None):
    t_k = t_q if t_k is None else t_k
    query_pos = np.arange(t_k - t_q, t_k)
    return np.greater(np.arange(t_k)[np.newaxis], query_pos[:, np.newaxis])
""",
    "padding_mask": """
def padding_mask(lengths, t):
    lens = np.array(lengths, dtype=np.int64)
    return np.arange(t).reshape(1, 1, 1, t) >= lens.reshape(-1, 1, 1, 1)
""",
    "scaled_dot_product_attention": """
def scaled_dot_product_attention(q, k, v, mask=None, scale=None):
    out_dtype = q.dtype
    n = q.shape[1] // k.shape[1]
    kk = np.repeat(k.astype(np.float32), n, axis=1)
    vv = np.repeat(v.astype(np.float32), n, axis=1)
    mult = np.float32(q.shape[-1] ** -0.5 if scale is None else scale)
    sc = np.matmul(q.astype(np.float32) * mult, kk.swapaxes(2, 3))
    if mask is not None:
        sc[np.broadcast_to(mask, sc.shape)] = -np.inf
    return np.matmul(softmax(sc), vv).astype(out_dtype)
""",
    "split_heads": """
def split_heads(x, n_heads):
    batch, steps, width = x.shape
    per_head = width // n_heads
    return x.reshape(batch, steps, n_heads, per_head).swapaxes(1, 2).copy()
""",
    "merge_heads": """
def merge_heads(x):
    batch, heads, steps, per_head = x.shape
    return x.swapaxes(1, 2).reshape(batch, steps, heads * per_head)
""",
    "rms_norm": """
def rms_norm(x, weight, eps=1e-6):
    w32 = x.astype(np.float32)
    inv = 1.0 / np.sqrt((w32 * w32).mean(-1, keepdims=True) + np.float32(eps))
    return (w32 * inv * weight.astype(np.float32)).astype(x.dtype)
""",
    "layer_norm": """
def layer_norm(x, weight, bias, eps=1e-5):
    w32 = x.astype(np.float32)
    m = w32.mean(-1, keepdims=True)
    s = ((w32 - m) ** 2).mean(-1, keepdims=True)
    y = (w32 - m) * (1.0 / np.sqrt(s + np.float32(eps)))
    return (y * weight.astype(np.float32) + bias.astype(np.float32)).astype(x.dtype)
""",
    "relu_ffn": """
def relu_ffn(x, w1, b1, w2, b2):
    inner = np.maximum(0.0, x.astype(np.float32) @ w1.astype(np.float32) + b1.astype(np.float32))
    return (inner @ w2.astype(np.float32) + b2.astype(np.float32)).astype(x.dtype)
""",
    "swiglu_ffn": """
def swiglu_ffn(x, w_gate, w_up, w_down):
    xf = x.astype(np.float32)
    gated = xf @ w_gate.astype(np.float32)
    gated = gated / (1.0 + np.exp(-gated))
    return ((gated * (xf @ w_up.astype(np.float32))) @ w_down.astype(np.float32)).astype(x.dtype)
""",
}

STYLES = {
    "loops": LOOPS,
    "einsum": EINSUM,
    "helpers": HELPERS,
    "checked": CHECKED,
    "float32": FLOAT32,
}

# What a copier changes in `einsum`'s room: every name of its own, and nothing else.
RENAMES = {
    "z": "arr",
    "peak": "m",
    "num": "expo",
    "den": "tot",
    "safe": "denom",
    "keys": "kpos",
    "blocked": "pad",
    "rep": "groups",
    "factor": "alpha",
    "logits": "s",
    "weights": "probs",
    "ms": "mean_sq",
    "centred": "xc",
    "var": "variance",
    "hidden": "hid",
    "gate": "g",
    "up": "u",
    "act": "activated",
}


def _module(functions: dict[str, str]) -> str:
    """The stub module with each function of `functions` replaced by the learner's code."""
    text = module_source()
    if any("math." in code for code in functions.values()):
        text = text.replace("import numpy as np", "import math\n\nimport numpy as np", 1)
    for name, code in functions.items():
        stub = re.compile(rf"\ndef {name}\(.*?raise NotImplementedError\([^\n]*\)\n", re.S)
        text, count = stub.subn(lambda _m, code=code: "\n" + code.strip() + "\n", text, count=1)
        assert count == 1, name
    return text


def renamed(functions: dict[str, str]) -> dict[str, str]:
    """A copier's version: names changed, a comment added, blank lines shifted."""
    changed = {}
    for name, code in functions.items():
        for old, new in RENAMES.items():
            code = re.sub(rf"\b{old}\b", new, code)
        changed[name] = f"\n# {name}: my own work\n" + code.replace(
            "\n    return", "\n\n    return"
        )
    return changed


def write_room(room: Path, functions: dict[str, str]) -> Path:
    room.mkdir(parents=True)
    (room / "__init__.py").write_text(init_source(), encoding="utf-8")
    (room / "transformer_block.py").write_text(_module(functions), encoding="utf-8")
    return room


# ---- a copier's mechanical rewrites of a whole room's source -------------------------------


def _function_locals(tree: ast.Module) -> set[str]:
    """Names assigned inside functions that are no function's parameter (the contract calls
    by keyword) and no module-level name."""
    found, params = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.arg):
            params.add(node.arg)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for sub in ast.walk(node):
                if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                    found.add(sub.id)
    top = {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
           if isinstance(t, ast.Name)}  # fmt: skip
    return found - params - top


def rename_locals(text: str, prefix: str = "my_") -> str:
    """Every local variable of every function renamed, and every comment dropped."""
    names = _function_locals(ast.parse(text))
    out = []
    tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    depth = 0
    for index, tok in enumerate(tokens):
        before = tokens[index - 1].string if index else ""
        after = tokens[index + 1].string if index + 1 < len(tokens) else ""
        depth += tok.string in ("(", "[", "{")
        depth -= tok.string in (")", "]", "}")
        keyword_argument = after == "=" and depth > 0
        if tok.type == tokenize.COMMENT:
            tok = tok._replace(string="")
        elif (
            tok.type == tokenize.NAME
            and tok.string in names
            and before != "."
            and not keyword_argument
        ):
            tok = tok._replace(string=prefix + tok.string)
        elif tok.type == tokenize.STRING and tok.string[:2].lower() in ("f'", 'f"'):
            tok = tok._replace(string=_rename_fields(tok.string, names, prefix))
        out.append(tok)
    return _untokenize(out)


def _rename_fields(text: str, names: set[str], prefix: str) -> str:
    """The names inside an f-string's replacement fields renamed too."""

    def field(match: re.Match) -> str:
        return re.sub(
            r"(?<![.\w])(\w+)\b",
            lambda m: prefix + m.group(1) if m.group(1) in names else m.group(1),
            match.group(0),
        )

    return re.sub(r"\{[^{}]*\}", field, text)


def _untokenize(tokens: list[tokenize.TokenInfo]) -> str:
    """Tokens back to text at their columns, a longer token shifting the rest of its line."""
    out: list[str] = []
    row, col = 1, 0
    for tok in tokens:
        if tok.type in (tokenize.ENCODING, tokenize.ENDMARKER, tokenize.DEDENT):
            continue
        (srow, scol), (erow, ecol) = tok.start, tok.end
        if srow > row:
            if out and not out[-1].endswith("\n"):
                out.append(" \\\n" * (srow - row))  # a backslash continuation
            col = 0
        out.append(" " * max(0, scol - col) + tok.string)
        row, col = erow, ecol
    return "".join(out)


_NO_PARENS_AFTER = {".", "def", "class", "import", "from", "as", "global", "nonlocal", "lambda",
                    "except"}  # fmt: skip


def parenthesise(text: str) -> str:
    """Every name wrapped in parentheses where Python allows it: `(np).exp((x) - (m))`."""
    out = []
    tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    depth = 0
    header = None  # "def" or "lambda" or "import" until its end
    for index, tok in enumerate(tokens):
        before = tokens[index - 1].string if index else ""
        after = tokens[index + 1].string if index + 1 < len(tokens) else ""
        depth += tok.string in ("(", "[", "{")
        depth -= tok.string in (")", "]", "}")
        if tok.type == tokenize.NAME and tok.string in ("def", "lambda", "import", "from"):
            header = tok.string
        elif (header in ("def", "lambda") and tok.string == ":" and depth == 0) or (
            header in ("import", "from") and tok.type == tokenize.NEWLINE
        ):
            header = None
        wrap = (
            tok.type == tokenize.NAME
            and not keyword.iskeyword(tok.string)
            and not keyword.issoftkeyword(tok.string)
            and before not in _NO_PARENS_AFTER
            and header is None
            and not (after == "=" and depth > 0)
            and before != "@"
        )
        if wrap:
            tok = tok._replace(string=f"({tok.string})")
        out.append(tok)
    return _untokenize(out)


def pad(text: str, every: int = 1) -> str:
    """A dead statement after every `every`-th statement of every function body (an unused
    local, then a bare constant), and unused functions after the code: what a copier adds
    to hide a copy."""
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    inserts: list[tuple[int, str]] = []
    count = 0
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for body in _bodies(node):
            for position, stmt in enumerate(body):
                if position % every or (isinstance(stmt, ast.Expr) and position == 0):
                    continue
                count += 1
                indent = " " * stmt.col_offset
                line = f"{indent}_unused_{count} = {count} * 3\n{indent}{count}\n"
                inserts.append((stmt.end_lineno, line))
    for after, line in sorted(inserts, key=lambda i: -i[0]):
        lines.insert(after, line)
    junk = "".join(
        f"\n\ndef _never_called_{n}(a, b):\n    c = a * {n}\n    for i in range(b):\n"
        f"        c = c + i * {n}\n    return c - b\n"
        for n in range(12)
    )
    return "".join(lines) + junk


def _bodies(node: ast.AST):
    for name in ("body", "orelse", "finalbody"):
        inner = getattr(node, name, None)
        if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
            yield inner
            for stmt in inner:
                if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    yield from _bodies(stmt)
    for handler in getattr(node, "handlers", []):
        yield handler.body


def rewrite_room(source: Path, dest: Path, rewrite) -> Path:
    """A copy of the room at `source` with `rewrite` applied to every `.py` file."""
    for path in sorted(source.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        target = dest / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(rewrite(path.read_text("utf-8")), encoding="utf-8")
    return dest
