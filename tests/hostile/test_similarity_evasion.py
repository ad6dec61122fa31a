"""A copier's mechanical rewrites keep the copy's pair, and labctl's own room stays base code.

Each attack is a rewrite of a whole room's source, as a copier would script it
(`similarityrooms`): every local renamed and the comments dropped, every name
wrapped in parentheses (`(np).exp((x) - (m))`), and padding, an unused
statement after every statement of every function and a dozen unused functions
after the code. The victim is a room written independently (`EINSUM`: ten
functions of the `clean-room init` stubs filled in); the class around it is the
other independent rooms. No test grades anyone: `compare` reads files and runs
nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from honestrooms import own_copy
from similarityrooms import (
    EINSUM,
    LOOPS,
    STYLES,
    pad,
    parenthesise,
    rename_locals,
    renamed,
    rewrite_room,
    write_room,
)

from labctl.grade.similarity import compare
from labctl.grade.similarity_report import document

REWRITES = {
    "renamed": rename_locals,
    "parenthesised": parenthesise,
    "padded": pad,
}


@pytest.fixture(scope="module")
def honest(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("class")
    return {name: write_room(root / name, code) for name, code in STYLES.items()}


def _pairs(result) -> list[tuple[str, str]]:
    return [(p["a"], p["b"]) for p in result.to_json()["pairs"]]


def _function_lines(room: Path, name: str) -> tuple[int, int]:
    import ast

    tree = ast.parse((room / "transformer_block.py").read_text())
    node = next(n for n in tree.body if getattr(n, "name", None) == name)
    return node.lineno, node.end_lineno


@pytest.mark.parametrize("rewrite", sorted(REWRITES))
def test_a_rewritten_copy_keeps_its_pair_with_every_function(honest, tmp_path, rewrite):
    copier = rewrite_room(honest["einsum"], tmp_path / "copier", REWRITES[rewrite])
    result = compare({**honest, "copier": copier})
    assert _pairs(result)[0] == ("copier", "einsum"), _pairs(result)
    top = result.to_json()["pairs"][0]
    shared = {m["b_function"] for m in top["shared_functions"]}
    # Every function the victim wrote beyond the stubs, each with its lines on both sides;
    # split_heads and merge_heads are two lines each, too short to call a copy.
    assert shared == set(EINSUM) - {"split_heads", "merge_heads"}, shared
    for match in top["shared_functions"]:
        assert match["b_lines"] == list(_function_lines(honest["einsum"], match["b_function"]))
        assert match["a_lines"] == list(_function_lines(copier, match["a_function"]))
    # No other pair: the independent rooms share no function.
    assert len(result.pairs) == 1


def test_one_renamed_function_copied_into_an_own_room_is_listed_with_its_lines(honest, tmp_path):
    """A learner who wrote every function but one, which they copied and renamed: a small
    share of either room (15 % and 23 %, under the default threshold, where the old check left
    it out), listed for the function."""
    mine = dict(LOOPS)
    mine["scaled_dot_product_attention"] = renamed(EINSUM)["scaled_dot_product_attention"]
    learner = write_room(tmp_path / "learner", mine)
    result = compare({**honest, "learner": learner})
    assert ("einsum", "learner") in _pairs(result), _pairs(result)
    pair = next(p for p in result.to_json()["pairs"] if (p["a"], p["b"]) == ("einsum", "learner"))
    assert max(pair["a_share"], pair["b_share"]) < result.threshold
    (match,) = pair["shared_functions"]
    assert match["a_function"] == match["b_function"] == "scaled_dot_product_attention"
    assert match["a_lines"] == list(_function_lines(honest["einsum"], match["a_function"]))
    assert match["b_lines"] == list(_function_lines(learner, match["b_function"]))


def test_a_padded_copy_is_shown_alike_on_both_sides_naming_no_copier(honest, tmp_path):
    """Padding makes the copier's room four times the victim's: the report counts each
    side's matching lines and says nothing of shares that would read as a direction."""
    copier = rewrite_room(honest["einsum"], tmp_path / "copier", pad)
    result = compare({**honest, "copier": copier})
    top = result.pairs[0]
    assert (top.a, top.b) == ("copier", "einsum")
    page = document(result)
    heading = page.split('<h2 id="pair-1">', 1)[1].split("</h2>", 1)[0]
    assert f"{top.a_matched} lines of copier and {top.b_matched} lines of einsum" in heading
    assert top.a_matched >= top.b_matched > 0
    assert "%" not in heading


@pytest.mark.parametrize("rewrite", ["renamed", "parenthesised", "all"])
def test_labctls_own_room_rewritten_stays_base_code(tmp_path, rewrite):
    def every(text: str) -> str:
        return parenthesise(rename_locals(text))

    change = every if rewrite == "all" else REWRITES[rewrite]
    own = own_copy(tmp_path / "own")
    rooms = {
        "ann": rewrite_room(own, tmp_path / "ann", change),
        "bob": rewrite_room(own, tmp_path / "bob", change),
    }
    found = json.loads(json.dumps(compare(rooms, threshold=0.01).to_json()))
    assert found["rooms"]["ann"]["base_share"] == 1.0
    assert found["pairs"] == []
