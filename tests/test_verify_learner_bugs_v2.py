"""Fixtures v6: bugs a learner writes against contract v2 (and `scale or 1/sqrt(D)`) that
passed every check of fixtures v5, each now failed at its function on the fixture added for
it. Each room is labctl's own v2 room with one function rebound to the learner's bug."""

from __future__ import annotations

import textwrap

import pytest
from test_verify_v2 import v2_room

from labctl.verify.checks import evaluate
from labctl.verify.observe import observe
from labctl.verify.verify import verify_clean_room

TMAX_BUG = """
        _correct_decoder = decoder_forward

        def decoder_forward(token_ids, params, n_heads, n_kv_heads=None, eps=1e-6,
                            positional="sinusoidal", rope_theta=10000.0, window=None):
            if positional == "learned" and "pos_embed" in params:
                if np.shape(token_ids)[-1] >= len(params["pos_embed"]):
                    raise ValueError("token_ids: T must be shorter than pos_embed's Tmax")
            return _correct_decoder(token_ids, params, n_heads, n_kv_heads, eps, positional,
                                    rope_theta, window)
        """

# (bug, module, source appended to it, function, check, fixture added for it)
BUGS = [
    (
        "scale-or-default",
        "attention",
        """
        _correct_sdpa = scaled_dot_product_attention

        def scaled_dot_product_attention(q, k, v, mask=None, scale=None):
            return _correct_sdpa(q, k, v, mask, scale or 1.0 / math.sqrt(np.shape(q)[-1]))
        """,
        "scaled_dot_product_attention",
        "parity",
        "scale-zero",
    ),
    (
        "tiled-scale-or-default",
        "attention",
        """
        _correct_tiled = tiled_attention

        def tiled_attention(q, k, v, block_size, causal=True, scale=None):
            scale = scale or 1.0 / math.sqrt(np.shape(q)[-1])
            return _correct_tiled(q, k, v, block_size, causal, scale)
        """,
        "tiled_attention",
        "parity",
        "scale-zero",
    ),
    (
        "rope-factor-without-scaling",
        "primitives",
        """
        _correct_rope = rope

        def rope(x, positions, theta=10000.0, scaling=None, factor=1.0):
            return _correct_rope(x, positions, theta, scaling or "linear", factor)
        """,
        "rope",
        "parity",
        "v2-factor-without-scaling",
    ),
    (
        "rope-batched-needs-heads",
        "primitives",
        """
        _correct_rope = rope

        def rope(x, positions, theta=10000.0, scaling=None, factor=1.0):
            if np.ndim(positions) == 2 and np.ndim(x) != 4:
                raise ValueError("x: batched positions need x of shape (B, H, T, D)")
            return _correct_rope(x, positions, theta, scaling, factor)
        """,
        "rope",
        "runs",
        "v2-batched-positions-3-d",
    ),
    (
        "mha-1-d-positions-ignored",
        "transformer_block",
        """
        _correct_mha = multi_head_attention

        def multi_head_attention(x, wq, wk, wv, wo, n_heads, n_kv_heads=None, causal=True,
                                 window=None, rope_theta=None, positions=None):
            if positions is not None and np.ndim(positions) == 1 and len(positions) == x.shape[1]:
                positions = None
            return _correct_mha(x, wq, wk, wv, wo, n_heads, n_kv_heads, causal, window,
                                rope_theta, positions)
        """,
        "multi_head_attention",
        "parity",
        "v2-positions-1-d",
    ),
    (
        "decode-1-d-positions-ignored",
        "transformer_block",
        """
        _correct_decode = attention_decode

        def attention_decode(x_new, past_k, past_v, wq, wk, wv, wo, n_heads, n_kv_heads=None,
                             window=None, rope_theta=None, positions=None):
            if positions is not None and np.ndim(positions) == 1 and len(positions) == x_new.shape[1]:
                positions = None
            return _correct_decode(x_new, past_k, past_v, wq, wk, wv, wo, n_heads, n_kv_heads,
                                   window, rope_theta, positions)
        """,
        "attention_decode",
        "parity",
        "v2-positions-1-d",
    ),
    (
        "learned-refuses-t=tmax",
        "transformer_block",
        TMAX_BUG,
        "decoder_forward",
        "runs",
        "v2-learned-t=tmax",
    ),
    (
        "alibi-drops-window",
        "transformer_block",
        """
        _correct_decoder = decoder_forward

        def decoder_forward(token_ids, params, n_heads, n_kv_heads=None, eps=1e-6,
                            positional="sinusoidal", rope_theta=10000.0, window=None):
            if positional == "alibi":
                window = None
            return _correct_decoder(token_ids, params, n_heads, n_kv_heads, eps, positional,
                                    rope_theta, window)
        """,
        "decoder_forward",
        "parity",
        "v2-alibi-window",
    ),
    (
        "entropy-renormalises",
        "attention",
        """
        _correct_entropy = attention_entropy

        def attention_entropy(weights, axis=-1):
            w = np.asarray(weights)
            total = w.sum(axis=axis, keepdims=True)
            w = np.divide(w, total, out=np.zeros_like(w), where=total > 0)
            return _correct_entropy(w, axis)
        """,
        "attention_entropy",
        "parity",
        "rows-not-summing-to-1",
    ),
]


def _room(tmp_path, module: str, source: str):
    room = v2_room(tmp_path)
    with (room / f"{module}.py").open("a", encoding="utf-8") as handle:
        handle.write("\n\nimport math\n" + textwrap.dedent(source))
    return room.resolve()


@pytest.mark.parametrize(
    ("module", "source", "function", "check", "fixture"),
    [bug[1:] for bug in BUGS],
    ids=[bug[0] for bug in BUGS],
)
def test_a_learner_bug_that_passed_fixtures_v5_fails_at_its_function(
    tmp_path, module, source, function, check, fixture
):
    seen = observe(_room(tmp_path, module, source), 5.0, 4096, functions=(function,), seed=11)
    assert seen.contract == 2
    failed = {c.name: c for c in evaluate(seen, (function,)) if c.failed}
    assert check in failed, failed
    # Failed on the fixture added for it (or its float32 probe): v5 had no call that saw it.
    assert failed[check].message.startswith(f"fixture {fixture}"), failed[check].message


def test_a_raise_only_where_t_equals_tmax_is_not_told_to_call_repeat_kv(tmp_path):
    """The fixture T = Tmax has Hkv < H; the decoder's other GQA calls return. The diagnosis
    said "it fails wherever Hkv < H ... call repeat_kv" of a raise that is not GQA's; it names
    the catalogued fault now (stop 58)."""
    room = _room(tmp_path, "transformer_block", TMAX_BUG)
    report = verify_clean_room(room, 5.0, out=None, measure=False, seed=11)
    (said,) = [d for d in report.diagnosis if d.function == "decoder_forward"]
    assert "Hkv < H" not in str(said.message)
    assert "matches fault `decoder-refuses-t-equal-tmax`" in str(said.message)
