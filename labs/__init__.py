"""The labs: one module per lab, each defining `LAB` (see `labctl.lab`).

`labctl.registry.discover` finds them; `ORDER` is the order a course reader
meets them (逐部件讲透 §6.13, 第8章 阶段二 to 阶段四, 手撕 §05 to §07), with
第8章 阶段四's induction heads last: the one lab that trains a model to read its circuits.
"""

ORDER = (
    "causal-attention",
    "scale-ablation",
    "mask-ablation",
    "residual-ablation",
    "gqa",
    "kv-cache",
    "precision",
    "embedding-lookup",
    "positions",
    "learned-positions",
    "temperature",
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
    "decoder-options",
    "attention-inspect",
    "entropy",
    "induction-heads",
)
