"""Bad input: both implementations refuse what contract v1's "Bad input" section names.

Each case is a call that does not fit the contract's shapes; both the
PyTorch reference and the NumPy clean room must raise ValueError (or
TypeError) with a message that names the offending argument.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

import labctl.reference as reference
from labctl import clean_room

IMPLS = {"reference": reference, "clean_room": clean_room}

RNG = np.random.default_rng(0)
B, T, C, H, Hkv, D, F_ = 2, 5, 16, 4, 2, 4, 12


def arr(*shape):
    return RNG.standard_normal(shape)


def attn_w(c=C, h=H, hkv=Hkv):
    d = c // h
    s = 1 / math.sqrt(c)
    return arr(c, h * d) * s, arr(c, hkv * d) * s, arr(c, hkv * d) * s, arr(h * d, c) * s


def block_params(c=C, h=H, hkv=Hkv):
    wq, wk, wv, wo = attn_w(c, h, hkv)
    return {
        "norm1": np.ones(c),
        "wq": wq,
        "wk": wk,
        "wv": wv,
        "wo": wo,
        "norm2": np.ones(c),
        "w_gate": arr(c, F_),
        "w_up": arr(c, F_),
        "w_down": arr(F_, c),
    }


def decoder_params(c=C, h=H):
    return {"embed": arr(11, c), "blocks": [block_params(c, h, h)], "final_norm": np.ones(c)}


X = arr(B, T, C)
Q = arr(B, H, T, D)
K = arr(B, Hkv, T, D)
V = arr(B, Hkv, T, D)
W = attn_w()
X_ODD_D = arr(B, T, 12)  # C=12 with H=4 heads: D=3, odd
W_ODD_D = attn_w(12, 4, 4)
IDS = np.array([[1, 2, 3], [4, 5, 6]])


def without(params, key):
    return {k: v for k, v in params.items() if k != key}


# (id, call, names the message may use for the offending argument)
CASES = [
    # --- C % n_heads != 0
    ("split_heads C%H", lambda m: m.split_heads(arr(2, 3, 10), 4), ("n_heads",)),
    ("mha C%H", lambda m: m.multi_head_attention(arr(B, T, 10), *W, 4), ("n_heads",)),
    (
        "decode C%H",
        lambda m: m.attention_decode(arr(B, 1, 10), None, None, *W, 4),
        ("n_heads",),
    ),
    (
        "block C%H",
        lambda m: m.transformer_block(arr(B, T, 10), block_params(10, 5, 5), 4),
        ("n_heads",),
    ),
    ("decoder C%H", lambda m: m.decoder_forward(IDS, decoder_params(), 3), ("n_heads",)),
    # --- n_heads % n_kv_heads != 0
    ("mha H%Hkv", lambda m: m.multi_head_attention(X, *W, H, 3), ("n_kv_heads",)),
    (
        "decode H%Hkv",
        lambda m: m.attention_decode(X[:, :1], None, None, *W, H, 3),
        ("n_kv_heads",),
    ),
    ("block H%Hkv", lambda m: m.transformer_block(X, block_params(), H, 3), ("n_kv_heads",)),
    ("decoder H%Hkv", lambda m: m.decoder_forward(IDS, decoder_params(), H, 3), ("n_kv_heads",)),
    (
        "sdpa H%Hkv",
        lambda m: m.scaled_dot_product_attention(Q, arr(B, 3, T, D), arr(B, 3, T, D)),
        ("k",),
    ),
    ("tiled H%Hkv", lambda m: m.tiled_attention(Q, arr(B, 3, T, D), arr(B, 3, T, D), 2), ("k",)),
    # --- odd D for RoPE
    ("rope odd D", lambda m: m.rope(arr(T, 5), np.arange(T)), ("x", "D")),
    (
        "mha rope odd D",
        lambda m: m.multi_head_attention(X_ODD_D, *W_ODD_D, 4, rope_theta=10000.0),
        ("n_heads", "rope_theta"),
    ),
    (
        "decode rope odd D",
        lambda m: m.attention_decode(X_ODD_D[:, :2], None, None, *W_ODD_D, 4, rope_theta=1e4),
        ("n_heads", "rope_theta"),
    ),
    (
        "block rope odd D",
        lambda m: m.transformer_block(X_ODD_D, block_params(12, 4, 4), 4, rope_theta=10000.0),
        ("n_heads", "rope_theta"),
    ),
    (
        "decoder rope odd D",
        lambda m: m.decoder_forward(IDS, decoder_params(12, 4), 4, positional="rope"),
        ("n_heads", "rope_theta", "positional"),
    ),
    # --- block_size < 1
    ("tiled block 0", lambda m: m.tiled_attention(Q, K, V, 0), ("block_size",)),
    ("tiled block -3", lambda m: m.tiled_attention(Q, K, V, -3, causal=False), ("block_size",)),
    # --- window < 1
    ("window mask 0", lambda m: m.sliding_window_mask(4, 0), ("window",)),
    ("window mask -2", lambda m: m.sliding_window_mask(4, -2, 6), ("window",)),
    ("mha window 0", lambda m: m.multi_head_attention(X, *W, H, Hkv, window=0), ("window",)),
    (
        "decode window 0",
        lambda m: m.attention_decode(X[:, :2], None, None, *W, H, Hkv, window=0),
        ("window",),
    ),
    (
        "block window 0",
        lambda m: m.transformer_block(X, block_params(), H, Hkv, window=0),
        ("window",),
    ),
    # --- mismatched batch or head widths: sdpa q/k/v
    ("sdpa k batch", lambda m: m.scaled_dot_product_attention(Q, arr(3, Hkv, T, D), V), ("k",)),
    ("sdpa v batch", lambda m: m.scaled_dot_product_attention(Q, K, arr(1, Hkv, T, D)), ("k", "v")),
    ("sdpa k width", lambda m: m.scaled_dot_product_attention(Q, arr(B, Hkv, T, 3), V), ("k",)),
    (
        "sdpa v length",
        lambda m: m.scaled_dot_product_attention(Q, K, arr(B, Hkv, T + 1, D)),
        ("v",),
    ),
    ("sdpa v heads", lambda m: m.scaled_dot_product_attention(Q, K, arr(B, 1, T, D)), ("v",)),
    ("sdpa q ndim", lambda m: m.scaled_dot_product_attention(Q[0], K, V), ("q",)),
    (
        "sdpa mask shape",
        lambda m: m.scaled_dot_product_attention(Q, K, V, np.zeros((3, 3), dtype=bool)),
        ("mask",),
    ),
    (
        "sdpa mask dtype",
        lambda m: m.scaled_dot_product_attention(Q, K, V, np.zeros((T, T))),
        ("mask",),
    ),
    ("tiled k batch", lambda m: m.tiled_attention(Q, arr(3, Hkv, T, D), V, 2), ("k",)),
    # --- attention_decode past_k / past_v
    (
        "decode past_k batch",
        lambda m: m.attention_decode(X[:, :1], arr(3, Hkv, 4, D), arr(3, Hkv, 4, D), *W, H, Hkv),
        ("past_k",),
    ),
    (
        "decode past_k heads",
        lambda m: m.attention_decode(X[:, :1], arr(B, H, 4, D), arr(B, H, 4, D), *W, H, Hkv),
        ("past_k",),
    ),
    (
        "decode past_k width",
        lambda m: m.attention_decode(X[:, :1], arr(B, Hkv, 4, 3), arr(B, Hkv, 4, 3), *W, H, Hkv),
        ("past_k",),
    ),
    (
        "decode past_v shape",
        lambda m: m.attention_decode(X[:, :1], arr(B, Hkv, 4, D), arr(B, Hkv, 3, D), *W, H, Hkv),
        ("past_v",),
    ),
    (
        "decode past_v None",
        lambda m: m.attention_decode(X[:, :1], arr(B, Hkv, 4, D), None, *W, H, Hkv),
        ("past_v", "past_k"),
    ),
    # --- projection weights
    (
        "mha wq shape",
        lambda m: m.multi_head_attention(X, arr(C, C + 1), *W[1:], H, Hkv),
        ("wq",),
    ),
    (
        "mha wk shape",
        lambda m: m.multi_head_attention(X, W[0], arr(C, C), *W[2:], H, Hkv),
        ("wk",),
    ),
    (
        "mha wo shape",
        lambda m: m.multi_head_attention(X, *W[:3], arr(C, C - 1), H, Hkv),
        ("wo",),
    ),
    # --- positions length mismatch
    ("rope positions short", lambda m: m.rope(arr(T, 4), np.arange(T - 1)), ("positions",)),
    (
        # (B, T) positions are v2's batched form (labctl's own room is v2): a batch of 3 for 2.
        "rope positions 2d",
        lambda m: m.rope(arr(2, T, 4), np.zeros((3, T), dtype=int)),
        ("positions",),
    ),
    # --- weight shape mismatch in norms and feed-forward
    ("rms_norm weight", lambda m: m.rms_norm(X, np.ones(C - 1)), ("weight",)),
    ("rms_norm weight 2d", lambda m: m.rms_norm(X, np.ones((1, C))), ("weight",)),
    ("layer_norm weight", lambda m: m.layer_norm(X, np.ones(C + 1), np.zeros(C)), ("weight",)),
    ("layer_norm bias", lambda m: m.layer_norm(X, np.ones(C), np.zeros(3)), ("bias",)),
    (
        "relu_ffn w1",
        lambda m: m.relu_ffn(X, arr(C + 1, F_), np.zeros(F_), arr(F_, C), np.zeros(C)),
        ("w1",),
    ),
    (
        "relu_ffn b1",
        lambda m: m.relu_ffn(X, arr(C, F_), np.zeros(F_ + 2), arr(F_, C), np.zeros(C)),
        ("b1",),
    ),
    (
        "relu_ffn w2",
        lambda m: m.relu_ffn(X, arr(C, F_), np.zeros(F_), arr(F_ - 1, C), np.zeros(C)),
        ("w2",),
    ),
    (
        "relu_ffn b2",
        lambda m: m.relu_ffn(X, arr(C, F_), np.zeros(F_), arr(F_, C), np.zeros(C + 1)),
        ("b2",),
    ),
    (
        "swiglu w_gate",
        lambda m: m.swiglu_ffn(X, arr(C - 1, F_), arr(C, F_), arr(F_, C)),
        ("w_gate",),
    ),
    ("swiglu w_up", lambda m: m.swiglu_ffn(X, arr(C, F_), arr(C, F_ + 1), arr(F_, C)), ("w_up",)),
    (
        "swiglu w_down",
        lambda m: m.swiglu_ffn(X, arr(C, F_), arr(C, F_), arr(F_ + 1, C)),
        ("w_down",),
    ),
    # --- missing params keys
    (
        "block missing w_gate",
        lambda m: m.transformer_block(X, without(block_params(), "w_gate"), H, Hkv),
        ("params",),
    ),
    (
        "block missing norm1",
        lambda m: m.transformer_block(X, without(block_params(), "norm1"), H, Hkv),
        ("params",),
    ),
    ("block params not a mapping", lambda m: m.transformer_block(X, [1, 2], H, Hkv), ("params",)),
    (
        "decoder missing final_norm",
        lambda m: m.decoder_forward(IDS, without(decoder_params(), "final_norm"), H),
        ("params",),
    ),
    (
        "decoder missing embed",
        lambda m: m.decoder_forward(IDS, without(decoder_params(), "embed"), H),
        ("params",),
    ),
    # --- bad positional string
    (
        "decoder positional learned",
        lambda m: m.decoder_forward(IDS, decoder_params(), H, positional="learned"),
        ("positional",),
    ),
    (
        "decoder positional case",
        lambda m: m.decoder_forward(IDS, decoder_params(), H, positional="RoPE"),
        ("positional",),
    ),
    # --- other argument checks of the table
    (
        "decoder ids out of range",
        lambda m: m.decoder_forward(IDS + 10, decoder_params(), H),
        ("token_ids",),
    ),
    (
        "decoder ids float",
        lambda m: m.decoder_forward(IDS * 1.0, decoder_params(), H),
        ("token_ids",),
    ),
    ("repeat_kv n_rep 0", lambda m: m.repeat_kv(K, 0), ("n_rep",)),
    ("split_heads n_heads 0", lambda m: m.split_heads(X, 0), ("n_heads",)),
    ("merge_heads 3d", lambda m: m.merge_heads(X), ("x",)),
    ("padding lengths 2d", lambda m: m.padding_mask(np.ones((2, 2), dtype=int), 4), ("lengths",)),
    ("padding lengths float", lambda m: m.padding_mask(np.array([1.5, 2.0]), 4), ("lengths",)),
    ("causal t_q negative", lambda m: m.causal_mask(-1), ("t_q",)),
    ("causal t_k float", lambda m: m.causal_mask(3, 2.5), ("t_k",)),
    ("sinusoidal d_model 0", lambda m: m.sinusoidal_positions(4, 0), ("d_model",)),
    ("softmax axis", lambda m: m.softmax(arr(3, 4), axis=2), ("axis",)),
    ("softmax strings", lambda m: m.softmax(np.array(["a", "b"])), ("x",)),
]


def _names(message: str, candidates: tuple[str, ...]) -> bool:
    return any(
        re.search(rf"(?<![A-Za-z0-9_]){re.escape(n)}(?![A-Za-z0-9_])", message) for n in candidates
    )


@pytest.mark.parametrize("impl_name", list(IMPLS))
@pytest.mark.parametrize(("call", "arg_names"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_refused_with_the_argument_named(impl_name, call, arg_names):
    with pytest.raises((ValueError, TypeError)) as caught:
        call(IMPLS[impl_name])
    message = str(caught.value)
    assert _names(message, arg_names), (
        f"{impl_name}: {type(caught.value).__name__}({message!r}) names none of {arg_names}"
    )


def test_missing_params_key_is_named():
    for impl in IMPLS.values():
        with pytest.raises(ValueError, match="w_gate"):
            impl.transformer_block(X, without(block_params(), "w_gate"), H, Hkv)


def test_case_ids_are_unique():
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids))


def test_good_versions_of_the_bad_calls_run():
    # The bad cases differ from working calls only in the named argument.
    for impl in IMPLS.values():
        assert impl.multi_head_attention(X, *W, H, Hkv, window=1, rope_theta=1e4).shape == X.shape
        out, k_all, _ = impl.attention_decode(X[:, :1], K, V, *W, H, Hkv)
        assert out.shape == (B, 1, C) and k_all.shape == (B, Hkv, T + 1, D)
        assert impl.tiled_attention(Q, K, V, 1).shape == Q.shape
        assert impl.transformer_block(X, block_params(), H, Hkv).shape == X.shape
        assert impl.decoder_forward(IDS, decoder_params(), H, positional="rope").shape == (2, 3, 11)
        assert impl.rope(arr(T, 4), np.arange(T)).shape == (T, 4)
