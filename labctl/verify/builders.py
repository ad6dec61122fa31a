"""The shared builders of verify's inputs: seeded arrays in contract v1's layouts, and `Fixture`.

`rng(seed, tag)` seeds a generator with the run's seed and the tag, so each
function's fixtures, bad inputs and causal variants draw from a stream of their
own. `SEED` is the published seed (the course's numbers); verify and grade draw
a fresh one per run (`fresh_seed`), so no table of answers computed in advance
can pass. `Sizes` gives the published sizes at the published seed and sizes
drawn within each fixture's structural class at any other.
Weights are `(in, out)` scaled by 1/sqrt(in), positions int64;
`block_params` and `decoder_params` hold the keys `transformer_block` and
`decoder_forward` read.
"""

from __future__ import annotations

import copy
import math
import os
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# The fixtures' version (`labctl.verify.fixtures`): it keys the reference cache, which sits
# below the fixtures, so it is kept here.
FIXTURES_VERSION = "v6"
SEED = 5  # the published seed: `labctl run`'s default, and the fixtures the course shows
# numpy's and torch's seeds are unsigned 32-bit; one range for verify, grade and the labs they run.
MAX_SEED = 2**32 - 1


def fresh_seed() -> int:
    """A seed no one knows in advance (the OS's randomness), in 0..MAX_SEED."""
    return int.from_bytes(os.urandom(4), "big")


@dataclass(eq=False)
class Fixture:
    """One call of one contract function: positional args and keyword args."""

    function: str
    name: str
    args: tuple
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    note: str = ""
    seed: int = SEED  # the seed it was drawn with: its reference output is kept under it
    contract: int = 1  # the contract version whose reference computes it (v2: reference.v2)

    def call(self) -> tuple[tuple, dict]:
        """Fresh copies of the arguments, so no caller ever shares an array with another."""
        return copy.deepcopy(self.args), copy.deepcopy(dict(self.kwargs))


def rng(seed: int, tag: str) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(tag.encode("utf-8"))])


class Sizes:
    """Sizes for one function's fixtures: the published ones at the published seed (so its
    fixtures stay the course's, bit for bit), drawn from a stream of their own at any other."""

    def __init__(self, seed: int, tag: str) -> None:
        self._r = None if seed == SEED else rng(seed, f"{tag}/sizes")

    @property
    def published(self) -> bool:
        return self._r is None

    def __call__(self, published: int, low: int, high: int) -> int:
        """`published`, or an integer drawn from low..high (both included)."""
        return published if self._r is None else int(self._r.integers(low, high + 1))

    def pick(self, published, choices: list):
        return published if self._r is None else choices[int(self._r.integers(len(choices)))]

    def distinct(self, n: int, low: int, high: int) -> list[int]:
        """n distinct integers from low..high (drawn; call only where `published` is False)."""
        assert self._r is not None
        return [low + int(v) for v in self._r.choice(high - low + 1, n, replace=False)]


def normal(r: np.random.Generator, *shape: int) -> np.ndarray:
    return r.standard_normal(shape)


def weight(r: np.random.Generator, fan_in: int, fan_out: int) -> np.ndarray:
    """(in, out), scaled by 1/sqrt(in) so activations stay O(1)."""
    return r.standard_normal((fan_in, fan_out)) / math.sqrt(fan_in)


def attention_weights(r, C: int, H: int, Hkv: int) -> tuple[np.ndarray, ...]:
    D = C // H
    return (
        weight(r, C, H * D),
        weight(r, C, Hkv * D),
        weight(r, C, Hkv * D),
        weight(r, H * D, C),
    )


def block_params(r, C: int, H: int, Hkv: int, F: int) -> dict[str, np.ndarray]:
    wq, wk, wv, wo = attention_weights(r, C, H, Hkv)
    return {
        "norm1": 1.0 + 0.1 * normal(r, C),
        "wq": wq,
        "wk": wk,
        "wv": wv,
        "wo": wo,
        "norm2": 1.0 + 0.1 * normal(r, C),
        "w_gate": weight(r, C, F),
        "w_up": weight(r, C, F),
        "w_down": weight(r, F, C),
    }


def decoder_params(r, V: int, C: int, H: int, Hkv: int, F: int, n_blocks: int) -> dict:
    return {
        "embed": normal(r, V, C),
        "blocks": [block_params(r, C, H, Hkv, F) for _ in range(n_blocks)],
        "final_norm": 1.0 + 0.1 * normal(r, C),
    }


def causal_formula(t_q: int, t_k: int) -> np.ndarray:
    """The contract's causal mask, written here from its formula: True where j > t_k - t_q + i."""
    return np.arange(t_k)[None, :] > (t_k - t_q) + np.arange(t_q)[:, None]


def ints(values) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)
