"""Parity of the 19 contract functions: PyTorch reference vs NumPy clean room vs the formula.

Each function is computed three ways: `labctl.reference` (PyTorch), `clean_room`
(NumPy) and an independent expression written here (a torch built-in such as
`F.scaled_dot_product_attention`, or a few lines of NumPy with explicit loops).
Shape letters as in the course: B batch, T sequence, Tq/Tk query/key lengths,
C model width, H query heads, Hkv key/value heads, D head width, F feed-forward
width, V vocabulary.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import labctl.reference as reference
from labctl import clean_room

# float64 keeps about 16 significant digits; inputs here are O(1) and every
# formula is a handful of sums and exps over a few dozen terms, so honest
# implementations agree to ~1e-14. 1e-10 leaves slack for reassociation but
# catches any real formula difference (wrong scale, eps, alignment, layout).
ATOL64 = 1e-10
# float32 has a 2^-24 ≈ 6e-8 unit roundoff; an O(1) attention output summed
# over a few dozen keys stays well inside 1e-5 of another float32 computation.
ATOL32 = 1e-5
# A float32 result against the float64 result of the same function: roundoff
# of float32 through a whole block (norms, projections, softmax) on O(1) values.
ATOL32_VS_64 = 1e-4

IMPLS = {"reference": reference, "clean_room": clean_room}
IMPL_NAMES = list(IMPLS)
ROPE_POSITIONS = [3, 0, 17, 5, 5, 100]


def max_err(a, b) -> float:
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape, f"shape {a.shape} != {b.shape}"
    if a.size == 0:
        return 0.0
    return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))


def assert_close(actual, expected, atol=ATOL64, what=""):
    assert np.all(np.isfinite(actual)), f"{what}: non-finite values"
    err = max_err(actual, expected)
    assert err <= atol, f"{what}: max abs error {err:.3e} > {atol:.0e}"


def assert_three_way(fn_name, args, expected, kwargs=None, atol=ATOL64):
    """Reference and clean room both match the independent `expected`, and each other."""
    kwargs = kwargs or {}
    ref = getattr(reference, fn_name)(*args, **kwargs)
    cr = getattr(clean_room, fn_name)(*args, **kwargs)
    assert_close(ref, expected, atol, f"reference {fn_name}")
    assert_close(cr, expected, atol, f"clean_room {fn_name}")
    assert_close(ref, cr, atol, f"reference vs clean_room {fn_name}")
    return ref, cr


def weight(rng, fan_in, fan_out, dtype=np.float64):
    """(fan_in, fan_out), scaled by 1/sqrt(fan_in) so activations stay O(1)."""
    return (rng.standard_normal((fan_in, fan_out)) / math.sqrt(fan_in)).astype(dtype)


# --------------------------------------------------------------------------
# Independent formulas (NumPy, written from the contract's table)
# --------------------------------------------------------------------------


def np_softmax(x, axis=-1):
    lse = np.logaddexp.reduce(x, axis=axis, keepdims=True)
    dead = np.isneginf(lse)
    return np.where(dead, 0.0, np.exp(x - np.where(dead, 0.0, lse)))


def np_causal(t_q, t_k):
    return np.array([[j > t_k - t_q + i for j in range(t_k)] for i in range(t_q)], dtype=bool)


def np_window(t_q, window, t_k):
    out = np.zeros((t_q, t_k), dtype=bool)
    for i in range(t_q):
        p = t_k - t_q + i
        for j in range(t_k):
            out[i, j] = not (p - window + 1 <= j <= p)
    return out


def np_attention(q, k, v, blocked=None, scale=None):
    """Per-head loops: query head h reads kv head h // (H // Hkv); dead rows stay zero."""
    B, H, Tq, D = q.shape
    Hkv, Tk, Dv = k.shape[1], k.shape[2], v.shape[3]
    group = H // Hkv
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    blocked = np.broadcast_to(False if blocked is None else blocked, (B, H, Tq, Tk))
    out = np.zeros((B, H, Tq, Dv))
    weights = np.zeros((B, H, Tq, Tk))
    for b in range(B):
        for h in range(H):
            scores = q[b, h] @ k[b, h // group].T * scale
            for i in range(Tq):
                keep = ~blocked[b, h, i]
                if keep.any():
                    e = np.exp(scores[i, keep] - scores[i, keep].max())
                    weights[b, h, i, keep] = e / e.sum()
            out[b, h] = weights[b, h] @ v[b, h // group]
    return out, weights


def np_rope(x, positions, theta=10000.0):
    D = x.shape[-1]
    out = np.empty_like(x)
    for t, p in enumerate(positions):
        for i in range(D // 2):
            angle = p * theta ** (-2 * i / D)
            c, s = math.cos(angle), math.sin(angle)
            x0, x1 = x[..., t, 2 * i], x[..., t, 2 * i + 1]
            out[..., t, 2 * i] = c * x0 - s * x1
            out[..., t, 2 * i + 1] = s * x0 + c * x1
    return out


def np_sinusoidal(seq_len, d_model):
    pe = np.zeros((seq_len, d_model))
    for p in range(seq_len):
        for c in range(d_model):
            two_i = c - c % 2
            angle = p / 10000 ** (two_i / d_model)
            pe[p, c] = math.sin(angle) if c % 2 == 0 else math.cos(angle)
    return pe


def np_rms_norm(x, w, eps=1e-6):
    return x / np.sqrt(np.mean(x**2, axis=-1, keepdims=True) + eps) * w


def np_swiglu(x, w_gate, w_up, w_down):
    z = x @ w_gate
    return (z / (1.0 + np.exp(-z)) * (x @ w_up)) @ w_down


def np_heads(y, n):
    """(B, T, n*D) -> (B, n, T, D): head h holds features h*D .. (h+1)*D - 1."""
    B, T, W = y.shape
    D = W // n
    return np.stack([y[:, :, h * D : (h + 1) * D] for h in range(n)], axis=1)


def np_merge(y):
    return np.concatenate([y[:, h] for h in range(y.shape[1])], axis=-1)


def np_mha(x, wq, wk, wv, wo, H, Hkv=None, causal=True, window=None, rope_theta=None):
    T = x.shape[1]
    q, k, v = np_heads(x @ wq, H), np_heads(x @ wk, Hkv or H), np_heads(x @ wv, Hkv or H)
    if rope_theta is not None:
        q, k = np_rope(q, range(T), rope_theta), np_rope(k, range(T), rope_theta)
    blocked = None
    if window is not None:
        blocked = np_window(T, window, T)
    elif causal:
        blocked = np_causal(T, T)
    out, _ = np_attention(q, k, v, blocked)
    return np_merge(out) @ wo


def np_block(x, p, H, Hkv=None, eps=1e-6, rope_theta=None, window=None):
    a = np_mha(
        np_rms_norm(x, p["norm1"], eps), p["wq"], p["wk"], p["wv"], p["wo"],
        H, Hkv, True, window, rope_theta,
    )  # fmt: skip
    h = x + a
    return h + np_swiglu(np_rms_norm(h, p["norm2"], eps), p["w_gate"], p["w_up"], p["w_down"])


def np_decoder(ids, params, H, Hkv=None, eps=1e-6, positional="sinusoidal", rope_theta=1e4):
    embed = params["embed"]
    x = embed[ids]
    if positional == "sinusoidal":
        x = x + np_sinusoidal(ids.shape[1], embed.shape[1])
    theta = rope_theta if positional == "rope" else None
    for p in params["blocks"]:
        x = np_block(x, p, H, Hkv, eps, theta)
    return np_rms_norm(x, params["final_norm"], eps) @ embed.T


def attn_weights(rng, C, H, Hkv, dtype=np.float64):
    D = C // H
    return (
        weight(rng, C, H * D, dtype),
        weight(rng, C, Hkv * D, dtype),
        weight(rng, C, Hkv * D, dtype),
        weight(rng, H * D, C, dtype),
    )


def block_params(rng, C, H, Hkv, F_, dtype=np.float64):
    wq, wk, wv, wo = attn_weights(rng, C, H, Hkv, dtype)
    return {
        "norm1": (1.0 + 0.1 * rng.standard_normal(C)).astype(dtype),
        "wq": wq,
        "wk": wk,
        "wv": wv,
        "wo": wo,
        "norm2": (1.0 + 0.1 * rng.standard_normal(C)).astype(dtype),
        "w_gate": weight(rng, C, F_, dtype),
        "w_up": weight(rng, C, F_, dtype),
        "w_down": weight(rng, F_, C, dtype),
    }


def decoder_params(rng, V, C, H, Hkv, F_, n_blocks=2, dtype=np.float64):
    return {
        "embed": rng.standard_normal((V, C)).astype(dtype),
        "blocks": [block_params(rng, C, H, Hkv, F_, dtype) for _ in range(n_blocks)],
        "final_norm": (1.0 + 0.1 * rng.standard_normal(C)).astype(dtype),
    }


# --------------------------------------------------------------------------
# 1 softmax
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "axis"),
    [((5,), -1), ((3, 7), -1), ((3, 7), 0), ((2, 3, 4, 5), 1), ((2, 3, 4, 5), -1), ((1, 9), -2)],
)
def test_softmax(shape, axis):
    x = np.random.default_rng(1).standard_normal(shape) * 3
    ref, _ = assert_three_way("softmax", (x, axis), np_softmax(x, axis))
    torch_out = torch.softmax(torch.from_numpy(x), dim=axis).numpy()
    assert_close(ref, torch_out, what="torch.softmax")
    assert_close(ref.sum(axis=axis), np.ones(np.delete(shape, axis % len(shape))))


def test_softmax_default_axis_is_last():
    x = np.random.default_rng(2).standard_normal((4, 6))
    for impl in IMPLS.values():
        assert_close(impl.softmax(x), np_softmax(x, -1))


@pytest.mark.parametrize("magnitude", [1e3, 5e3])
def test_softmax_large_magnitude_stays_finite(magnitude):
    x = np.random.default_rng(3).standard_normal((4, 9)) * magnitude
    x[0] = magnitude  # a row of ties at a huge value: uniform weights
    x[1, 0] = -magnitude * 3
    ref, cr = assert_three_way("softmax", (x,), np_softmax(x))
    assert_close(ref[0], np.full(9, 1 / 9))
    assert_close(torch.softmax(torch.from_numpy(x), -1).numpy(), cr)


def test_softmax_all_blocked_slice_gives_zeros():
    x = np.random.default_rng(4).standard_normal((3, 5))
    x[1] = -np.inf
    x[2, :3] = -np.inf
    ref, cr = assert_three_way("softmax", (x,), np_softmax(x))
    for out in (ref, cr):
        assert np.all(out[1] == 0.0)
        assert np.all(out[2, :3] == 0.0)
        assert out[2].sum() == pytest.approx(1.0, abs=ATOL64)


# --------------------------------------------------------------------------
# 2-4 masks
# --------------------------------------------------------------------------


@pytest.mark.parametrize(("t_q", "t_k"), [(1, 1), (4, None), (5, 5), (3, 7), (7, 3), (1, 6)])
def test_causal_mask(t_q, t_k):
    expected = np_causal(t_q, t_q if t_k is None else t_k)
    args = (t_q,) if t_k is None else (t_q, t_k)
    for name, impl in IMPLS.items():
        got = impl.causal_mask(*args)
        assert got.dtype == np.bool_, name
        np.testing.assert_array_equal(got, expected, err_msg=name)


def test_causal_mask_bottom_right_alignment():
    # Tq=2 queries over Tk=5 keys are the last two positions 3 and 4.
    expected = np.array([[0, 0, 0, 0, 1], [0, 0, 0, 0, 0]], dtype=bool)
    for impl in IMPLS.values():
        np.testing.assert_array_equal(impl.causal_mask(2, 5), expected)


@pytest.mark.parametrize(
    ("t_q", "window", "t_k"),
    [(6, 1, None), (6, 3, None), (5, 2, 9), (4, 10, None), (7, 3, 4), (1, 4, 8), (9, 9, 9)],
)
def test_sliding_window_mask(t_q, window, t_k):
    expected = np_window(t_q, window, t_q if t_k is None else t_k)
    args = (t_q, window) if t_k is None else (t_q, window, t_k)
    for name, impl in IMPLS.items():
        got = impl.sliding_window_mask(*args)
        assert got.dtype == np.bool_, name
        np.testing.assert_array_equal(got, expected, err_msg=name)


def test_sliding_window_counts_the_current_token():
    for impl in IMPLS.values():
        m = impl.sliding_window_mask(5, 2)
        assert (~m).sum(axis=1).tolist() == [1, 2, 2, 2, 2]
        np.testing.assert_array_equal(impl.sliding_window_mask(5, 1), ~np.eye(5, dtype=bool))


@pytest.mark.parametrize(("lengths", "t"), [([3, 0, 5], 5), ([1], 4), ([7, 2], 4), ([0, 0], 0)])
def test_padding_mask(lengths, t):
    expected = np.zeros((len(lengths), 1, 1, t), dtype=bool)
    for b, n in enumerate(lengths):
        for j in range(t):
            expected[b, 0, 0, j] = j >= n
    for name, impl in IMPLS.items():
        got = impl.padding_mask(np.array(lengths, dtype=np.int64), t)
        assert got.dtype == np.bool_, name
        np.testing.assert_array_equal(got, expected, err_msg=name)


# --------------------------------------------------------------------------
# 5 scaled_dot_product_attention
# --------------------------------------------------------------------------

SDPA_CASES = {
    # name: (B, H, Hkv, Tq, Tk, D, Dv, mask kind, scale)
    "mha-causal": (2, 4, 4, 5, 5, 8, 8, "causal", None),
    "gqa-causal": (2, 8, 2, 6, 6, 4, 4, "causal", None),
    "mqa-causal": (1, 8, 1, 5, 5, 4, 4, "causal", None),
    "gqa-nomask": (2, 8, 2, 4, 7, 4, 4, None, None),
    "rect-bottom-right": (2, 4, 2, 3, 7, 8, 8, "causal", None),
    "odd-sizes": (1, 3, 1, 7, 7, 5, 3, "causal", None),
    "explicit-scale": (2, 4, 4, 5, 5, 6, 6, "causal", 0.3),
    "window": (1, 4, 2, 9, 9, 4, 4, "window", None),
    "padding-with-zero-length": (3, 4, 2, 5, 5, 4, 4, "padding", None),
    "causal-tq-gt-tk": (2, 8, 2, 6, 3, 4, 4, "causal", None),
    "per-head-mask": (2, 4, 2, 4, 6, 4, 4, "random", None),
}


def sdpa_inputs(case, dtype=np.float64):
    B, H, Hkv, Tq, Tk, D, Dv, kind, scale = SDPA_CASES[case]
    rng = np.random.default_rng(sum(map(ord, case)))
    q = rng.standard_normal((B, H, Tq, D)).astype(dtype)
    k = rng.standard_normal((B, Hkv, Tk, D)).astype(dtype)
    v = rng.standard_normal((B, Hkv, Tk, Dv)).astype(dtype)
    if kind == "causal":
        mask = np_causal(Tq, Tk)
    elif kind == "window":
        mask = np_window(Tq, 3, Tk)
    elif kind == "padding":
        lengths = [Tk, 0, 2][:B]
        mask = np.arange(Tk)[None, None, None, :] >= np.array(lengths)[:, None, None, None]
    elif kind == "random":
        mask = rng.random((B, H, Tq, Tk)) < 0.4
        mask[0, 0, 0] = True  # one fully blocked row
    else:
        mask = None
    return q, k, v, mask, scale


def dead_rows(mask, shape):
    if mask is None:
        return np.zeros((*shape[:3], 1), dtype=bool)
    return np.broadcast_to(mask, shape).all(axis=-1, keepdims=True)


def torch_sdpa(q, k, v, mask, scale):
    """torch's built-in SDPA (True = attend, so the contract mask is inverted)."""
    group = q.shape[1] // k.shape[1]
    qt, kt, vt = (torch.from_numpy(np.ascontiguousarray(a)) for a in (q, k, v))
    kt, vt = kt.repeat_interleave(group, dim=1), vt.repeat_interleave(group, dim=1)
    attend = None if mask is None else torch.from_numpy(~np.asarray(mask))
    return F.scaled_dot_product_attention(qt, kt, vt, attn_mask=attend, scale=scale).numpy()


@pytest.mark.parametrize("case", list(SDPA_CASES))
def test_sdpa(case):
    q, k, v, mask, scale = sdpa_inputs(case)
    B, H, Tq, _ = q.shape
    Tk = k.shape[2]
    expected_out, expected_w = np_attention(q, k, v, mask, scale)
    dead = dead_rows(mask, (B, H, Tq, Tk))
    for name, impl in IMPLS.items():
        out, w = impl.scaled_dot_product_attention(q, k, v, mask, scale)
        assert out.shape == (B, H, Tq, v.shape[3]) and w.shape == (B, H, Tq, Tk), name
        assert_close(out, expected_out, what=f"{name} out")
        assert_close(w, expected_w, what=f"{name} weights")
        # A fully blocked row: all-zero weights and output, never NaN.
        assert np.all(np.where(dead, w, 0.0) == 0.0), name
        assert np.all(np.where(dead, out, 0.0) == 0.0), name
        live = ~dead[..., 0]
        assert_close(w.sum(-1)[live], np.ones(live.sum()), what=f"{name} row sums")
    if not dead.any():
        torch_out = torch_sdpa(q, k, v, mask, scale)
        assert_close(torch_out, expected_out, what="torch F.scaled_dot_product_attention")
    ref = reference.scaled_dot_product_attention(q, k, v, mask, scale)
    cr = clean_room.scaled_dot_product_attention(q, k, v, mask, scale)
    assert_close(ref[0], cr[0], what="reference vs clean_room out")
    assert_close(ref[1], cr[1], what="reference vs clean_room weights")


def test_sdpa_fully_blocked_rows_present_in_cases():
    # Guard the guard: the dead-row cases above really contain dead rows.
    for case in ("padding-with-zero-length", "causal-tq-gt-tk", "per-head-mask"):
        q, k, v, mask, _ = sdpa_inputs(case)
        assert dead_rows(mask, (*q.shape[:3], k.shape[2])).any(), case


def test_sdpa_rectangular_sees_prefix_bottom_right():
    q, k, v, mask, _ = sdpa_inputs("rect-bottom-right")  # Tq=3, Tk=7
    for impl in IMPLS.values():
        _, w = impl.scaled_dot_product_attention(q, k, v, mask)
        assert np.all(w[..., -1, :] > 0)  # the last query sits at position Tk - 1
        assert np.all(w[..., 0, 5:] == 0) and np.all(w[..., 0, :5] > 0)  # first at 4


def test_sdpa_gqa_head_mapping():
    # Query head h reads kv head h // (H // Hkv): with H=8, Hkv=2, heads 0-3 read kv 0.
    rng = np.random.default_rng(5)
    q = np.repeat(rng.standard_normal((1, 1, 3, 4)), 8, axis=1)
    k = rng.standard_normal((1, 2, 3, 4))
    v = rng.standard_normal((1, 2, 3, 4))
    for impl in IMPLS.values():
        out, _ = impl.scaled_dot_product_attention(q, k, v)
        for h in range(8):
            assert_close(out[0, h], out[0, 4 * (h // 4)])
        assert max_err(out[0, 0], out[0, 4]) > 1e-3


# --------------------------------------------------------------------------
# 6-8 heads
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("B", "T", "C", "H"), [(2, 5, 12, 3), (1, 7, 8, 8), (2, 3, 6, 1), (3, 1, 10, 2)]
)
def test_split_and_merge_heads(B, T, C, H):
    x = np.random.default_rng(6).standard_normal((B, T, C))
    D = C // H
    expected = np.zeros((B, H, T, D))
    for h in range(H):
        for d in range(D):
            expected[:, h, :, d] = x[:, :, h * D + d]
    torch_split = torch.from_numpy(x).unflatten(-1, (H, D)).permute(0, 2, 1, 3).numpy()
    assert_close(torch_split, expected)
    assert_three_way("split_heads", (x, H), expected)
    assert_three_way("merge_heads", (expected,), x)
    for name, impl in IMPLS.items():
        assert_close(impl.merge_heads(impl.split_heads(x, H)), x, what=f"{name} round trip")


@pytest.mark.parametrize(
    ("shape", "n_rep"), [((2, 2, 5, 4), 4), ((1, 1, 3, 2), 8), ((2, 3, 4, 5), 1)]
)
def test_repeat_kv(shape, n_rep):
    x = np.random.default_rng(7).standard_normal(shape)
    expected = torch.from_numpy(x).repeat_interleave(n_rep, dim=1).numpy()
    for h in range(shape[1] * n_rep):
        assert_close(expected[:, h], x[:, h // n_rep])  # interleaved, not tiled
    assert_three_way("repeat_kv", (x, n_rep), expected)


# --------------------------------------------------------------------------
# 9-10 positions
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "positions", "theta"),
    [
        ((2, 3, 6, 8), ROPE_POSITIONS, 10000.0),
        ((6, 4), ROPE_POSITIONS, 10000.0),
        ((1, 2, 6, 16), ROPE_POSITIONS, 500.0),
        ((2, 7, 6), list(range(7)), 10000.0),
        ((3, 2), [0, 1000, 7], 10000.0),
    ],
)
def test_rope(shape, positions, theta):
    x = np.random.default_rng(8).standard_normal(shape)
    pos = np.array(positions, dtype=np.int64)
    expected = np_rope(x, positions, theta)
    kwargs = {} if theta == 10000.0 else {"theta": theta}
    ref, cr = assert_three_way("rope", (x, pos), expected, kwargs)
    for out in (ref, cr):
        # A rotation keeps each pair's length; position 0 is the identity.
        pairs_in = x.reshape(*shape[:-1], -1, 2)
        pairs_out = out.reshape(*shape[:-1], -1, 2)
        assert_close(np.linalg.norm(pairs_out, axis=-1), np.linalg.norm(pairs_in, axis=-1))
        for t, p in enumerate(positions):
            if p == 0:
                assert_close(out[..., t, :], x[..., t, :])


def test_rope_repeated_positions_rotate_alike():
    x = np.random.default_rng(9).standard_normal((6, 8))
    x[4] = x[3]  # positions 5 and 5
    for impl in IMPLS.values():
        out = impl.rope(x, np.array(ROPE_POSITIONS))
        np.testing.assert_array_equal(out[3], out[4])


@pytest.mark.parametrize(("seq_len", "d_model"), [(1, 1), (7, 4), (9, 7), (16, 33), (5, 2)])
def test_sinusoidal_positions(seq_len, d_model):
    assert_three_way("sinusoidal_positions", (seq_len, d_model), np_sinusoidal(seq_len, d_model))


# --------------------------------------------------------------------------
# 11-14 norms and feed-forward
# --------------------------------------------------------------------------


@pytest.mark.parametrize(("shape", "eps"), [((2, 5, 7), None), ((3, 16), 1e-3), ((4,), None)])
def test_rms_norm(shape, eps):
    rng = np.random.default_rng(10)
    x = rng.standard_normal(shape) * 2
    w = 1.0 + 0.1 * rng.standard_normal(shape[-1])
    kwargs = {} if eps is None else {"eps": eps}
    expected = np_rms_norm(x, w, 1e-6 if eps is None else eps)
    torch_out = F.rms_norm(torch.from_numpy(x), (shape[-1],), torch.from_numpy(w), eps or 1e-6)
    assert_close(torch_out.numpy(), expected, what="F.rms_norm")
    assert_three_way("rms_norm", (x, w), expected, kwargs)


@pytest.mark.parametrize(("shape", "eps"), [((2, 5, 7), None), ((3, 16), 1e-2), ((1, 1, 3), None)])
def test_layer_norm(shape, eps):
    rng = np.random.default_rng(11)
    x = rng.standard_normal(shape) * 2 + 0.5
    w = 1.0 + 0.1 * rng.standard_normal(shape[-1])
    b = 0.1 * rng.standard_normal(shape[-1])
    e = 1e-5 if eps is None else eps
    kwargs = {} if eps is None else {"eps": eps}
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)  # biased
    expected = (x - mean) / np.sqrt(var + e) * w + b
    C = shape[-1]
    torch_out = F.layer_norm(torch.from_numpy(x), (C,), torch.from_numpy(w), torch.from_numpy(b), e)
    assert_close(torch_out.numpy(), expected, what="F.layer_norm")
    assert_three_way("layer_norm", (x, w, b), expected, kwargs)


@pytest.mark.parametrize(("x_shape", "F_"), [((2, 5, 8), 11), ((3, 7), 16), ((1, 1, 5), 1)])
def test_relu_ffn(x_shape, F_):
    rng = np.random.default_rng(12)
    C = x_shape[-1]
    x = rng.standard_normal(x_shape)
    w1, w2 = weight(rng, C, F_), weight(rng, F_, C)
    b1, b2 = 0.1 * rng.standard_normal(F_), 0.1 * rng.standard_normal(C)
    expected = np.maximum(0.0, x @ w1 + b1) @ w2 + b2
    t = {k: torch.from_numpy(a) for k, a in dict(x=x, w1=w1, b1=b1, w2=w2, b2=b2).items()}
    hidden = F.relu(F.linear(t["x"], t["w1"].T, t["b1"]))
    assert_close(F.linear(hidden, t["w2"].T, t["b2"]).numpy(), expected, what="F.linear")
    assert_three_way("relu_ffn", (x, w1, b1, w2, b2), expected)


@pytest.mark.parametrize(("x_shape", "F_"), [((2, 5, 8), 11), ((3, 7), 16), ((1, 1, 5), 1)])
def test_swiglu_ffn(x_shape, F_):
    rng = np.random.default_rng(13)
    C = x_shape[-1]
    x = rng.standard_normal(x_shape) * 2
    w_gate, w_up, w_down = weight(rng, C, F_), weight(rng, C, F_), weight(rng, F_, C)
    expected = np_swiglu(x, w_gate, w_up, w_down)
    xt = torch.from_numpy(x)
    torch_out = (F.silu(xt @ torch.from_numpy(w_gate)) * (xt @ torch.from_numpy(w_up))) @ (
        torch.from_numpy(w_down)
    )
    assert_close(torch_out.numpy(), expected, what="F.silu")
    assert_three_way("swiglu_ffn", (x, w_gate, w_up, w_down), expected)


# --------------------------------------------------------------------------
# 15 multi_head_attention
# --------------------------------------------------------------------------

MHA_CASES = {
    # name: (B, T, C, H, Hkv, causal, window, rope_theta)
    "mha": (2, 6, 16, 4, None, True, None, None),
    "gqa-odd-T": (2, 7, 32, 8, 2, True, None, None),
    "mqa": (1, 5, 16, 8, 1, True, None, None),
    "not-causal": (2, 5, 16, 4, 2, False, None, None),
    "window": (1, 8, 16, 4, 4, True, 3, None),
    "rope-gqa": (2, 7, 32, 8, 2, True, None, 10000.0),
    "rope-window-gqa": (1, 9, 32, 8, 2, True, 2, 500.0),
    "single-token": (2, 1, 12, 3, 1, True, None, 10000.0),
}


@pytest.mark.parametrize("case", list(MHA_CASES))
def test_multi_head_attention(case):
    B, T, C, H, Hkv, causal, window, theta = MHA_CASES[case]
    rng = np.random.default_rng(sum(map(ord, case)))
    x = rng.standard_normal((B, T, C))
    w = attn_weights(rng, C, H, Hkv or H)
    expected = np_mha(x, *w, H, Hkv, causal, window, theta)
    kwargs = {"n_kv_heads": Hkv, "causal": causal, "window": window, "rope_theta": theta}
    ref, cr = assert_three_way("multi_head_attention", (x, *w, H), expected, kwargs)
    assert ref.shape == cr.shape == (B, T, C)


def test_multi_head_attention_defaults_are_causal_mha():
    rng = np.random.default_rng(14)
    x = rng.standard_normal((2, 5, 12))
    w = attn_weights(rng, 12, 3, 3)
    assert_three_way("multi_head_attention", (x, *w, 3), np_mha(x, *w, 3))


# --------------------------------------------------------------------------
# 16 attention_decode
# --------------------------------------------------------------------------

DECODE_CASES = {
    # name: (C, H, Hkv, window, rope_theta, chunks)
    "gqa": (32, 8, 2, None, None, (3, 1, 4, 2)),
    "gqa-rope": (32, 8, 2, None, 10000.0, (3, 1, 4, 2)),
    "mqa-rope": (16, 8, 1, None, 10000.0, (1, 1, 1, 5)),
    "window-rope": (32, 8, 2, 3, 10000.0, (3, 1, 4, 2)),
    "window-1": (16, 4, 4, 1, None, (2, 3, 5)),
    "one-chunk": (16, 4, 2, None, 10000.0, (7,)),
}


@pytest.mark.parametrize("impl_name", IMPL_NAMES)
@pytest.mark.parametrize("case", list(DECODE_CASES))
def test_attention_decode_in_chunks_equals_full_attention(case, impl_name):
    C, H, Hkv, window, theta, chunks = DECODE_CASES[case]
    impl = IMPLS[impl_name]
    B, T = 2, sum(chunks)
    rng = np.random.default_rng(sum(map(ord, case)))
    x = rng.standard_normal((B, T, C))
    w = attn_weights(rng, C, H, Hkv)
    full = impl.multi_head_attention(x, *w, H, Hkv, window=window, rope_theta=theta)
    assert_close(full, np_mha(x, *w, H, Hkv, True, window, theta), what="full attention")
    k_cache = v_cache = None
    outs = []
    start = 0
    for n in chunks:
        out, k_cache, v_cache = impl.attention_decode(
            x[:, start : start + n], k_cache, v_cache, *w, H, Hkv, window=window, rope_theta=theta
        )
        start += n
        assert out.shape == (B, n, C)
        assert k_cache.shape == v_cache.shape == (B, Hkv, start, C // H)
        assert_close(out, full[:, start - n : start], what=f"chunk ending at {start}")
        outs.append(out)
    assert_close(np.concatenate(outs, axis=1), full)
    # The caches hold every key (RoPE applied at positions 0..T-1) and value.
    k_expected = np_heads(x @ w[1], Hkv)
    if theta is not None:
        k_expected = np_rope(k_expected, range(T), theta)
    assert_close(k_cache, k_expected, what="k_all")
    assert_close(v_cache, np_heads(x @ w[2], Hkv), what="v_all")


def test_attention_decode_reference_vs_clean_room():
    C, H, Hkv, window, theta = 32, 8, 2, 3, 10000.0
    rng = np.random.default_rng(15)
    w = attn_weights(rng, C, H, Hkv)
    past_k = rng.standard_normal((2, Hkv, 5, C // H))
    past_v = rng.standard_normal((2, Hkv, 5, C // H))
    x_new = rng.standard_normal((2, 3, C))
    args = (x_new, past_k, past_v, *w, H, Hkv, window, theta)
    ref, cr = reference.attention_decode(*args), clean_room.attention_decode(*args)
    for a, b in zip(ref, cr, strict=True):
        assert_close(a, b)
    assert_close(ref[1][:, :, :5], past_k)  # the cache is appended to, not rewritten


# --------------------------------------------------------------------------
# 17 tiled_attention
# --------------------------------------------------------------------------

TILED_SHAPES = {
    # name: (B, H, Hkv, Tq, Tk, D)
    "gqa-square": (2, 8, 2, 7, 7, 4),
    "rect": (1, 4, 4, 3, 7, 8),
    "tq-gt-tk": (1, 4, 1, 6, 3, 4),
}


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("block", ["1", "3", "T", "T+5"])
@pytest.mark.parametrize("shape", list(TILED_SHAPES))
def test_tiled_attention(shape, block, causal):
    B, H, Hkv, Tq, Tk, D = TILED_SHAPES[shape]
    block_size = {"1": 1, "3": 3, "T": Tk, "T+5": Tk + 5}[block]
    rng = np.random.default_rng(16)
    q = rng.standard_normal((B, H, Tq, D))
    k = rng.standard_normal((B, Hkv, Tk, D))
    v = rng.standard_normal((B, Hkv, Tk, D))
    mask = np_causal(Tq, Tk) if causal else None
    expected, _ = np_attention(q, k, v, mask)
    kwargs = {} if causal else {"causal": False}
    ref, cr = assert_three_way("tiled_attention", (q, k, v, block_size), expected, kwargs)
    for name, impl in IMPLS.items():
        full, _ = impl.scaled_dot_product_attention(q, k, v, mask)
        assert_close(ref if name == "reference" else cr, full, what=f"{name} tiled vs sdpa")


def test_tiled_attention_scale():
    rng = np.random.default_rng(17)
    q, k, v = (rng.standard_normal((1, 2, 5, 4)) for _ in range(3))
    expected, _ = np_attention(q, k, v, np_causal(5, 5), scale=0.7)
    assert_three_way("tiled_attention", (q, k, v, 2), expected, {"scale": 0.7})


# --------------------------------------------------------------------------
# 18-19 block and model
# --------------------------------------------------------------------------

BLOCK_CASES = {
    # name: (B, T, C, H, Hkv, F, eps, rope_theta, window)
    "mha-plain": (2, 5, 16, 4, None, 24, None, None, None),
    "gqa-rope": (2, 7, 32, 8, 2, 37, None, 10000.0, None),
    "mqa-window-rope": (1, 9, 16, 4, 1, 20, 1e-5, 500.0, 3),
}


@pytest.mark.parametrize("case", list(BLOCK_CASES))
def test_transformer_block(case):
    B, T, C, H, Hkv, F_, eps, theta, window = BLOCK_CASES[case]
    rng = np.random.default_rng(sum(map(ord, case)))
    x = rng.standard_normal((B, T, C))
    p = block_params(rng, C, H, Hkv or H, F_)
    expected = np_block(x, p, H, Hkv, 1e-6 if eps is None else eps, theta, window)
    kwargs = {"n_kv_heads": Hkv, "rope_theta": theta, "window": window}
    if eps is not None:
        kwargs["eps"] = eps
    assert_three_way("transformer_block", (x, p, H), expected, kwargs)


@pytest.mark.parametrize("positional", ["sinusoidal", "rope", "none"])
@pytest.mark.parametrize("n_kv_heads", [None, 2])
def test_decoder_forward(positional, n_kv_heads):
    B, T, V, C, H, F_ = 2, 7, 11, 16, 4, 24
    rng = np.random.default_rng(18)
    params = decoder_params(rng, V, C, H, n_kv_heads or H, F_)
    ids = rng.integers(0, V, size=(B, T))
    expected = np_decoder(ids, params, H, n_kv_heads, positional=positional)
    kwargs = {"n_kv_heads": n_kv_heads, "positional": positional}
    ref, cr = assert_three_way("decoder_forward", (ids, params, H), expected, kwargs)
    assert ref.shape == cr.shape == (B, T, V)


def test_decoder_forward_rope_theta_and_window():
    B, T, V, C, H, F_ = 1, 8, 9, 16, 4, 20
    rng = np.random.default_rng(19)
    params = decoder_params(rng, V, C, H, 2, F_)
    ids = rng.integers(0, V, size=(B, T))
    x = params["embed"][ids]
    for p in params["blocks"]:
        x = np_block(x, p, 4, 2, 1e-6, 1000.0, 3)
    expected = np_rms_norm(x, params["final_norm"]) @ params["embed"].T
    kwargs = {"n_kv_heads": 2, "positional": "rope", "rope_theta": 1000.0, "window": 3}
    assert_three_way("decoder_forward", (ids, params, H), expected, kwargs)


def test_decoder_positional_variants_differ():
    # The three positional schemes are really different computations.
    rng = np.random.default_rng(20)
    params = decoder_params(rng, 9, 16, 4, 4, 20)
    ids = rng.integers(0, 9, size=(1, 6))
    outs = {
        p: clean_room.decoder_forward(ids, params, 4, positional=p)
        for p in ("sinusoidal", "rope", "none")
    }
    assert max_err(outs["sinusoidal"], outs["none"]) > 1e-3
    assert max_err(outs["rope"], outs["none"]) > 1e-3


# --------------------------------------------------------------------------
# float32
# --------------------------------------------------------------------------


@pytest.mark.parametrize("case", ["gqa-causal", "mqa-causal", "rect-bottom-right", "gqa-nomask"])
def test_clean_room_sdpa_float32_matches_torch_float32(case):
    q, k, v, mask, scale = sdpa_inputs(case, np.float32)
    out, w = clean_room.scaled_dot_product_attention(q, k, v, mask, scale)
    assert out.dtype == np.float32 and w.dtype == np.float32
    torch_out = torch_sdpa(q, k, v, mask, scale)
    assert torch_out.dtype == np.float32
    assert_close(out, torch_out, ATOL32, "clean_room float32 vs torch float32")


def _f32_calls(rng):
    """name -> (args, kwargs) with every float array in float32."""
    f32 = np.float32
    B, T, C, H, Hkv, F_, V = 2, 5, 16, 4, 2, 12, 9
    D = C // H
    x = rng.standard_normal((B, T, C)).astype(f32)
    q = rng.standard_normal((B, H, T, D)).astype(f32)
    k = rng.standard_normal((B, Hkv, T, D)).astype(f32)
    v = rng.standard_normal((B, Hkv, T, D)).astype(f32)
    w = attn_weights(rng, C, H, Hkv, f32)
    vec = (1.0 + 0.1 * rng.standard_normal(C)).astype(f32)
    bias = (0.1 * rng.standard_normal(C)).astype(f32)
    w1, w2 = weight(rng, C, F_, f32), weight(rng, F_, C, f32)
    b1 = (0.1 * rng.standard_normal(F_)).astype(f32)
    params = block_params(rng, C, H, Hkv, F_, f32)
    return {
        "softmax": ((x * 5,), {}),
        "scaled_dot_product_attention": ((q, k, v, np_causal(T, T)), {}),
        "split_heads": ((x, H), {}),
        "merge_heads": ((q,), {}),
        "repeat_kv": ((k, 2), {}),
        "rope": ((q, np.array([3, 0, 17, 5, 100])), {}),
        "rms_norm": ((x, vec), {}),
        "layer_norm": ((x, vec, bias), {}),
        "relu_ffn": ((x, w1, b1, w2, bias), {}),
        "swiglu_ffn": ((x, w1, weight(rng, C, F_, f32), w2), {}),
        "multi_head_attention": ((x, *w, H, Hkv), {"window": 3, "rope_theta": 10000.0}),
        "attention_decode": ((x[:, 3:], k[:, :, :3], v[:, :, :3], *w, H, Hkv), {"rope_theta": 1e4}),
        "tiled_attention": ((q, k, v, 2), {}),
        "transformer_block": ((x, params, H, Hkv), {"rope_theta": 10000.0}),
        "decoder_forward": (
            (rng.integers(0, V, size=(B, T)), decoder_params(rng, V, C, H, Hkv, F_, 1, f32), H),
            {"n_kv_heads": Hkv},
        ),
    }


F32_FUNCTIONS = list(_f32_calls(np.random.default_rng(0)))


def _as64(value):
    if isinstance(value, np.ndarray) and value.dtype == np.float32:
        return value.astype(np.float64)
    if isinstance(value, dict):
        return {k: _as64(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_as64(v) for v in value]
    return value


@pytest.mark.parametrize("impl_name", IMPL_NAMES)
@pytest.mark.parametrize("fn_name", F32_FUNCTIONS)
def test_float32_in_float32_out(fn_name, impl_name):
    args, kwargs = _f32_calls(np.random.default_rng(21))[fn_name]
    fn = getattr(IMPLS[impl_name], fn_name)
    out32 = fn(*args, **kwargs)
    out64 = fn(*[_as64(a) for a in args], **kwargs)
    outs32 = out32 if isinstance(out32, tuple) else (out32,)
    outs64 = out64 if isinstance(out64, tuple) else (out64,)
    for a32, a64 in zip(outs32, outs64, strict=True):
        assert a32.dtype == np.float32, f"{impl_name}.{fn_name} returned {a32.dtype}"
        assert a64.dtype == np.float64, f"{impl_name}.{fn_name} returned {a64.dtype}"
        assert_close(a32, a64, ATOL32_VS_64, f"{impl_name}.{fn_name} float32 vs float64")


def test_float32_coverage_is_every_float_function():
    # Masks and sinusoidal_positions take only ints; every other function is covered.
    int_only = {"causal_mask", "sliding_window_mask", "padding_mask", "sinusoidal_positions"}
    assert set(F32_FUNCTIONS) | int_only == set(reference.__all__)
    # labctl's own room is a v2 room: it holds v1's 19 and more (tests/test_reference_v2.py).
    assert set(reference.__all__) < set(clean_room.__all__)
    assert len(reference.__all__) == 19


# --------------------------------------------------------------------------
# purity
# --------------------------------------------------------------------------


@pytest.mark.parametrize("impl_name", IMPL_NAMES)
def test_inputs_are_not_modified(impl_name):
    calls = _f32_calls(np.random.default_rng(22))
    impl = IMPLS[impl_name]
    for fn_name, (args, kwargs) in calls.items():
        args64 = [_as64(a) for a in args]
        before = copy.deepcopy(args64)
        getattr(impl, fn_name)(*args64, **kwargs)
        _assert_same_tree(args64, before, f"{impl_name}.{fn_name}")


def _assert_same_tree(a, b, what):
    """Arrays inside args, params dicts and block lists are unchanged."""
    if isinstance(a, np.ndarray):
        np.testing.assert_array_equal(a, b, err_msg=what)
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), what
        for key in a:
            _assert_same_tree(a[key], b[key], f"{what}[{key!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), what
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _assert_same_tree(x, y, f"{what}[{i}]")
