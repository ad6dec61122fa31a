"""Parity of contract v2's new functions and parameters: PyTorch reference vs NumPy clean room
vs an independent expression written here (loops over the contract's formulas).

Also: every v1 call gives the same numbers on v2's reference as on v1's (v2 only adds), and
each new bad input is a ValueError or TypeError naming the argument.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from test_parity import (
    ATOL32,
    ATOL64,
    assert_close,
    attn_weights,
    np_attention,
    np_causal,
    np_heads,
    np_merge,
    np_rms_norm,
    np_rope,
    np_sinusoidal,
    np_swiglu,
    weight,
)

import labctl.reference as reference_v1
import labctl.reference.v2 as reference
from labctl import clean_room

IMPLS = {"reference": reference, "clean_room": clean_room}


def three_way(fn_name, args, expected, kwargs=None, atol=ATOL64):
    kwargs = kwargs or {}
    ref = getattr(reference, fn_name)(*args, **kwargs)
    room = getattr(clean_room, fn_name)(*args, **kwargs)
    assert_close(ref, expected, atol, f"reference {fn_name}")
    assert_close(room, expected, atol, f"clean_room {fn_name}")
    assert_close(ref, room, atol, f"reference vs clean_room {fn_name}")
    return ref, room


# ---- softmax with a temperature ------------------------------------------------------------


@pytest.mark.parametrize("temperature", [0.25, 1.0, 3.0])
def test_softmax_temperature_divides_the_logits(temperature):
    x = np.random.default_rng(0).standard_normal((3, 7)) * 4
    z = x / temperature
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    three_way("softmax", (x,), e / e.sum(axis=-1, keepdims=True), {"temperature": temperature})


def test_softmax_temperature_flattens_and_sharpens():
    x = np.array([2.0, 1.0, 0.0])
    hot, cold = (reference.softmax(x, temperature=t)[0] for t in (10.0, 0.1))
    assert hot < 0.4 < 0.99 < cold  # T = 10 is near uniform (1/3), T = 0.1 near one-hot


# ---- RoPE: batched positions and scaling ----------------------------------------------------


def test_rope_batched_positions_rotate_each_row_at_its_own_position():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 5, 8))  # (B, H, T, D)
    positions = np.array([[0, 1, 2, 3, 4], [7, 7, 9, 0, 30]])  # (B, T)
    expected = np.stack([np_rope(x[b], positions[b]) for b in range(2)])
    three_way("rope", (x, positions), expected)


def test_rope_linear_scaling_divides_the_positions():
    x = np.random.default_rng(2).standard_normal((6, 8))
    positions = np.array([0, 3, 8, 17, 40, 100])
    D, factor = 8, 4.0
    expected = np.empty_like(x)
    for t, p in enumerate(positions):
        for i in range(D // 2):
            angle = (p / factor) * 10000.0 ** (-2 * i / D)
            c, s = math.cos(angle), math.sin(angle)
            expected[t, 2 * i] = c * x[t, 2 * i] - s * x[t, 2 * i + 1]
            expected[t, 2 * i + 1] = s * x[t, 2 * i] + c * x[t, 2 * i + 1]
    three_way("rope", (x, positions), expected, {"scaling": "linear", "factor": factor})


def test_rope_ntk_scaling_raises_the_base():
    x = np.random.default_rng(3).standard_normal((2, 6, 16))
    positions = np.array([0, 1, 5, 60, 61, 2000])
    factor, D = 8.0, 16
    expected = np_rope(x, positions, 10000.0 * factor ** (D / (D - 2)))
    ref, _ = three_way("rope", (x, positions), expected, {"scaling": "ntk", "factor": factor})
    # NTK leaves the fastest pair (i = 0) alone: its angle is theta' ** 0 = 1 per position.
    plain = np_rope(x, positions)
    assert_close(ref[..., :2], plain[..., :2], ATOL64, "NTK's first pair")
    assert np.abs(ref[..., -2:] - plain[..., -2:]).max() > 1e-3


def test_rope_factor_one_is_v1():
    x = np.random.default_rng(4).standard_normal((5, 4))
    positions = np.arange(5)
    for scaling in ("linear", "ntk"):
        three_way("rope", (x, positions), np_rope(x, positions), {"scaling": scaling})


# ---- ALiBi and learned positions -----------------------------------------------------------


def test_alibi_slopes_power_of_two_and_the_papers_rule():
    three_way("alibi_slopes", (8,), 2.0 ** -np.arange(1.0, 9.0))
    # 6 heads: the 4-head slopes 2^-2, 2^-4, 2^-6, 2^-8, then 8-head slopes 0 and 2: 2^-1, 2^-3.
    three_way("alibi_slopes", (6,), 2.0 ** -np.array([2.0, 4, 6, 8, 1, 3]))
    three_way("alibi_slopes", (1,), np.array([2.0**-8]))


@pytest.mark.parametrize(("t_q", "t_k"), [(5, None), (2, 6), (1, 4)])
def test_alibi_bias_is_minus_slope_times_distance(t_q, t_k):
    H, Tk = 4, t_k or t_q
    slopes = 2.0 ** (-8.0 * np.arange(1, H + 1) / H)
    expected = np.zeros((H, t_q, Tk))
    for h in range(H):
        for i in range(t_q):
            for j in range(Tk):
                expected[h, i, j] = -slopes[h] * ((Tk - t_q + i) - j)
    ref, _ = three_way("alibi_bias", (H, t_q, t_k), expected)
    assert ref.dtype == np.float64


def test_learned_positions_index_the_table():
    table = np.random.default_rng(5).standard_normal((10, 4))
    three_way("learned_positions", (np.array([0, 9, 3]), table), table[[0, 9, 3]])
    batched = np.array([[1, 2], [8, 8]])
    three_way("learned_positions", (batched, table), table[batched])


# ---- GELU and the GLU family ---------------------------------------------------------------


def test_gelu_exact_and_tanh():
    x = np.linspace(-6, 6, 121)
    exact = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x])
    c = math.sqrt(2 / math.pi)
    approx = np.array([0.5 * v * (1 + math.tanh(c * (v + 0.044715 * v**3))) for v in x])
    three_way("gelu", (x,), exact)
    three_way("gelu", (x,), approx, {"approximate": "tanh"})
    # The two differ, by at most a few 1e-4 (Hendrycks & Gimpel's approximation).
    assert 1e-5 < np.abs(exact - approx).max() < 1e-3


def test_glu_and_geglu():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, 3, 8))
    w_gate, w_up, w_down = weight(rng, 8, 12), weight(rng, 8, 12), weight(rng, 12, 8)
    gate, up = x @ w_gate, x @ w_up
    three_way("glu_ffn", (x, w_gate, w_up, w_down), (up / (1 + np.exp(-gate))) @ w_down)
    erf = np.vectorize(math.erf)
    gelu_gate = 0.5 * gate * (1 + erf(gate / math.sqrt(2)))
    three_way("geglu_ffn", (x, w_gate, w_up, w_down), (gelu_gate * up) @ w_down)
    tanh_gate = torch.from_numpy(gate)
    expected = (F.gelu(tanh_gate, approximate="tanh").numpy() * up) @ w_down
    three_way("geglu_ffn", (x, w_gate, w_up, w_down), expected, {"approximate": "tanh"})


# ---- attention entropy ---------------------------------------------------------------------


def test_attention_entropy_in_nats_with_zero_log_zero():
    w = np.array([[0.5, 0.5, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25], [1.0, 0, 0, 0], [0, 0, 0, 0]])
    three_way("attention_entropy", (w,), np.array([math.log(2), math.log(4), 0.0, 0.0]))
    three_way("attention_entropy", (w.T,), np.array([_entropy(row) for row in w]), {"axis": 0})


def _entropy(row) -> float:
    return -sum(p * math.log(p) for p in row if p > 0)


# ---- attention with positions, decode with positions ---------------------------------------


def np_mha_at(x, wq, wk, wv, wo, H, Hkv, positions, theta=10000.0):
    """Causal MHA with RoPE at `positions` (T,) or (B, T); the mask stays by index."""
    B, T, _ = x.shape
    q, k, v = np_heads(x @ wq, H), np_heads(x @ wk, Hkv), np_heads(x @ wv, Hkv)
    positions = np.broadcast_to(positions, (B, T))
    q = np.stack([np_rope(q[b], positions[b], theta) for b in range(B)])
    k = np.stack([np_rope(k[b], positions[b], theta) for b in range(B)])
    out, _ = np_attention(q, k, v, np_causal(T, T))
    return np_merge(out) @ wo


def test_multi_head_attention_rotates_at_the_given_positions():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 5, 8))
    w = attn_weights(rng, 8, 4, 2)
    default = np_mha_at(x, *w, 4, 2, np.arange(5))
    three_way("multi_head_attention", (x, *w, 4, 2), default, {"rope_theta": 10000.0})
    positions = np.array([[3, 4, 5, 6, 7], [0, 0, 1, 2, 3]])  # an offset; a left pad
    expected = np_mha_at(x, *w, 4, 2, positions)
    kwargs = {"rope_theta": 10000.0, "positions": positions}
    ref, _ = three_way("multi_head_attention", (x, *w, 4, 2), expected, kwargs)
    assert np.abs(ref - default).max() > 1e-3  # the positions matter


def test_attention_decode_at_given_positions_matches_the_full_pass():
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 6, 8))
    w = attn_weights(rng, 8, 4, 2)
    positions = np.array([[10, 11, 12, 13, 14, 15], [2, 3, 4, 5, 6, 7]])
    full = np_mha_at(x, *w, 4, 2, positions)
    for impl in IMPLS.values():
        _, k, v = impl.attention_decode(
            x[:, :4], None, None, *w, 4, 2, rope_theta=1e4, positions=positions[:, :4]
        )
        out, k_all, _ = impl.attention_decode(
            x[:, 4:], k, v, *w, 4, 2, rope_theta=1e4, positions=positions[:, 4:]
        )
        assert_close(out, full[:, 4:], ATOL64, "decode at positions")
        assert k_all.shape == (2, 2, 6, 2)
    default = reference.attention_decode(x[:, 4:], k, v, *w, 4, 2, rope_theta=1e4)[0]
    assert np.abs(default - full[:, 4:]).max() > 1e-3  # Tp.. differs from the given positions


# ---- decoder: untied head, learned positions, ALiBi ----------------------------------------


def _decoder_params(rng, V=11, C=8, F=12, n_blocks=2, Hkv=2, H=4):
    D = C // H
    blocks = [
        {
            "norm1": 1 + 0.1 * rng.standard_normal(C),
            "wq": weight(rng, C, H * D),
            "wk": weight(rng, C, Hkv * D),
            "wv": weight(rng, C, Hkv * D),
            "wo": weight(rng, H * D, C),
            "norm2": 1 + 0.1 * rng.standard_normal(C),
            "w_gate": weight(rng, C, F),
            "w_up": weight(rng, C, F),
            "w_down": weight(rng, F, C),
        }
        for _ in range(n_blocks)
    ]
    return {
        "embed": rng.standard_normal((V, C)),
        "blocks": blocks,
        "final_norm": 1 + 0.1 * rng.standard_normal(C),
    }


def np_decoder_v2(ids, params, H, Hkv, positional):
    x = params["embed"][ids]
    B, T, C = x.shape
    if positional == "sinusoidal":
        x = x + np_sinusoidal(T, C)
    if positional == "learned":
        x = x + params["pos_embed"][:T]
    slopes = 2.0 ** (-8.0 * np.arange(1, H + 1) / H)
    for p in params["blocks"]:
        h_in = np_rms_norm(x, p["norm1"])
        q, k, v = (np_heads(h_in @ p[n], m) for n, m in (("wq", H), ("wk", Hkv), ("wv", Hkv)))
        out = np.zeros_like(q)
        for b in range(B):
            for h in range(H):
                scores = q[b, h] @ k[b, h // (H // Hkv)].T / math.sqrt(q.shape[-1])
                for i in range(T):
                    row = scores[i, : i + 1].copy()
                    if positional == "alibi":
                        row -= slopes[h] * (i - np.arange(i + 1))
                    e = np.exp(row - row.max())
                    out[b, h, i] = (e / e.sum()) @ v[b, h // (H // Hkv), : i + 1]
        x = x + np_merge(out) @ p["wo"]
        x = x + np_swiglu(np_rms_norm(x, p["norm2"]), p["w_gate"], p["w_up"], p["w_down"])
    x = np_rms_norm(x, params["final_norm"])
    return x @ (params["lm_head"] if "lm_head" in params else params["embed"].T)


@pytest.mark.parametrize("positional", ["learned", "alibi", "sinusoidal"])
def test_decoder_positions_and_untied_head(positional):
    rng = np.random.default_rng(9)
    params = _decoder_params(rng)
    params["pos_embed"] = 0.5 * rng.standard_normal((9, 8))
    params["lm_head"] = weight(rng, 8, 11)
    ids = rng.integers(0, 11, size=(2, 7))
    expected = np_decoder_v2(ids, params, 4, 2, positional)
    three_way("decoder_forward", (ids, params, 4, 2), expected, {"positional": positional})


def test_v1_calls_give_v1_numbers_on_the_v2_reference():
    rng = np.random.default_rng(10)
    params = _decoder_params(rng)
    ids = rng.integers(0, 11, size=(2, 5))
    for positional in ("sinusoidal", "rope", "none"):
        v1 = reference_v1.decoder_forward(ids, params, 4, 2, positional=positional)
        v2 = reference.decoder_forward(ids, params, 4, 2, positional=positional)
        assert_close(v2, v1, 1e-12, f"decoder {positional}")
    x = rng.standard_normal((2, 5, 8))
    w = attn_weights(rng, 8, 4, 2)
    assert_close(
        reference.multi_head_attention(x, *w, 4, 2, window=3, rope_theta=1e4),
        reference_v1.multi_head_attention(x, *w, 4, 2, window=3, rope_theta=1e4),
        1e-12,
        "mha",
    )
    x4 = rng.standard_normal((2, 2, 5, 8))
    assert_close(reference.rope(x4, np.arange(5)), reference_v1.rope(x4, np.arange(5)), 1e-15)
    assert_close(reference.softmax(x4, 1), reference_v1.softmax(x4, 1), 1e-15)


# ---- dtypes and bad input ------------------------------------------------------------------


@pytest.mark.parametrize("impl", list(IMPLS))
def test_float32_in_float32_out(impl):
    m = IMPLS[impl]
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 3, 8)).astype(np.float32)
    w = [weight(rng, 8, 12, np.float32), weight(rng, 8, 12, np.float32)]
    w.append(weight(rng, 12, 8, np.float32))
    outputs = {
        "gelu": m.gelu(x),
        "glu_ffn": m.glu_ffn(x, *w),
        "geglu_ffn": m.geglu_ffn(x, *w, approximate="tanh"),
        "softmax": m.softmax(x, temperature=2.0),
        "rope": m.rope(x, np.arange(3), scaling="ntk", factor=2.0),
        "attention_entropy": m.attention_entropy(m.softmax(x)),
        "learned_positions": m.learned_positions(np.arange(2), x[0]),
    }
    for name, out in outputs.items():
        assert out.dtype == np.float32, name
    assert_close(outputs["gelu"], reference.gelu(x.astype(np.float64)), ATOL32, "gelu f32")


BAD = [
    ("softmax", (np.ones(3),), {"temperature": 0.0}, "temperature"),
    ("softmax", (np.ones(3),), {"temperature": -1.0}, "temperature"),
    ("rope", (np.ones((3, 4)), np.arange(3)), {"scaling": "yarn"}, "scaling"),
    ("rope", (np.ones((3, 4)), np.arange(3)), {"scaling": "linear", "factor": 0.5}, "factor"),
    ("rope", (np.ones((2, 3, 4)), np.zeros((3, 3), dtype=int)), {}, "positions"),
    ("alibi_slopes", (0,), {}, "n_heads"),
    ("learned_positions", (np.array([0, 4]), np.ones((4, 2))), {}, "positions"),
    ("learned_positions", (np.array([-1]), np.ones((4, 2))), {}, "positions"),
    ("gelu", (np.ones(3),), {"approximate": "fast"}, "approximate"),
    (
        "geglu_ffn",
        (np.ones((1, 2)), np.ones((2, 3)), np.ones((2, 3)), np.ones((3, 2))),
        {"approximate": "erf"},
        "approximate",
    ),
    ("attention_entropy", (np.array([0.5, -0.1, 0.6]),), {}, "weights"),
    ("attention_entropy", (np.ones((2, 2)),), {"axis": 2}, "axis"),
]


@pytest.mark.parametrize("impl", list(IMPLS))
@pytest.mark.parametrize(("fn", "args", "kwargs", "arg"), BAD, ids=[f"{b[0]}-{b[3]}" for b in BAD])
def test_bad_input_names_the_argument(impl, fn, args, kwargs, arg):
    with pytest.raises((ValueError, TypeError), match=arg):
        getattr(IMPLS[impl], fn)(*args, **kwargs)


@pytest.mark.parametrize("impl", list(IMPLS))
def test_decoder_bad_input(impl):
    m = IMPLS[impl]
    params = _decoder_params(np.random.default_rng(12))
    ids = np.zeros((1, 4), dtype=int)
    with pytest.raises(ValueError, match="params"):
        m.decoder_forward(ids, params, 4, 2, positional="learned")  # no pos_embed
    with pytest.raises(ValueError, match="token_ids"):
        m.decoder_forward(ids, {**params, "pos_embed": np.ones((3, 8))}, 4, 2, positional="learned")
    with pytest.raises(ValueError, match="lm_head"):
        m.decoder_forward(ids, {**params, "lm_head": np.ones((11, 8))}, 4, 2)  # transposed
    with pytest.raises(ValueError, match="positional"):
        m.decoder_forward(ids, params, 4, 2, positional="xpos")
