"""The chapters' claims of memory, bandwidth and time that follow from a published model
configuration (`worked_examples_models`), as rows of the `worked-examples` lab.

These are the claims no row of `worked_examples_rows` recomputed; the rows there that use
a configuration take their numbers from `worked_examples_models` too.
"""

from __future__ import annotations

import numpy as np

from labctl.course import CH8, HANDS_ON, Section
from labctl.i18n import N_
from labctl.labs.worked_examples_models import (
    LLAMA2_70B,
    LLAMA3_8B,
    MISTRAL_7B,
    RDMA_PORT_BYTES_PER_S,
    SWA_CHAPTER_PROMPT,
)
from labctl.labs.worked_examples_rows import Row

_SWA = Section(CH8, "阶段五", "现代长上下文变体深探——滑动窗口注意力（SWA）与推理 Infra 的颠覆")
_WINDOW_KV = MISTRAL_7B.kv_cache_bytes(MISTRAL_7B.window or 0)

CONFIG_ROWS: tuple[Row, ...] = (
    Row(
        Section(HANDS_ON, "§5.5.2", "三种注意力变体对比"),
        N_("KV cache shrink of GQA in the Llama models that use it: Llama 2 70B (64 query heads, "
           "8 K/V) and Llama 3 8B (32, 8); the chapter: 32 query heads in 8 groups, 4x, "
           "'Llama 2/3 采用此方案'"),
        "4x, 4x",
        (4, 4),
        0.0,
        N_("exact"),
        lambda: np.array([LLAMA2_70B.heads / LLAMA2_70B.kv_heads,
                          LLAMA3_8B.heads / LLAMA3_8B.kv_heads]),
        reason=N_("Llama 2 uses GQA only at 70B, with 64 query heads over 8 K/V heads: 8x (7B and "
                  "13B keep 32 K/V heads: no GQA); 32 query heads in 8 groups is Llama 3 8B's"),
        config=f"{LLAMA2_70B.name}; {LLAMA3_8B.name}",
        fmt="{:.0f}",
    ),
    Row(
        _SWA,
        N_("KV cache of the last W = 4096 tokens a prefill worker sends (Mistral 7B, fp16: "
           "2 x 4096 x 8 x 128 x 2 B x 32 layers), in MB; the chapter: 数十兆字节以内"),
        "数十兆字节以内",
        (50e6 / 1e6,),
        50e6 / 1e6,
        N_("数十兆字节: under 100 MB"),
        lambda: np.array([_WINDOW_KV / 1e6]),
        reason=N_("2 x 4096 x 8 x 128 x 2 B x 32 = 536,870,912 B = 537 MB per request: the window "
                  "caps the transfer, at about five times 'tens of MB'"),
        config=MISTRAL_7B.name,
        fmt="{:,.0f}",
    ),
    Row(
        _SWA,
        N_("time to send that window's KV over one 400 Gb/s RDMA port (InfiniBand NDR), in "
           "microseconds; the chapter: 传输耗时稳定在微秒级"),
        "微秒级",
        (500.0,),
        500.0,
        N_("微秒级: under 1 ms"),
        lambda: np.array([_WINDOW_KV / RDMA_PORT_BYTES_PER_S * 1e6]),
        reason=N_("537 MB at 50 GB/s takes 10.7 ms, milliseconds, and 1.3 ms over eight ports at "
                  "once; even the 'tens of MB' the chapter supposes take 0.2 to 2 ms"),
        config=MISTRAL_7B.name,
        fmt="{:,.0f}",
    ),
    Row(
        _SWA,
        N_("KV cache of a 32K-token prompt without the window (Mistral 7B's geometry, fp16), in "
           "GB; the chapter: 超长 Prompt 会导致网络上传输数 GB 的 KV 数据"),
        "数 GB",
        (5.5,),
        3.5,
        N_("数 GB: 2 to 9 GB"),
        lambda: np.array([MISTRAL_7B.kv_cache_bytes(SWA_CHAPTER_PROMPT) / 1e9]),
        config=MISTRAL_7B.name,
        fmt="{:.2f}",
    ),
)  # fmt: skip
