"""Seeded fixtures for `labctl verify clean-room`, written from contract v1 alone.

Every kind of input below is drawn from the run's seed (`builders.SEED`, the
published one, unless told): verify and grade draw a fresh seed per run, so
the values (and the int-only functions' sizes) are known to no one in
advance. Every cache here is keyed by the seed as well: a fixture built for
one seed is never served for another.

Every input follows contract v1 (`labctl/data/contract-v1.md`), not the quirks of any one
implementation, so a clean room written by someone else from the contract
passes when it is correct: weights `(in, out)` scaled by 1/sqrt(in), positions
int64, masks boolean with True = blocked broadcasting to `(B, H, Tq, Tk)`,
`decoder_forward` params as `embed (V, C)`, `blocks` (dicts of the nine block
keys) and `final_norm (C,)`. Odd widths appear only where the contract makes
them legal (an odd head width without RoPE, an odd `d_model` for the
sinusoidal table, odd C and F in the norms and feed-forwards).

The adversarial cases the course and the contract call out are there on
purpose: non-consecutive and repeated RoPE positions, Tq < Tk (decode with a
cache, bottom-right alignment) and Tq > Tk (masks whose first rows see no key:
valid input, `labctl.verify.rules.EDGES`), GQA and MQA, RoPE with and without
GQA, fully blocked rows, logits of
magnitude ~1e3 (where a softmax without the max subtracted overflows), and a
tiled attention whose running max rises in a later block, whose blocks do not
divide Tq or Tk or are longer than the sequence (causal and not), and whose
first query sees no key (Tq > Tk, causal).

The arrays come from `labctl.verify.builders`; each function's fixtures are
written in `labctl.verify.fixtures_primitives` (the functions built on no
other one) or `labctl.verify.fixtures_composed` (those built from others).
This module serves them, derives the other kinds of input from them and
computes the reference's outputs.

Kinds of input:

- `FIXTURES[f]`: float64 calls compared with the reference (parity) and
  checked for shape, dtype, NaN and purity.
- `PROBES[f]`: every fixture again in float32, for the dtype check: an
  output keeps its input's floating dtype, on every path the fixtures take.
- `causal_variants(f)`: the first fixture of `multi_head_attention`,
  `transformer_block` and `decoder_forward` with every input after position
  t replaced, for the future-token invariance check.
- `bad_cases(f)`, in `labctl.verify.bad_input`: exactly the cases of the
  contract's "Bad input" section; each must raise ValueError or TypeError.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from labctl.i18n import N_
from labctl.verify.builders import FIXTURES_VERSION as FIXTURES_VERSION  # records name it here
from labctl.verify.builders import SEED, Fixture, rng
from labctl.verify.fixtures_composed import COMPOSED
from labctl.verify.fixtures_primitives import PRIMITIVES
from labctl.verify.fixtures_v2 import EXTENDED, NEW
from labctl.verify.functions import CAUSAL_FUNCTIONS

_BY_FUNCTION = {**PRIMITIVES, **COMPOSED, **NEW}

# Functions with float inputs get a float32 probe; masks and the sinusoidal table take ints.
_NO_PROBE = {
    "causal_mask",
    "sliding_window_mask",
    "padding_mask",
    "sinusoidal_positions",
    "alibi_slopes",
    "alibi_bias",
}


def _fixtures(function: str, seed: int = SEED, contract: int = 1) -> tuple[Fixture, ...]:
    """The float64 fixtures of `function` drawn from `seed`, built once per process; checked
    against contract v2, a widened function's v2 fixtures follow v1's."""
    built = _BY_FUNCTION[function](seed)
    if contract >= 2 and function in EXTENDED:
        built = [*built, *EXTENDED[function](seed)]
    for fixture in built:
        fixture.seed = seed
    return tuple(built)


def _float32(value: Any) -> Any:
    if isinstance(value, np.ndarray) and value.dtype == np.float64:
        return value.astype(np.float32)
    if isinstance(value, tuple):
        return tuple(_float32(v) for v in value)
    if isinstance(value, list):
        return [_float32(v) for v in value]
    if isinstance(value, dict):
        return {k: _float32(v) for k, v in value.items()}
    return value


def _probes(function: str, seed: int = SEED, contract: int = 1) -> tuple[Fixture, ...]:
    """Every fixture again with every float64 array as float32 (none for int-only inputs):
    a float64 array made on one path only (a mask when not causal, an empty cache) upcasts
    that path alone."""
    if function in _NO_PROBE:
        return ()
    return tuple(
        Fixture(
            function,
            f"{fixture.name}-float32",
            _float32(fixture.args),
            _float32(dict(fixture.kwargs)),
            N_("float32 inputs: the output must stay float32"),
            seed,
            fixture.contract,
        )
        for fixture in fixtures(function, seed, contract)
    )


def causal_base(function: str, seed: int = SEED) -> Fixture:
    """The fixture whose future is perturbed: the function's first, causal by default."""
    return fixtures(function, seed)[0]


def _causal_variants(
    function: str, seed: int = SEED, contract: int = 1
) -> tuple[tuple[int, Fixture], ...]:
    """(t, fixture) pairs: the base fixture with every input after position t replaced."""
    base = causal_base(function, seed)
    r = rng(seed, f"{function}/causal")
    variants = []
    if function == "decoder_forward":
        ids = base.args[0]
        V = base.args[1]["embed"].shape[0]
        T = ids.shape[1]
        for t in range(T - 1):
            changed = ids.copy()
            shift = r.integers(1, V, changed[:, t + 1 :].shape)
            changed[:, t + 1 :] = (changed[:, t + 1 :] + shift) % V
            args = (changed, *base.args[1:])
            variants.append(
                (t, Fixture(function, f"future-after-{t}", args, base.kwargs, seed=seed))
            )
        return tuple(variants)
    x = base.args[0]
    T = x.shape[1]
    for t in range(T - 1):
        changed = x.copy()
        changed[:, t + 1 :] += 3.0 * r.standard_normal(changed[:, t + 1 :].shape)
        args = (changed, *base.args[1:])
        variants.append((t, Fixture(function, f"future-after-{t}", args, base.kwargs, seed=seed)))
    return tuple(variants)


class _PerSeed:
    """`build(function, seed)` kept per process, under one key whether the seed is given or
    left to its default (so a fixture is the same object however it was asked for)."""

    def __init__(self, build: Callable[[str, int, int], Any]) -> None:
        self._build = build
        self._kept: dict[tuple[str, int, int], Any] = {}

    def __call__(self, function: str, seed: int = SEED, contract: int = 1) -> Any:
        key = (function, seed, contract)
        if key not in self._kept:
            self._kept[key] = self._build(function, seed, contract)
        return self._kept[key]

    def cache_clear(self) -> None:
        self._kept.clear()


# Cached by wrapping, not by decorating: mutmut does not mutate decorated functions.
fixtures = _PerSeed(_fixtures)
probes = _PerSeed(_probes)
causal_variants = _PerSeed(_causal_variants)


# --------------------------------------------------------------------------
# Reference outputs, computed in labctl's own process (torch is fine here)
# --------------------------------------------------------------------------

_REFERENCE: dict[tuple[int, str, str], Any] = {}


def reference_output(fixture: Fixture) -> Any:
    """`labctl.reference` on the fixture, cached by (seed, function, fixture): numpy arrays
    (a tuple when several)."""
    key = (fixture.seed, fixture.function, fixture.name)
    if key not in _REFERENCE:
        if fixture.contract >= 2:
            import labctl.reference.v2 as reference
        else:
            from labctl import reference

        args, kwargs = fixture.call()
        _REFERENCE[key] = getattr(reference, fixture.function)(*args, **kwargs)
    return _REFERENCE[key]


def warm_reference(functions: tuple[str, ...], seed: int = SEED, contract: int = 1) -> None:
    """Compute every reference output the given functions need at `seed` (before any threads
    start).

    Where `labctl.verify.reference_cache` is on, outputs another process computed
    at this seed are read from disk first, and what had to be computed here is
    written back.
    """
    from labctl.verify import reference_cache

    wanted = [
        fixture
        for function in functions
        for fixture in (*fixtures(function, seed, contract), *probes(function, seed, contract))
    ]
    wanted += [
        fixture
        for function in functions
        if function in CAUSAL_FUNCTIONS
        for _t, fixture in causal_variants(function, seed, contract)
    ]
    keys = [(seed, f.function, f.name) for f in wanted]
    held = reference_cache.held(seed)
    if all(key in held and key in _REFERENCE for key in keys):
        return  # the file this process read or wrote, unchanged, and every output in hand
    on_disk: dict[tuple[int, str, str], Any] = {}
    reference_cache.load(on_disk, seed)
    _REFERENCE.update(on_disk)
    for fixture in wanted:
        reference_output(fixture)
    # Written whenever the file lacks one, not only when this process computed one: a process
    # that already holds the outputs (a second batch at the seed) still gives its workers a file.
    if any(key not in on_disk for key in keys):
        reference_cache.save(_REFERENCE, seed)
