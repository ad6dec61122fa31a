"""The fault catalogue: named, documented ways to break a correct clean room.

Each fault is a small transformation of the project's clean room: source
appended to one of its modules. Appending a `def` rebinds the function before
any other module imports it, so the fault flows through every composition
that uses the function, as a learner's bug would (a reversed mask breaks
`multi_head_attention`, the block and the model too).

The catalogue proves labctl's checks: every fault must be caught by at least
one check (`labctl faults` prints the matrix), and verify's diagnosis names a
learner's failure after the fault it matches. `signal` names the check each
fault is there to prove (`labctl.verify.checks`); the matrix shows every
check that catches it. The first six faults are the course's own table (第8章
故障注入与预期信号; its residual row as two faults), then a wrong GQA order and a
decode RoPE offset; the rest give every contract function a fault and every
check one that proves it (stability, purity, dtype, the import policy, a
hang, the signature, an argument check).

The faults are written in catalogue order in `course` (the course's table,
the GQA order and the decode RoPE offset), `attention` (softmax, the masks,
attention and merge_heads), `block` (RoPE, the sinusoidal table, the norms,
the feed-forwards and the composed functions) and `learner` (the bugs learners
write: the scale, the softmax axis, a finite mask fill, float64 masks and
caches, eps, an online softmax on a blocked row, ragged blocks, float32 RoPE
tables, a forgotten repeat_kv), `common` (issue 38's: a mask filled with 0 or
multiplied in, rms_norm without eps or over the wrong mean, LayerNorm over sigma + 1e-6,
a cache appended on the head axis, RoPE tables in float64, a causal mask of the wrong polarity,
blocking the diagonal or a key late) and `formulas` (bugs once told only "values differ": RoPE's
frequencies with the exponent i/D, RoPE on k alone or q alone in multi-head attention and on k
alone in decode, an online softmax that rescales its output but not its running sum or the
other way round, scores multiplied by sqrt(d_k), `scale or 1/sqrt(D)` taking scale=0.0 for None in
scaled_dot_product_attention and in tiled_attention; stop 58's RMSNorm times (1 + weight) and
RoPE on q alone in decode); `Fault` is in `base`, and the clean room's functions that faults
are written from, with a place for their bug, in `sources`. Each description says what is wrong
and what to change, in the learner's terms. Contract v2's faults are in `v2` and `labs_v2`, and
after them `v2_named` (v2's bugs once told only "values differ" or a fixture's note).
"""

from __future__ import annotations

from labctl.faults.attention import ATTENTION
from labctl.faults.base import Fault, project_clean_room
from labctl.faults.block import BLOCK
from labctl.faults.common import COMMON
from labctl.faults.course import COURSE
from labctl.faults.formulas import FORMULAS
from labctl.faults.learner import LEARNER

__all__ = ["CATALOGUE", "Fault", "for_contract", "get", "project_clean_room"]

CATALOGUE: tuple[Fault, ...] = (
    *COURSE,
    # ---- beyond the course table: one or more faults for every contract function, and a
    # ---- fault for every check (stability, purity, dtype, import policy, hang, signature)
    *ATTENTION,
    *BLOCK,
    # ---- the bugs learners write, each with what to change
    *LEARNER,
    *COMMON,
    *FORMULAS,
)


def for_contract(version: int) -> tuple[Fault, ...]:
    """The faults a room checked against contract `version` is compared with: v1's, and
    from v2 on those of the functions and parameters v2 adds."""
    if version < 2:
        return CATALOGUE
    from labctl.faults.labs_v2 import LABS_V2
    from labctl.faults.v2 import V2
    from labctl.faults.v2_named import V2_NAMED

    return tuple({f.name: f for f in (*CATALOGUE, *V2, *LABS_V2, *V2_NAMED)}.values())


def get(name: str) -> Fault:
    for fault in CATALOGUE:
        if fault.name == name:
            return fault
    raise KeyError(name)
