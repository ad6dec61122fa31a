"""The project's own clean room: contract v1 (`transformer-block-v1`) in NumPy only.

Every contract function is re-exported here; `labctl verify clean-room`
checks this package like any learner's.
"""

from .attention import scaled_dot_product_attention, tiled_attention
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
    "attention_decode",
    "causal_mask",
    "decoder_forward",
    "layer_norm",
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
