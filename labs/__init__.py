"""The labs: one module per lab, each defining `LAB` (see `labctl.lab`).

`labctl.registry.discover` finds them; `ORDER` is the order a course reader
meets them (逐部件讲透 §6.13, 第8章 阶段二 to 阶段四, 手撕 §05 to §07).
"""

ORDER = (
    "causal-attention",
    "scale-ablation",
    "mask-ablation",
    "residual-ablation",
    "gqa",
    "kv-cache",
    "positions",
    "alibi",
    "rope-scaling",
    "norms-ffn",
    "ffn-variants",
    "multi-head",
    "worked-examples",
    "tiled-attention",
    "sliding-window",
    "decoder",
    "handson-decoder",
    "attention-inspect",
)
