"""The PyTorch reference for contract v2 (`transformer-block-v2`), NumPy in and NumPy out.

v2 is v1 plus new keyword parameters (last, defaulting to v1's behaviour) and seven new
functions. This module holds what v2 changes; every other function of the contract is v1's
reference (`labctl.reference`), found there when asked for here. Importing this module
imports torch.
"""

from labctl import reference as v1
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

# What v2 adds to or widens in v1.
__all__ = [
    "alibi_bias",
    "alibi_slopes",
    "attention_decode",
    "attention_entropy",
    "decoder_forward",
    "geglu_ffn",
    "gelu",
    "glu_ffn",
    "learned_positions",
    "multi_head_attention",
    "rope",
    "softmax",
]


def __getattr__(name: str):
    """A function v2 leaves as v1 wrote it: v1's reference."""
    if name in v1.__all__:
        return getattr(v1, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
