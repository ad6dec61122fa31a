"""Course modules a learner submits evidence for, and the metrics each requires.

The learner template of 《第8章 · Attention 与 Transformer Block》 阶段六 (学习者提交模板) is module `07-attention-transformer`
with five metrics; their tolerances are the v1 table's, from the labs that
measure them (`labctl.registry.metric_table`).
"""

from __future__ import annotations

from dataclasses import dataclass

from labctl.course import CH8, Section


@dataclass(frozen=True)
class Module:
    id: str
    title: str
    section: str
    required: tuple[str, ...]


MODULES: tuple[Module, ...] = (
    Module(
        id="07-attention-transformer",
        title="Attention and the Transformer block",
        section=str(Section(CH8, "阶段六", "学习者提交模板")),
        required=(
            "future_token_invariance",
            "reference_output_max_error",
            "no_mask_future_prefix_influence",
            "scale_ablation_max_weight_delta",
            "residual_ablation_max_output_delta",
        ),
    ),
)
DEFAULT_MODULE = MODULES[0].id
