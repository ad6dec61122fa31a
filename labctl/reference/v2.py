"""The PyTorch reference for contract v2 (`transformer-block-v2`), NumPy in and NumPy out.

v2 is v1 plus new keyword parameters (last, defaulting to v1's behaviour) and
seven new functions: the v1 functions v2 leaves alone are v1's reference.
Importing this module imports torch.
"""

from labctl.reference.attention import scaled_dot_product_attention, tiled_attention
from labctl.reference.primitives import (
    causal_mask,
    layer_norm,
    merge_heads,
    padding_mask,
    relu_ffn,
    repeat_kv,
    rms_norm,
    sinusoidal_positions,
    sliding_window_mask,
    split_heads,
    swiglu_ffn,
)
from labctl.reference.transformer_block import transformer_block
from labctl.reference.v2_block import attention_decode, decoder_forward, multi_head_attention
from labctl.reference.v2_primitives import (
    alibi_bias,
    alibi_slopes,
    attention_entropy,
    geglu_ffn,
    gelu,
    glu_ffn,
    learned_positions,
    rope,
    softmax,
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
