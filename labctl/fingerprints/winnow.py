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
from collections import deque

from labctl.fingerprints.tokens import Token

K = 12  # tokens per hashed K-gram: a line or two of code
W = 8  # window: every match of K + W - 1 tokens is found

Gram = tuple[int, int, int]  # (hash, first line, last line)


def grams(tokens: list[Token]) -> list[Gram]:
    """(hash, first line, last line) of every K-gram; the hash is stable across runs."""
    texts = [text for text, _ in tokens]
    lines = [line for _, line in tokens]
    blake2b = hashlib.blake2b
    found = []
    for start in range(len(tokens) - K + 1):
        text = "\x1f".join(texts[start : start + K]).encode("utf-8", "surrogatepass")
        digest = int.from_bytes(blake2b(text, digest_size=8).digest(), "big")
        window = lines[start : start + K]
        found.append((digest, min(window), max(window)))
    return found


def winnow(found: list[Gram]) -> list[Gram]:
    """The rightmost smallest hash of every window of W, each position kept once."""
    if len(found) <= W:
        return [min(found, key=lambda g: g[0])] if found else []
    # A sliding-window minimum: `queue` holds positions whose hashes rise from front to back;
    # a new hash drops every one behind it that is not smaller, so the front is the
    # rightmost smallest of the window. Linear, where a min over each window was W times that.
    queue: deque[int] = deque()
    chosen: list[Gram] = []
    last = -1
    for at, gram in enumerate(found):
        while queue and found[queue[-1]][0] >= gram[0]:
            queue.pop()
        queue.append(at)
        start = at - W + 1
        if start < 0:
            continue
        if queue[0] < start:
            queue.popleft()
        if queue[0] != last:
            last = queue[0]
            chosen.append(found[last])
    return chosen
