"""`function_at`: a room's `dir/file.py:LINE` to the contract function whose body holds it."""

from __future__ import annotations

from labctl.verify.places import PACKAGE, function_at

SOURCE = """\
import numpy as np


def softmax(x, axis=-1):
    def rope(y):
        return y
    return rope(x)


def helper():
    return 1
"""


def test_the_innermost_contract_function_holds_the_line(tmp_path):
    (tmp_path / "primitives.py").write_text(SOURCE)
    assert function_at(tmp_path, "room/primitives.py:6") == "rope"
    assert function_at(tmp_path, "room/primitives.py:7") == "softmax"
    assert function_at(tmp_path, "room/primitives.py:11") == PACKAGE  # not a contract name
    assert function_at(tmp_path, "room/primitives.py:1") == PACKAGE
    assert function_at(tmp_path, "room/missing.py:1") == PACKAGE
    assert function_at(tmp_path, "not a place") == PACKAGE


def test_a_file_that_does_not_parse_is_read_by_its_nearest_def(tmp_path):
    (tmp_path / "primitives.py").write_text("def causal_mask(t_q, t_k=None):\n    return (\n")
    assert function_at(tmp_path, "room/primitives.py:2") == "causal_mask"


def test_a_changed_file_is_read_again(tmp_path):
    """The parse is kept per text, never per path: a room edited between calls (a grader's
    next learner at the same path) is read as it is now."""
    path = tmp_path / "primitives.py"
    path.write_text(SOURCE)
    assert function_at(tmp_path, "room/primitives.py:4") == "softmax"
    path.write_text("\n\n\ndef layer_norm(x, weight, bias, eps=1e-5):\n    return x\n")
    assert function_at(tmp_path, "room/primitives.py:4") == "layer_norm"
