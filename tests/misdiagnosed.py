"""Rooms that reproduce each misdiagnosis of issue 21, written here from its descriptions.

Each is the project's clean room with a learner's own versions of some functions
appended to a module (they shadow the project's, as `checktools.learner_room`
does). The bugs are the ones learners write: a mask forgotten, a scale of 1/D,
an `np.tri` mask or an `np.zeros` cache in float64, `repeat_kv` commented out,
next to a `rope` left as a stub or written wrong, which the old diagnosis blamed.
"""

from __future__ import annotations

from pathlib import Path

from labctl import faults

ROPE_STUB = """
def rope(x, positions, theta=10000.0):
    raise NotImplementedError("rope: to be written")
"""

# Hugging Face's rotate_half layout: the wrong pairing for the contract's interleaved RoPE.
ROPE_HALF_SPLIT = """
def rope(x, positions, theta=10000.0):
    x = np.asarray(x)
    if x.shape[-1] % 2:
        raise ValueError("rope: D must be even")
    half = x.shape[-1] // 2
    freq = theta ** (-np.arange(half) * 2.0 / x.shape[-1])
    angle = np.asarray(positions)[:, None] * freq[None, :]
    a, b = x[..., :half], x[..., half:]
    return np.concatenate(
        [a * np.cos(angle) - b * np.sin(angle), a * np.sin(angle) + b * np.cos(angle)], axis=-1
    ).astype(x.dtype)
"""

# The same layout with float32 cos/sin tables: the fault, at float32 precision.
ROPE_HALF_SPLIT_FLOAT32_TABLES = ROPE_HALF_SPLIT.replace(
    "angle = np.asarray(positions)[:, None] * freq[None, :]",
    "angle = (np.asarray(positions)[:, None] * freq[None, :]).astype(np.float32)",
)

# The contract's RoPE, its cos/sin tables in float32: correct but for float32 rounding.
ROPE_FLOAT32_TABLES = """
def rope(x, positions, theta=10000.0):
    x = np.asarray(x)
    if x.ndim < 2 or x.shape[-1] % 2:
        raise ValueError("rope: x must be (..., T, D) with D even")
    positions = np.asarray(positions)
    if positions.shape != (x.shape[-2],):
        raise ValueError("rope: positions must be (T,)")
    D = x.shape[-1]
    inv = (float(theta) ** (-2.0 * np.arange(D // 2) / D)).astype(np.float32)
    angle = positions.astype(np.float32)[:, None] * inv[None, :]
    cos, sin = np.cos(angle), np.sin(angle)
    even, odd = x[..., 0::2], x[..., 1::2]
    out = np.empty(x.shape, dtype=x.dtype)
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = even * sin + odd * cos
    return out
"""

# The head-splitting and projections every MHA below shares, written as a learner would.
_PROJECT = """
    B, T, C = x.shape
    kv = n_heads if n_kv_heads is None else n_kv_heads
    D = C // n_heads
    q = split_heads(x @ wq, n_heads)
    k = split_heads(x @ wk, kv)
    v = split_heads(x @ wv, kv)
    if rope_theta is not None:
        q = rope(q, np.arange(T), rope_theta)
        k = rope(k, np.arange(T), rope_theta)
"""
_MHA = (
    "\ndef multi_head_attention(\n"
    "    x, wq, wk, wv, wo, n_heads, n_kv_heads=None, causal=True, window=None, rope_theta=None\n"
    "):"
)

# No mask unless a window is asked for: every position sees the future.
LEAKY_MHA = (
    _MHA
    + _PROJECT
    + """
    mask = sliding_window_mask(T, window) if window is not None else None
    out, _ = scaled_dot_product_attention(q, k, v, mask)
    return merge_heads(out) @ wo
"""
)

# No mask at all, a window's neither: the outputs of an SDPA whose mask adds 0, though it
# calls the room's SDPA, which is right.
MASKLESS_MHA = (
    _MHA
    + _PROJECT
    + """
    out, _ = scaled_dot_product_attention(q, k, v, None)
    return merge_heads(out) @ wo
"""
)

# A softmax written for the last axis only: the axis it is given is ignored.
SOFTMAX_FIXED_AXIS = """
def softmax(x, axis=-1):
    e = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return e / np.sum(e, axis=-1, keepdims=True)
"""

# Scores divided by D instead of sqrt(D).
SCALED_BY_D_MHA = (
    _MHA
    + _PROJECT
    + """
    mask = sliding_window_mask(T, window) if window is not None else (
        causal_mask(T) if causal else None
    )
    out, _ = scaled_dot_product_attention(q, k, v, mask, scale=1.0 / D)
    return merge_heads(out) @ wo
"""
)

# Attention written inline with an np.tri mask (float64), RoPE inline too: it never calls
# the room's rope, nor its softmax or attention.
TRI_MASK_MHA = (
    "\nfrom .primitives import repeat_kv\n"
    + _MHA
    + """
    B, T, C = x.shape
    kv = n_heads if n_kv_heads is None else n_kv_heads
    D = C // n_heads
    q = split_heads(x @ wq, n_heads)
    k = repeat_kv(split_heads(x @ wk, kv), n_heads // kv)
    v = repeat_kv(split_heads(x @ wv, kv), n_heads // kv)
    if rope_theta is not None:
        angle = np.arange(T)[:, None] * rope_theta ** (-2.0 * np.arange(D // 2) / D)
        def turn(t):
            out = np.empty_like(t)
            out[..., 0::2] = t[..., 0::2] * np.cos(angle) - t[..., 1::2] * np.sin(angle)
            out[..., 1::2] = t[..., 0::2] * np.sin(angle) + t[..., 1::2] * np.cos(angle)
            return out
        q, k = turn(q), turn(k)
    allowed = np.tri(T)
    if window is not None:
        allowed = allowed - np.tri(T, k=-window)
    elif not causal:
        allowed = np.ones((T, T))
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(D)
    scores = scores * allowed - 1e9 * (1 - allowed)
    scores = scores - scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores)
    weights = weights / weights.sum(axis=-1, keepdims=True)
    return merge_heads(weights @ v) @ wo
"""
)

# repeat_kv commented out: the scores of a GQA call do not broadcast (it crashes with or
# without RoPE).
NO_REPEAT_KV_MHA = (
    "\nfrom .primitives import softmax\n"
    + _MHA
    + _PROJECT
    + """
    # k = repeat_kv(k, n_heads // kv); v = repeat_kv(v, n_heads // kv)
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(D)
    if causal or window is not None:
        blocked = causal_mask(T) if window is None else sliding_window_mask(T, window)
        scores = np.where(blocked, -np.inf, scores)
    return merge_heads(softmax(scores) @ v) @ wo
"""
)

# An empty cache from np.zeros: float64 whatever the input's dtype.
ZEROS_CACHE_DECODE = """
def attention_decode(
    x_new, past_k, past_v, wq, wk, wv, wo, n_heads, n_kv_heads=None, window=None, rope_theta=None
):
    B, Tn, C = x_new.shape
    kv = n_heads if n_kv_heads is None else n_kv_heads
    D = C // n_heads
    if past_k is None:
        past_k, past_v = np.zeros((B, kv, 0, D)), np.zeros((B, kv, 0, D))
    Tp = past_k.shape[2]
    q = split_heads(x_new @ wq, n_heads)
    k = split_heads(x_new @ wk, kv)
    v = split_heads(x_new @ wv, kv)
    if rope_theta is not None:
        q = rope(q, np.arange(Tp, Tp + Tn), rope_theta)
        k = rope(k, np.arange(Tp, Tp + Tn), rope_theta)
    k_all = np.concatenate([past_k, k], axis=2)
    v_all = np.concatenate([past_v, v], axis=2)
    if window is None:
        mask = causal_mask(Tn, Tp + Tn)
    else:
        mask = sliding_window_mask(Tn, window, Tp + Tn)
    out, _ = scaled_dot_product_attention(q, k_all, v_all, mask)
    return merge_heads(out) @ wo, k_all, v_all
"""

# The residual sums gathered in an np.zeros buffer: float64 whatever the input's dtype.
ZEROS_BUFFER_BLOCK = """
def transformer_block(x, params, n_heads, n_kv_heads=None, eps=1e-6, rope_theta=None, window=None):
    p = params
    out = np.zeros(x.shape)
    out += x
    out += multi_head_attention(
        rms_norm(x, p["norm1"], eps), p["wq"], p["wk"], p["wv"], p["wo"],
        n_heads, n_kv_heads, causal=True, window=window, rope_theta=rope_theta,
    )
    out += swiglu_ffn(rms_norm(out, p["norm2"], eps), p["w_gate"], p["w_up"], p["w_down"])
    return out
"""

# A causal mask of 1.0 (blocked) and 0.0 from np.triu over np.ones: float64, not bool.
FLOAT_CAUSAL_MASK = """
def causal_mask(t_q, t_k=None):
    t_k = t_q if t_k is None else t_k
    return np.triu(np.ones((t_q, t_k)), k=t_k - t_q + 1)
"""

# An MHA that joins the window's mask to the causal one with `|`: correct with bool masks,
# a TypeError with the float one above.
MASKS_JOINED_MHA = (
    _MHA
    + _PROJECT
    + """
    mask = causal_mask(T) if causal else None
    if window is not None:
        near = sliding_window_mask(T, window)
        mask = near if mask is None else mask | near
    out, _ = scaled_dot_product_attention(q, k, v, mask)
    return merge_heads(out) @ wo
"""
)

# An RMSNorm that computes in float32 whatever it is given, then casts back.
RMS_NORM_IN_FLOAT32 = """
def rms_norm(x, weight, eps=1e-6):
    x = np.asarray(x)
    small = x.astype(np.float32)
    normed = small / np.sqrt(np.mean(small * small, axis=-1, keepdims=True) + np.float32(eps))
    return (normed * np.asarray(weight, dtype=np.float32)).astype(x.dtype)
"""

# The same, without the cast back: float32 out of a float64 call.
RMS_NORM_RETURNS_FLOAT32 = RMS_NORM_IN_FLOAT32.replace(".astype(x.dtype)", "")

# An RMSNorm that ends its process: the block's bad input (C % n_heads) meets it first.
RMS_NORM_EXITS = """
def rms_norm(x, weight, eps=1e-6):
    raise SystemExit(3)
"""

# Correct, written otherwise than labctl's room: heads in a loop, einsum, softmax inline.
EINSUM_LOOP_SDPA = """
def scaled_dot_product_attention(q, k, v, mask=None, scale=None):
    q, k, v, n_rep = _check_qkv(q, k, v)
    if mask is not None:
        mask = np.asarray(mask)
        if mask.dtype != np.bool_:
            raise TypeError("mask must be boolean")
    B, H, Tq, D = q.shape
    Tk, Dv = k.shape[2], v.shape[3]
    s = 1.0 / math.sqrt(D) if scale is None else float(scale)
    out = np.zeros((B, H, Tq, Dv), dtype=q.dtype)
    weights = np.zeros((B, H, Tq, Tk), dtype=q.dtype)
    for h in range(H):
        kh, vh = k[:, h // n_rep], v[:, h // n_rep]
        scores = np.einsum("bqd,bkd->bqk", q[:, h], kh) * s
        if mask is not None:
            blocked = np.broadcast_to(mask, (B, H, Tq, Tk))[:, h]
            scores = np.where(blocked, -np.inf, scores)
        top = scores.max(axis=-1, keepdims=True)
        top = np.where(np.isneginf(top), 0.0, top)
        e = np.exp(scores - top)
        total = e.sum(axis=-1, keepdims=True)
        w = np.divide(e, total, out=np.zeros_like(e), where=total > 0)
        weights[:, h] = w
        out[:, h] = np.einsum("bqk,bkd->bqd", w, vh)
    return out, weights
"""

# Correct tiled attention written otherwise: key blocks from the last to the first, einsum.
REVERSED_TILED = """
def tiled_attention(q, k, v, block_size, causal=True, scale=None):
    q, k, v, n_rep = _check_qkv(q, k, v)
    block_size = _as_size(block_size, "block_size", minimum=1)
    k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)
    B, H, Tq, D = q.shape
    Tk, Dv = k.shape[2], v.shape[3]
    s = 1.0 / math.sqrt(D) if scale is None else float(scale)
    position = (Tk - Tq) + np.arange(Tq)[:, None]
    top = np.full((B, H, Tq, 1), -np.inf, dtype=q.dtype)
    total = np.zeros((B, H, Tq, 1), dtype=q.dtype)
    acc = np.zeros((B, H, Tq, Dv), dtype=q.dtype)
    for start in list(range(0, Tk, block_size))[::-1]:
        stop = min(start + block_size, Tk)
        scores = np.einsum("bhqd,bhkd->bhqk", q, k[:, :, start:stop]) * s
        if causal:
            scores = np.where(np.arange(start, stop)[None, :] > position, -np.inf, scores)
        new = np.maximum(top, scores.max(axis=-1, keepdims=True))
        shift = np.where(np.isneginf(new), 0.0, new)
        rescale = np.exp(top - shift)
        p = np.exp(scores - shift)
        total = total * rescale + p.sum(axis=-1, keepdims=True)
        acc = acc * rescale + np.einsum("bhqk,bhkd->bhqd", p, v[:, :, start:stop])
        top = new
    return np.divide(acc, total, out=np.zeros_like(acc), where=total > 0)
"""

# The same, its blocks only the whole ones: the keys past (Tk // block_size) * block_size are
# never seen.
WHOLE_BLOCKS_ONLY_TILED = REVERSED_TILED.replace(
    "range(0, Tk, block_size)", "range(0, (Tk // block_size) * block_size, block_size)"
)

# The same, shifting by the running max even while it is -inf: NaN, met first where the
# last block (seen first here) is wholly in a query's future.
NAN_SHIFT_TILED = REVERSED_TILED.replace(
    "shift = np.where(np.isneginf(new), 0.0, new)", "shift = new"
).replace("np.divide(acc, total, out=np.zeros_like(acc), where=total > 0)", "acc / total")

# A causal mask aligned top-left (no Tk - Tq offset): wrong only where Tq < Tk, which the
# ragged-block phrase took for a dropped last block.
TOP_LEFT_TILED = REVERSED_TILED.replace(
    "position = (Tk - Tq) + np.arange(Tq)[:, None]", "position = np.arange(Tq)[:, None]"
)

# Correct RoPE whose tables are computed in the input's own dtype: float32 inside a float32
# call, which the contract allows.
ROPE_TABLES_IN_INPUT_DTYPE = ROPE_FLOAT32_TABLES.replace("np.float32", "x.dtype")


def room(directory: Path, *parts: tuple[str, str]) -> Path:
    """The project's clean room with each (module, source) appended, under `directory`."""
    target = directory / "clean_room"
    faults.Fault("learner", "-", parts[0][0], "-", "-", parts[0][1]).materialize(target)
    for module, source in parts[1:]:
        path = target / f"{module}.py"
        path.write_text(path.read_text("utf-8") + "\n" + source, "utf-8")
    return target
