"""Common bugs that verify caught but only said "its values differ from the reference" for are
named with the change to make: RoPE's frequencies with the exponent i/D, RoPE on k alone or q
alone (in multi-head attention and in decode), an online softmax that rescales only one of its
running sum and its output, scores multiplied by sqrt(d_k), and `scale or 1/sqrt(D)` (which takes
scale=0.0 for None) in scaled_dot_product_attention and in tiled_attention; and (stop 58) RMSNorm
times (1 + weight), Gemma's convention, and decode's RoPE on q alone.

Each bug is written as a learner writes it (not as the catalogue's fault is), as in
`test_common_bugs`: the project's clean room with one function rewritten, verified through the
sandbox like a learner's room, in a room of many files at v1 and of one file at v2.
"""

from __future__ import annotations

import pytest
from checktools import learner_room, one_file_room

from labctl import faults
from labctl.i18n import _, speaking
from labctl.verify.builders import fresh_seed
from labctl.verify.verify import verify_clean_room

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


@pytest.fixture(scope="module")
def fresh():
    seed = fresh_seed()
    print(f"common bugs verified at seed {seed}")
    return seed


ROPE_EXPONENT_I_OVER_D = """
def rope(x, positions, theta=10000.0):
    x = np.asarray(x)
    D = x.shape[-1]
    if D % 2:
        raise ValueError("x: RoPE needs an even D")
    inv = 1.0 / theta ** (np.arange(D // 2) / D)
    angle = np.outer(np.asarray(positions, dtype=np.float64), inv)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    out = np.stack([x1 * np.cos(angle) - x2 * np.sin(angle),
                    x1 * np.sin(angle) + x2 * np.cos(angle)], axis=-1)
    return out.reshape(x.shape).astype(np.result_type(x, np.float32))
"""

MHA_ROPE_ON_K = """
def multi_head_attention(x, wq, wk, wv, wo, n_heads, n_kv_heads=None, causal=True, window=None, rope_theta=None):
    x = np.asarray(x)
    B, T, C = x.shape
    H = n_heads
    Hkv = H if n_kv_heads is None else n_kv_heads
    if C % H or H % Hkv or (window is not None and window < 1):
        raise ValueError("n_heads: bad head counts or window")
    if rope_theta is not None and (C // H) % 2:
        raise ValueError("rope_theta: RoPE needs an even D")
    q = split_heads(x @ wq, H)
    k = split_heads(x @ wk, Hkv)
    v = split_heads(x @ wv, Hkv)
    if rope_theta is not None:
        k = rope(k, np.arange(T), rope_theta)  # the keys carry the positions
    if window is not None:
        mask = sliding_window_mask(T, window)
    else:
        mask = causal_mask(T) if causal else None
    out, _ = scaled_dot_product_attention(q, k, v, mask)
    return merge_heads(out) @ wo
"""

MHA_ROPE_ON_Q = MHA_ROPE_ON_K.replace(
    "k = rope(k, np.arange(T), rope_theta)  # the keys carry the positions",
    "q = rope(q, np.arange(T), rope_theta)  # the queries carry the positions",
)

DECODE_ROPE_ON_K = """
def attention_decode(x_new, past_k, past_v, wq, wk, wv, wo, n_heads, n_kv_heads=None, window=None, rope_theta=None):
    x_new = np.asarray(x_new)
    B, Tn, C = x_new.shape
    H = n_heads
    Hkv = H if n_kv_heads is None else n_kv_heads
    Tp = 0 if past_k is None else past_k.shape[2]
    q = split_heads(x_new @ wq, H)
    k = split_heads(x_new @ wk, Hkv)
    v = split_heads(x_new @ wv, Hkv)
    if rope_theta is not None:
        k = rope(k, np.arange(Tp, Tp + Tn), rope_theta)  # cached keys are rotated once
    if past_k is not None:
        k = np.concatenate([past_k, k], axis=2)
        v = np.concatenate([past_v, v], axis=2)
    Tk = k.shape[2]
    mask = causal_mask(Tn, Tk) if window is None else sliding_window_mask(Tn, window, Tk)
    out, _ = scaled_dot_product_attention(q, k, v, mask)
    return merge_heads(out) @ wo, k, v
"""

# An online softmax as a learner writes one; CORRECTION marks the two updates, each bug
# forgetting exp(m - m_new) in one of them.
ONLINE_SOFTMAX = """
def tiled_attention(q, k, v, block_size, causal=True, scale=None):
    q, k, v, n_rep = _check_qkv(q, k, v)
    block_size = _as_size(block_size, "block_size", minimum=1)
    k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)
    Tq, Tk = q.shape[2], k.shape[2]
    s = _scale(scale, q.shape[-1])
    m = np.full(q.shape[:-1] + (1,), -np.inf)
    l = np.zeros_like(m)
    acc = np.zeros(q.shape[:-1] + (v.shape[-1],))
    for j in range(0, Tk, block_size):
        kb, vb = k[:, :, j:j + block_size], v[:, :, j:j + block_size]
        scores = q @ kb.swapaxes(-1, -2) * s
        if causal:
            cols = np.arange(j, j + kb.shape[2])
            scores = np.where(cols[None, :] > (Tk - Tq) + np.arange(Tq)[:, None], -np.inf, scores)
        m_new = np.maximum(m, scores.max(axis=-1, keepdims=True))
        m_safe = np.where(np.isneginf(m_new), 0.0, m_new)
        p = np.exp(scores - m_safe)
        corr = np.exp(m - m_safe)
        l = SUM_UPDATE
        acc = ACC_UPDATE
        m = m_new
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(l > 0, acc / l, 0.0)
    return out.astype(q.dtype)
"""

ONLINE_SUM_NOT_CORRECTED = ONLINE_SOFTMAX.replace(
    "SUM_UPDATE", "l + p.sum(axis=-1, keepdims=True)"
).replace("ACC_UPDATE", "corr * acc + p @ vb")

ONLINE_ACC_NOT_CORRECTED = ONLINE_SOFTMAX.replace(
    "SUM_UPDATE", "corr * l + p.sum(axis=-1, keepdims=True)"
).replace("ACC_UPDATE", "acc + p @ vb")

SCORES_TIMES_SQRT_D = """
def scaled_dot_product_attention(q, k, v, mask=None, scale=None):
    q, k, v, n_rep = _check_qkv(q, k, v)
    k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)
    if scale is None:
        scale = np.sqrt(q.shape[-1])
    scores = np.einsum("bhqd,bhkd->bhqk", q, k) * scale
    if mask is not None:
        scores = np.where(mask, -np.inf, scores)
    weights = softmax(scores, axis=-1)
    return np.einsum("bhqk,bhkd->bhqd", weights, v).astype(q.dtype), weights.astype(q.dtype)
"""

# `scale or 1/sqrt(D)`: scale=0.0 is falsy and takes the default.
SCALE_OR_DEFAULT = SCORES_TIMES_SQRT_D.replace(
    """    if scale is None:
        scale = np.sqrt(q.shape[-1])
""",
    """    scale = scale or 1.0 / np.sqrt(q.shape[-1])
""",
)

TILED_SCALE_OR_DEFAULT = (
    ONLINE_SOFTMAX.replace("_scale(scale, q.shape[-1])", "scale or 1.0 / np.sqrt(q.shape[-1])")
    .replace("SUM_UPDATE", "corr * l + p.sum(axis=-1, keepdims=True)")
    .replace("ACC_UPDATE", "corr * acc + p @ vb")
)

# Gemma's RMSNorm convention, a weight stored as an offset from 1.
RMS_NORM_ONE_PLUS_WEIGHT = """
def rms_norm(x, weight, eps=1e-6):
    x = np.asarray(x)
    if x.dtype.kind != "f":
        x = x.astype(np.float64)
    weight = np.asarray(weight)
    if weight.shape != (x.shape[-1],):
        raise ValueError(f"weight: expected ({x.shape[-1]},), got {weight.shape}")
    inv = 1.0 / np.sqrt((x ** 2).mean(axis=-1, keepdims=True) + eps)
    return (x * inv * (1.0 + weight)).astype(x.dtype)
"""

DECODE_ROPE_ON_Q = """
def attention_decode(x_new, past_k, past_v, wq, wk, wv, wo, n_heads, n_kv_heads=None, window=None, rope_theta=None):
    x_new = np.asarray(x_new)
    if x_new.ndim != 3:
        raise ValueError("x_new: expected (B, Tn, C)")
    B, Tn, C = x_new.shape
    H = n_heads
    Hkv = H if n_kv_heads is None else n_kv_heads
    if H < 1 or Hkv < 1 or C % H or H % Hkv:
        raise ValueError("n_heads: bad head counts")
    D = C // H
    if rope_theta is not None and D % 2:
        raise ValueError("n_heads: RoPE needs an even D")
    if window is not None and window < 1:
        raise ValueError("window: must be >= 1")
    for name, w, shape in (("wq", wq, (C, C)), ("wk", wk, (C, Hkv * D)), ("wv", wv, (C, Hkv * D)), ("wo", wo, (C, C))):
        if np.shape(w) != shape:
            raise ValueError(f"{name}: expected {shape}")
    if (past_k is None) != (past_v is None):
        raise ValueError("past_v: give both caches or neither")
    Tp = 0
    if past_k is not None:
        if np.shape(past_k)[:2] != (B, Hkv) or np.shape(past_k)[3] != D or np.shape(past_v) != np.shape(past_k):
            raise ValueError("past_k: wrong cache shape")
        Tp = np.shape(past_k)[2]
    q = split_heads(x_new @ wq, H)
    k = split_heads(x_new @ wk, Hkv)
    v = split_heads(x_new @ wv, Hkv)
    if rope_theta is not None:
        where = np.arange(Tp, Tp + Tn)
        q = rope(q, where, rope_theta)  # the query asks from its position
    if past_k is not None:
        k = np.concatenate([np.asarray(past_k, dtype=k.dtype), k], axis=2)
        v = np.concatenate([np.asarray(past_v, dtype=v.dtype), v], axis=2)
    Tk = Tp + Tn
    mask = causal_mask(Tn, Tk) if window is None else sliding_window_mask(Tn, window, Tk)
    out, _ = scaled_dot_product_attention(q, k, v, mask)
    return merge_heads(out) @ wo.astype(x_new.dtype), k, v
"""

# (name, module, source, fault, function): each bug, as a learner writes it.
BUGS = [
    ("rope-exponent-i-over-d", "primitives", ROPE_EXPONENT_I_OVER_D, "rope-freq-i-over-d", "rope"),
    ("mha-rope-on-k", "transformer_block", MHA_ROPE_ON_K, "mha-rope-k-only",
     "multi_head_attention"),
    ("mha-rope-on-q", "transformer_block", MHA_ROPE_ON_Q, "mha-rope-q-only",
     "multi_head_attention"),
    ("decode-rope-on-k", "transformer_block", DECODE_ROPE_ON_K, "decode-rope-k-only",
     "attention_decode"),
    ("online-sum-not-corrected", "attention", ONLINE_SUM_NOT_CORRECTED, "tiled-sum-not-rescaled",
     "tiled_attention"),
    ("online-acc-not-corrected", "attention", ONLINE_ACC_NOT_CORRECTED, "tiled-acc-not-rescaled",
     "tiled_attention"),
    ("scores-times-sqrt-d", "attention", SCORES_TIMES_SQRT_D, "sdpa-scale-sqrt-multiplied",
     "scaled_dot_product_attention"),
    ("scale-or-default", "attention", SCALE_OR_DEFAULT, "sdpa-scale-or-default",
     "scaled_dot_product_attention"),
    ("tiled-scale-or-default", "attention", TILED_SCALE_OR_DEFAULT, "tiled-scale-or-default",
     "tiled_attention"),
    ("rms-norm-one-plus-weight", "primitives", RMS_NORM_ONE_PLUS_WEIGHT,
     "rms-norm-one-plus-weight", "rms_norm"),
    ("decode-rope-on-q", "transformer_block", DECODE_ROPE_ON_Q, "decode-rope-q-only",
     "attention_decode"),
]  # fmt: skip


def _in(lang: str, text) -> str:
    with speaking(lang):
        return _(text)


@pytest.mark.parametrize("layout", ["many-files-v1", "one-file-v2"])
@pytest.mark.parametrize(
    ("name", "module", "source", "fault", "function"), BUGS, ids=[b[0] for b in BUGS]
)
def test_each_bug_once_only_values_differ_is_named_with_its_change(
    tmp_path, name, module, source, fault, function, layout, fresh
):
    if layout == "one-file-v2":
        room = one_file_room(tmp_path, source, contract=2)
    else:
        room = learner_room(tmp_path, module, source)
    report = verify_clean_room(room, 5.0, out=None, measure=False, seed=fresh)
    (diagnosis,) = [d for d in report.diagnosis if d.function == function]
    assert diagnosis.fault == fault, diagnosis.message
    catalogued = faults.get(fault)
    english = _in("en", diagnosis.shown)
    assert f"matches fault `{fault}`" in english, english
    assert _in("en", catalogued.description) in english
    assert f"与故障 `{fault}` 相符" in _in("zh", diagnosis.shown)


def test_an_online_softmax_that_rescales_neither_is_still_tiled_no_rescale(tmp_path, fresh):
    """The two faults of one forgotten factor leave the fault of both forgotten its own."""
    source = ONLINE_SOFTMAX.replace("SUM_UPDATE", "l + p.sum(axis=-1, keepdims=True)").replace(
        "ACC_UPDATE", "acc + p @ vb"
    )
    room = learner_room(tmp_path, "attention", source)
    report = verify_clean_room(room, 5.0, out=None, measure=False, seed=fresh)
    (diagnosis,) = [d for d in report.diagnosis if d.function == "tiled_attention"]
    assert diagnosis.fault == "tiled-no-rescale", diagnosis.message
