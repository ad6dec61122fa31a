"""Published model configurations: the numbers behind the chapters' figures of memory,
bandwidth and time.

Where a chapter's number follows from a named model (Llama 2 70B's KV cache) or from the
geometry of one it describes (32 layers with a 4096-token window: Mistral 7B), the
`worked-examples` lab recomputes it from the configuration as published, cited by where
it is published (`source`).
"""

from __future__ import annotations

from dataclasses import dataclass

from labctl.i18n import N_

FP16_BYTES = 2
# One 400 Gb/s RDMA port (InfiniBand NDR; NVIDIA ConnectX-7's fastest port), in bytes/s.
RDMA_PORT_BYTES_PER_S = 400e9 / 8
SWA_CHAPTER_PROMPT = 32 * 1024  # 第8章 阶段五: "从 4K 暴增到 32K、128K 乃至 1M"


@dataclass(frozen=True)
class ModelConfig:
    name: str
    source: str  # where the numbers are published
    layers: int
    d_model: int
    heads: int
    kv_heads: int
    ffn: int
    window: int | None = None

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads

    def kv_cache_bytes(self, tokens: int, dtype_bytes: int = FP16_BYTES) -> int:
        """K and V of every layer for `tokens` tokens: 2 x tokens x Hkv x d_k x bytes x layers."""
        return 2 * tokens * self.kv_heads * self.head_dim * dtype_bytes * self.layers


LLAMA2_7B = ModelConfig(
    "Llama 2 7B", N_("meta-llama/Llama-2-7b-hf config.json; Touvron et al. 2023, Table 1"),
    layers=32, d_model=4096, heads=32, kv_heads=32, ffn=11008,
)  # fmt: skip
LLAMA2_70B = ModelConfig(
    "Llama 2 70B", N_("meta-llama/Llama-2-70b-hf config.json; Touvron et al. 2023, Table 1 (GQA at 34B, 70B)"),
    layers=80, d_model=8192, heads=64, kv_heads=8, ffn=28672,
)  # fmt: skip
LLAMA3_8B = ModelConfig(
    "Llama 3 8B", "meta-llama/Meta-Llama-3-8B config.json",
    layers=32, d_model=4096, heads=32, kv_heads=8, ffn=14336,
)  # fmt: skip
MISTRAL_7B = ModelConfig(
    "Mistral 7B", N_("Jiang et al. 2023 (arXiv:2310.06825), Table 1; mistralai/Mistral-7B-v0.1 config.json"),
    layers=32, d_model=4096, heads=32, kv_heads=8, ffn=14336, window=4096,
)  # fmt: skip
TRANSFORMER_BASE = ModelConfig(
    "Transformer (base)", N_("Vaswani et al. 2017, Table 3, the base model"),
    layers=6, d_model=512, heads=8, kv_heads=8, ffn=2048,
)  # fmt: skip
CONFIGS = (LLAMA2_7B, LLAMA2_70B, LLAMA3_8B, MISTRAL_7B, TRANSFORMER_BASE)
