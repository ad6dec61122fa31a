"""Winnowing and the room reader: the linear window minimum keeps what the definition keeps, and
a text read twice is fingerprinted once, to the same units."""

from __future__ import annotations

import hashlib
import random
import shutil

import pytest

from labctl.faults.base import project_clean_room
from labctl.fingerprints import room as room_module
from labctl.fingerprints.room import read_room
from labctl.fingerprints.winnow import K, W, grams, winnow


def _grams_by_definition(tokens):
    found = []
    for start in range(len(tokens) - K + 1):
        window = tokens[start : start + K]
        text = "\x1f".join(t for t, _ in window).encode("utf-8", "surrogatepass")
        digest = int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big")
        found.append((digest, min(line for _, line in window), max(line for _, line in window)))
    return found


def _winnow_by_definition(found):
    """Schleimer et al.: in each window of W hashes the smallest, the rightmost on a tie."""
    if len(found) <= W:
        return [min(found, key=lambda g: g[0])] if found else []
    chosen = {}
    for start in range(len(found) - W + 1):
        window = found[start : start + W]
        low = min(g[0] for g in window)
        at = start + max(i for i, g in enumerate(window) if g[0] == low)
        chosen[at] = found[at]
    return [chosen[at] for at in sorted(chosen)]


@pytest.mark.parametrize("seed", range(40))
def test_grams_and_winnow_keep_what_the_definition_keeps(seed):
    rng = random.Random(seed)
    tokens = [
        (rng.choice(["V", "S", "Call", "1", "end", "BinOp"]), rng.randrange(1, 40))
        for _ in range(rng.randrange(0, 120))
    ]
    assert grams(tokens) == _grams_by_definition(tokens)
    # Few distinct hashes: ties in almost every window, where "the rightmost" decides.
    tied = [(rng.randrange(4), i, i) for i in range(rng.randrange(0, 60))]
    assert winnow(tied) == _winnow_by_definition(tied)
    assert winnow(grams(tokens)) == _winnow_by_definition(_grams_by_definition(tokens))


def test_a_text_read_twice_is_parsed_once_and_gives_the_same_units(tmp_path, monkeypatch):
    room = tmp_path / "clean_room"
    shutil.copytree(project_clean_room(), room, ignore=shutil.ignore_patterns("__pycache__"))
    (room / "ffn.py").write_text(
        (room / "ffn.py").read_text() + "\n\ndef extra(x):\n    return x\n"
    )
    first = read_room(room)
    parsed = []
    real = room_module.parse_file
    monkeypatch.setattr(room_module, "parse_file", lambda text: parsed.append(text) or real(text))
    again = read_room(room)
    assert parsed == []
    assert again.units == first.units and again.files == first.files
    assert [p.bindings for p in again.parsed] == [p.bindings for p in first.parsed]
    # A changed file is read anew; the unchanged ones are not.
    (room / "ffn.py").write_text((room / "ffn.py").read_text() + "\n\ndef more(y):\n    return y\n")
    changed = read_room(room)
    assert len(parsed) == 1 and "def more" in parsed[0]
    assert [u.name for u in changed.units if u.name in ("extra", "more")] == ["extra", "more"]


def test_the_cache_holds_a_bounded_amount_of_text(monkeypatch):
    monkeypatch.setattr(room_module, "_CACHED_CHARS", 100)
    monkeypatch.setattr(room_module, "_cache", type(room_module._cache)())
    monkeypatch.setattr(room_module, "_cached_chars", 0)
    texts = [f"def f{i}(x):\n    return x + {i} * {'1' * 20}\n" for i in range(10)]
    for text in texts:
        room_module._fingerprinted(text)
    assert room_module._cached_chars <= 100
    assert list(room_module._cache) == texts[-len(room_module._cache) :]
    assert len(room_module._cache) >= 1
