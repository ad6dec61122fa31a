"""Contract v2 bugs of a learner who checks the arguments as the contract asks, named by their
catalogued fault: NTK scaling with the exponent (D - 2) / D, and batched positions that rotate
every row at the first row's. The faults' rooms once skipped the contract's refusals (D < 4
for NTK, positions of the wrong shape), and a match needs the fault's side symptoms, so a
learner who refused them was told only that the values differ. And (stop 58) bugs once told
only that the values differ or a fixture's note: a decoder that refuses T == Tmax, ALiBi that
drops the window, an entropy of renormalised weights, multi-head attention that ignores its
positions, and a symmetric ALiBi bias.

Each bug is written as a learner writes it (a whole function, not the catalogue's wrapper), in a
room of many files and of one file, both declaring v2, as in `test_common_bugs_named`.
"""

from __future__ import annotations

import pytest
from checktools import one_file_room

from labctl.faults import for_contract
from labctl.faults.v2 import FaultV2
from labctl.i18n import _, speaking
from labctl.verify.builders import fresh_seed
from labctl.verify.verify import verify_clean_room

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


@pytest.fixture(scope="module")
def fresh():
    seed = fresh_seed()
    print(f"v2 bugs verified at seed {seed}")
    return seed


# v2's rope with every refusal of the contract's Bad input section; NTK_EXPONENT and BATCHED
# mark where each bug goes.
ROPE_V2 = """
def rope(x, positions, theta=10000.0, scaling=None, factor=1.0):
    x = np.asarray(x)
    pos = np.asarray(positions)
    D, T = x.shape[-1], x.shape[-2]
    if D % 2:
        raise ValueError("x: RoPE needs an even D")
    if scaling not in (None, "linear", "ntk"):
        raise ValueError(f"scaling: expected None, 'linear' or 'ntk', got {scaling!r}")
    if not factor >= 1:
        raise ValueError("factor: must be >= 1")
    if scaling == "ntk" and D < 4:
        raise ValueError("x: NTK scaling needs D >= 4")
    if pos.shape != (T,) and not (x.ndim >= 3 and pos.shape == (x.shape[0], T)):
        raise ValueError(f"positions: shape {pos.shape} does not match x {x.shape}")
    base = float(theta)
    if scaling == "ntk":
        base = base * factor ** NTK_EXPONENT
    p = pos.astype(np.float64) / (factor if scaling == "linear" else 1.0)
    BATCHED
    angle = p[..., None] * base ** (-np.arange(0, D, 2) / D)
    if p.ndim == 2:
        angle = angle.reshape((p.shape[0],) + (1,) * (x.ndim - 3) + angle.shape[1:])
    x1, x2 = x[..., 0::2], x[..., 1::2]
    out = np.empty(x.shape, dtype=np.result_type(x, np.float32))
    out[..., 0::2] = x1 * np.cos(angle) - x2 * np.sin(angle)
    out[..., 1::2] = x1 * np.sin(angle) + x2 * np.cos(angle)
    return out
"""

NTK_INVERTED = ROPE_V2.replace("NTK_EXPONENT", "((D - 2) / D)").replace("    BATCHED\n", "")

FIRST_ROW = ROPE_V2.replace("NTK_EXPONENT", "(D / (D - 2))").replace(
    "BATCHED", "p = p if p.ndim == 1 else p[0]  # one row of positions for the batch"
)

# v2's decoder_forward with every refusal of the contract's Bad input section and an ALiBi
# attention of its own; LEARNED_CHECK and ALIBI_MASK mark where each bug goes.
DECODER = """
def _learner_alibi_attention(x, p, H, Hkv, bias, window):
    B, T, C = x.shape
    D = C // H
    q = split_heads(x @ p["wq"], H)
    k = repeat_kv(split_heads(x @ p["wk"], Hkv), H // Hkv)
    v = repeat_kv(split_heads(x @ p["wv"], Hkv), H // Hkv)
    scores = q @ k.swapaxes(-1, -2) / np.sqrt(D) + bias
    ALIBI_MASK
    scores = np.where(blocked, -np.inf, scores)
    out = softmax(scores, axis=-1) @ v
    return (merge_heads(out) @ p["wo"]).astype(x.dtype)


def decoder_forward(token_ids, params, n_heads, n_kv_heads=None, eps=1e-6, positional="sinusoidal", rope_theta=10000.0, window=None):
    if positional not in ("sinusoidal", "rope", "none", "learned", "alibi"):
        raise ValueError(f"positional: unknown scheme {positional!r}")
    if not isinstance(params, dict) or not {"embed", "blocks", "final_norm"} <= set(params):
        raise ValueError("params: need embed, blocks and final_norm")
    if positional == "learned" and "pos_embed" not in params:
        raise ValueError("params: learned positions need pos_embed")
    if window is not None and window < 1:
        raise ValueError("window: must be >= 1")
    embed = np.asarray(params["embed"])
    V, C = embed.shape
    head = embed.T
    if "lm_head" in params:
        head = np.asarray(params["lm_head"])
        if head.shape != (C, V):
            raise ValueError(f"lm_head: expected ({C}, {V}), got {head.shape}")
    ids = np.asarray(token_ids)
    if ids.dtype.kind not in "iu":
        raise TypeError("token_ids: expected integers")
    if ids.ndim != 2:
        raise ValueError("token_ids: expected (B, T)")
    if ids.size and (ids.min() < 0 or ids.max() >= V):
        raise ValueError("token_ids: out of the vocabulary")
    B, T = ids.shape
    x = embed[ids]
    Hkv = n_heads if n_kv_heads is None else n_kv_heads
    if positional == "sinusoidal":
        x = x + sinusoidal_positions(T, C).astype(x.dtype)
    elif positional == "learned":
        table = np.asarray(params["pos_embed"])
        LEARNED_CHECK
            raise ValueError(f"token_ids: T={T} does not fit pos_embed")
        x = x + table[:T].astype(x.dtype)
    for p in params["blocks"]:
        if positional == "alibi":
            h = x + _learner_alibi_attention(rms_norm(x, p["norm1"], eps), p, n_heads, Hkv, alibi_bias(n_heads, T), window)
            x = h + swiglu_ffn(rms_norm(h, p["norm2"], eps), p["w_gate"], p["w_up"], p["w_down"])
        else:
            theta = rope_theta if positional == "rope" else None
            x = transformer_block(x, p, n_heads, n_kv_heads, eps, rope_theta=theta, window=window)
    return rms_norm(x, params["final_norm"], eps) @ head.astype(x.dtype)
"""

WINDOW_MASK = "blocked = causal_mask(T) if window is None else sliding_window_mask(T, window)"

TMAX_REFUSED = DECODER.replace("LEARNED_CHECK", "if T >= table.shape[0]:").replace(
    "ALIBI_MASK", WINDOW_MASK
)

ALIBI_NO_WINDOW = DECODER.replace("LEARNED_CHECK", "if T > table.shape[0]:").replace(
    "ALIBI_MASK", "blocked = causal_mask(T)  # ALiBi's bias already favours near keys"
)

ENTROPY_RENORMALISED = """
def attention_entropy(weights, axis=-1):
    w = np.asarray(weights)
    if w.dtype.kind not in "f":
        w = w.astype(np.float64)
    if not -w.ndim <= axis < max(w.ndim, 1):
        raise ValueError("axis: out of range")
    if (w < 0).any():
        raise ValueError("weights: must be >= 0")
    total = w.sum(axis=axis, keepdims=True)
    w = np.divide(w, total, out=np.zeros_like(w), where=total > 0)  # a distribution first
    logs = np.log(np.where(w > 0, w, 1.0))
    return -(w * logs).sum(axis=axis).astype(w.dtype)
"""

MHA_POSITIONS_IGNORED = """
def multi_head_attention(x, wq, wk, wv, wo, n_heads, n_kv_heads=None, causal=True, window=None, rope_theta=None, positions=None):
    x = np.asarray(x)
    if x.ndim != 3:
        raise ValueError("x: expected (B, T, C)")
    B, T, C = x.shape
    H = n_heads
    Hkv = H if n_kv_heads is None else n_kv_heads
    if H < 1 or Hkv < 1 or C % H or H % Hkv:
        raise ValueError("n_heads: bad head counts")
    if rope_theta is not None and (C // H) % 2:
        raise ValueError("n_heads: RoPE needs an even D")
    if window is not None and window < 1:
        raise ValueError("window: must be >= 1")
    for name, w, shape in (("wq", wq, (C, C)), ("wk", wk, (C, Hkv * (C // H))), ("wv", wv, (C, Hkv * (C // H))), ("wo", wo, (C, C))):
        if np.shape(w) != shape:
            raise ValueError(f"{name}: expected {shape}")
    if positions is not None:
        pos = np.asarray(positions)
        if pos.shape not in ((T,), (B, T)):
            raise ValueError(f"positions: expected ({T},) or ({B}, {T}), got {pos.shape}")
    q = split_heads(x @ wq, H)
    k = split_heads(x @ wk, Hkv)
    v = split_heads(x @ wv, Hkv)
    if rope_theta is not None:
        where = np.arange(T)  # token t sits at position t
        q = rope(q, where, rope_theta)
        k = rope(k, where, rope_theta)
    if window is not None:
        mask = sliding_window_mask(T, window)
    else:
        mask = causal_mask(T) if causal else None
    out, _ = scaled_dot_product_attention(q, k, v, mask)
    return merge_heads(out) @ wo.astype(x.dtype)
"""

ALIBI_SYMMETRIC = """
def alibi_bias(n_heads, t_q, t_k=None):
    if int(n_heads) != n_heads or n_heads < 1:
        raise ValueError("n_heads: must be >= 1")
    slopes = alibi_slopes(n_heads)
    t_k = t_q if t_k is None else t_k
    rows = np.arange(t_q)[:, None] + (t_k - t_q)
    cols = np.arange(t_k)[None, :]
    return (-slopes[:, None, None] * np.abs(rows - cols)[None]).astype(np.float64)
"""

# (name, module, function, source, fault)
BUGS = [
    ("ntk-exponent-inverted", "primitives", "rope", NTK_INVERTED, "ntk-exponent-inverted"),
    ("batched-first-row", "primitives", "rope", FIRST_ROW, "rope-batched-positions-first-row"),
    ("t-equal-tmax-refused", "transformer_block", "decoder_forward", TMAX_REFUSED,
     "decoder-refuses-t-equal-tmax"),
    ("alibi-without-window", "transformer_block", "decoder_forward", ALIBI_NO_WINDOW,
     "alibi-drops-window"),
    ("entropy-renormalised", "attention", "attention_entropy", ENTROPY_RENORMALISED,
     "entropy-renormalised"),
    ("mha-positions-ignored", "transformer_block", "multi_head_attention",
     MHA_POSITIONS_IGNORED, "mha-positions-ignored"),
    ("alibi-symmetric", "positions", "alibi_bias", ALIBI_SYMMETRIC, "alibi-bias-symmetric"),
]  # fmt: skip


def _in(lang: str, text) -> str:
    with speaking(lang):
        return _(text)


@pytest.mark.parametrize("layout", ["many-files-v2", "one-file-v2"])
@pytest.mark.parametrize(
    ("name", "module", "function", "source", "fault"), BUGS, ids=[b[0] for b in BUGS]
)
def test_each_v2_bug_with_its_refusals_is_named_by_its_fault(
    tmp_path, name, module, function, source, fault, layout, fresh
):
    if layout == "one-file-v2":
        room = one_file_room(tmp_path, source, contract=2)
    else:
        room = FaultV2("learner", "-", module, "-", "-", source).materialize(
            tmp_path / "clean_room"
        )
    report = verify_clean_room(room, 5.0, out=None, measure=False, seed=fresh)
    failed = {r.name for r in report.checks if r.function == function and r.failed}
    assert "bad-input" not in failed, failed
    (diagnosis,) = [d for d in report.diagnosis if d.function == function]
    assert diagnosis.fault == fault, diagnosis.message
    catalogued = next(f for f in for_contract(2) if f.name == fault)
    english = _in("en", diagnosis.shown)
    assert f"matches fault `{fault}`" in english, english
    assert _in("en", catalogued.description) in english
