"""The project's own clean room: contract v2 (`transformer-block-v2`) in NumPy only.

v2 holds every function of contract v1 with the same meaning, so this room
serves v1's checks too. Every contract function is re-exported here;
`labctl verify clean-room` checks this package like any learner's.

It declares no CONTRACT, so it is verified against v1 unless asked for v2
(`--contract 2`): the fault catalogue's v1 faults and every copy of this room
with a v1 function appended keep v1's verdicts. A v2 fault declares v2 in its
copy (`labctl.faults.v2`).
"""

from .attention import attention_entropy, scaled_dot_product_attention, tiled_attention
from .ffn import geglu_ffn, gelu, glu_ffn
from .positions import alibi_bias, alibi_slopes, learned_positions
from .primitives import (
    causal_mask,
    layer_norm,
    merge_heads,
    padding_mask,
    relu_ffn,
    repeat_kv,
    rms_norm,
    rope,
    sinusoidal_positions,
    sliding_window_mask,
    softmax,
    split_heads,
    swiglu_ffn,
)
from .transformer_block import (
    attention_decode,
    decoder_forward,
    multi_head_attention,
    transformer_block,
)

__all__ = [
    "alibi_bias",
    "alibi_slopes",
    "attention_decode",
    "attention_entropy",
    "causal_mask",
    "decoder_forward",
    "geglu_ffn",
    "gelu",
    "glu_ffn",
    "layer_norm",
    "learned_positions",
    "merge_heads",
    "multi_head_attention",
    "padding_mask",
    "relu_ffn",
    "repeat_kv",
    "rms_norm",
    "rope",
    "scaled_dot_product_attention",
    "sinusoidal_positions",
    "sliding_window_mask",
    "softmax",
    "split_heads",
    "swiglu_ffn",
    "tiled_attention",
    "transformer_block",
]
