"""Winnowing (Schleimer, Wilkerson and Aiken, 2003): a unit's fingerprints, each with its lines.

Every K consecutive normalised tokens of a unit (`labctl.fingerprints.tokens`)
are hashed; in every window of W hashes the smallest is kept (the rightmost
when it repeats). Every match of at least K + W - 1 tokens shares a
fingerprint, and no match shorter than K does. K-grams are taken within a unit
(one function, or the module's own code), so a function copied into another
room gives the very fingerprints it gave in its own, whatever surrounds it.
"""

from __future__ import annotations

import hashlib

from labctl.fingerprints.tokens import Token

K = 12  # tokens per hashed K-gram: a line or two of code
W = 8  # window: every match of K + W - 1 tokens is found

Gram = tuple[int, int, int]  # (hash, first line, last line)


def grams(tokens: list[Token]) -> list[Gram]:
    """(hash, first line, last line) of every K-gram; the hash is stable across runs."""
    found = []
    for start in range(len(tokens) - K + 1):
        window = tokens[start : start + K]
        text = "\x1f".join(t for t, _ in window).encode("utf-8", "surrogatepass")
        digest = int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big")
        found.append((digest, min(line for _, line in window), max(line for _, line in window)))
    return found


def winnow(found: list[Gram]) -> list[Gram]:
    """The rightmost smallest hash of every window of W, each position kept once."""
    if len(found) <= W:
        return [min(found, key=lambda g: g[0])] if found else []
    chosen: dict[int, Gram] = {}
    for start in range(len(found) - W + 1):
        window = found[start : start + W]
        low = min(g[0] for g in window)
        at = start + max(i for i, g in enumerate(window) if g[0] == low)
        chosen[at] = found[at]
    return [chosen[at] for at in sorted(chosen)]
