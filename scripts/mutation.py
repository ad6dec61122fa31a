"""Mutation testing of the modules that decide a verdict, one module at a time.

    .venv/bin/python scripts/mutation.py                 # every module below, in order
    .venv/bin/python scripts/mutation.py lab compare     # just these (names from --list)
    .venv/bin/python scripts/mutation.py --list

mutmut (the `dev` extra) mutates one module and runs only that module's own test
files against each mutant (mutmut narrows further to the tests that reach the mutated
function), in a scratch copy under `.mutation/<module>/`, so the working tree is never
touched and runs of different modules do not share state. `--max-children 1`: the
machine this runs on is shared. It prints the kill rate per module: killed (a test
failed or the mutant timed out) over every mutant that is not judged equivalent.

Too slow for CI on two cores: run it by hand and put the figures in the closing note.
The target is at least 90% of non-equivalent mutants killed in each module.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRATCH = ROOT / ".mutation"


@dataclass(frozen=True)
class Target:
    module: str  # the file mutated
    tests: tuple[str, ...]  # pytest arguments: the test files (and -k) that speak for it
    # Functions that only lay out figures from values already measured: they decide no
    # verdict, so their mutants are not run (a lab's figure text is most of its mutants, and
    # each surviving one costs the whole lab's tests). Counted and named in the report.
    presentation: tuple[str, ...] = ()

    @property
    def dotted(self) -> str:
        return self.module.removesuffix(".py").replace("/", ".")

    def functions(self) -> list[str]:
        """The module's top-level function names, as mutmut names their mutants."""
        tree = ast.parse((ROOT / self.module).read_text("utf-8"))
        return [n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]

    def patterns(self) -> list[str]:
        """mutmut name patterns for every mutant but the presentation functions' (none: all)."""
        if not self.presentation:
            return []
        kept = [f for f in self.functions() if f not in self.presentation]
        return [f"{self.dotted}.x_{f}__mutmut_*" for f in kept] + [f"{self.dotted}.xǁ*"]


def _lab(name: str) -> Target:
    """A lab's module and test file. Its presentation functions are found by name: `_figures`
    and `_figure_*` lay out what `run` measured (the house convention for every lab)."""
    target = Target(f"labs/{name}.py", (f"tests/test_lab_{name}.py",))
    shown = tuple(f for f in target.functions() if f == "_figures" or f.startswith("_figure_"))
    return Target(target.module, target.tests, shown)


# Priority order: tolerances and judging, verify's checks and comparison, evidence
# validation and parsing, the worker's replies, then re-measurement, diagnosis and labs.
TARGETS: dict[str, Target] = {
    "lab": Target("labctl/lab.py", ("tests/test_tolerances.py", "tests/test_properties.py")),
    "compare": Target(
        "labctl/verify/compare.py",
        ("tests/test_verify_checks.py", "tests/test_properties.py", "tests/test_parity.py"),
    ),
    "checks": Target(
        "labctl/verify/checks.py", ("tests/test_checks_structure.py", "tests/test_verify_checks.py")
    ),
    "check_base": Target(
        "labctl/verify/check_base.py",
        ("tests/test_checks_structure.py", "tests/test_checks_behaviour.py"),
    ),
    "checks_structure": Target(
        "labctl/verify/checks_structure.py",
        (
            "tests/test_checks_structure.py",
            "tests/test_checks_behaviour.py",
        ),
    ),
    "checks_behaviour": Target(
        "labctl/verify/checks_behaviour.py",
        (
            "tests/test_checks_behaviour.py",
            "tests/test_checks_structure.py",
        ),
    ),
    # test_evidence_submit.py runs labs in every forked test process (~30 s a surviving
    # mutant): the evidence modules' rules are in the claims, validate and template tests.
    "validate": Target(
        "labctl/evidence/validate.py",
        (
            "tests/test_evidence_validate.py",
            "tests/test_evidence_template.py",
        ),
    ),
    "claims": Target(
        "labctl/evidence/claims.py",
        (
            "tests/test_evidence_claims.py",
            "tests/test_evidence_validate.py",
        ),
    ),
    "findings": Target(
        "labctl/evidence/findings.py",
        (
            "tests/test_evidence_claims.py",
            "tests/test_evidence_validate.py",
            "tests/test_evidence_template.py",
        ),
    ),
    "parse": Target(
        "labctl/evidence/parse.py", ("tests/test_evidence_parse.py", "tests/test_properties.py")
    ),
    "wire": Target(
        "labctl/isolation/wire.py", ("tests/test_wire.py", "tests/test_sandbox.py", "-k", "wire")
    ),
    # test_runner.py runs labs end to end (~40 s): its judging rules are in test_judge.py.
    "judge": Target("labctl/runner.py", ("tests/test_judge.py",)),
    # What judging gives (a row's and a lab's verdict), moved out of runner.py with its rules.
    "results": Target("labctl/results.py", ("tests/test_judge.py",)),
    # Rules files that run no lab and no worker stand for these two: the end-to-end files
    # (test_evidence_submit.py, test_verify_faults.py) run labs or a worker per fault room in
    # every forked test process, 20-40 s for each surviving mutant. Their rate is a lower bound.
    "submit": Target("labctl/evidence/submit.py", ("tests/test_evidence_submit_rules.py",)),
    "receipt": Target("labctl/evidence/receipt.py", ("tests/test_evidence_submit_rules.py",)),
    "fixtures": Target(
        "labctl/verify/fixtures.py",
        (
            "tests/test_verify_fixtures.py",
            "tests/test_checks_behaviour.py",
            "tests/test_verify_checks.py::test_causal_variants_perturb_after_every_position_from_the_first",
        ),
    ),
    "diagnosis": Target("labctl/verify/diagnosis.py", ("tests/test_verify_diagnosis.py",)),
    "likeness": Target(
        "labctl/verify/likeness.py",
        ("tests/test_verify_diagnosis.py", "tests/test_diagnosis_trace.py"),
    ),
    "blame": Target("labctl/verify/blame.py", ("tests/test_verify_diagnosis.py",)),
    "calls": Target(
        "labctl/verify/calls.py",
        ("tests/test_diagnosis_trace.py", "tests/test_verify_diagnosis.py"),
    ),
    **{
        lab: _lab(lab)
        for lab in (
            "causal_attention",
            "kv_cache",
            "gqa",
            "mask_ablation",
            "scale_ablation",
            "residual_ablation",
            "positions",
            "norms_ffn",
            "multi_head",
            "sliding_window",
            "decoder",
            "attention_inspect",
            "tiled_attention",
            "worked_examples",
        )
    },
    "worked_examples_rows": Target(
        "labs/worked_examples_rows.py", ("tests/test_lab_worked_examples.py",)
    ),
}

# Mutants judged equivalent (no input tells them apart), by mutmut's name, with the reason.
# They are left out of the kill rate and listed under it.
_STRICT = "zip(strict=...): structure_problem has already matched the lengths"
_SPLIT = "split() vs split(' '): the contract's return specs are single-spaced, no leading space"
EQUIVALENT: dict[str, str] = {
    **{
        f"labctl.verify.compare.x_compare__mutmut_{n}": "astype(None) is astype(float64)"
        for n in (19, 20, 29, 31)
    },
    **{f"labctl.verify.compare.x_compare_value__mutmut_{n}": _STRICT for n in (14, 17, 20)},
    **{f"labctl.verify.compare.x_structure_message__mutmut_{n}": _STRICT for n in (73, 77, 79)},
    **{f"labctl.verify.compare.x_structure_message__mutmut_{n}": _SPLIT for n in (9, 84)},
    "labctl.verify.compare.x_parity_tolerance__mutmut_13": "an empty reference's scale "
    "0.0 or 1.0: max(1, scale) is 1 either way",
    **{
        f"labctl.verify.checks_behaviour.x__row_sums__mutmut_{n}": "np.zeros without "
        "dtype=bool: float zeros, which np.where reads as False just the same"
        for n in (55, 57)
    },
    **{f"labctl.verify.checks_structure.x_check_dtype__mutmut_{n}": _STRICT for n in (25, 29, 32)},
    "labctl.verify.checks_structure.x_check_dtype__mutmut_48": _SPLIT,
    **{
        f"labctl.verify.checks_structure.x_check_dtype__mutmut_{n}": "the count of usable "
        "values is read only as zero or not, and it is zero only when the loop never reaches it"
        for n in (84, 85, 86)
    },
    "labctl.verify.checks_structure.x_check_parity__mutmut_12": "with_probes=None is falsy, "
    "as False",
    **{
        f"labctl.evidence.parse.xǁEvidenceLoaderǁconstruct_mapping__mutmut_{n}": "deep only "
        "decides whether a mapping is built eagerly or lazily: the same data either way (a key "
        "that is itself a collection is unhashable and refused both ways)"
        for n in (1, 5, 7, 8, 25, 27)
    },
    "labctl.evidence.parse.x_decode__mutmut_16": "codec names are case-insensitive",
    **{
        f"labctl.evidence.validate.x__schema__mutmut_{n}": "by_alias=None or left out is the "
        "model's default, by alias"
        for n in (3, 6)
    },
    **{
        f"labctl.evidence.validate.x__verified_at__mutmut_{n}": "unreachable: the schema "
        "refuses (and so flags) every verified_at that parse_time cannot read"
        for n in range(13, 23)
    },
    **{
        f"labctl.verify.fixtures.x__causal_variants__mutmut_{n}": "no causal base fixture has "
        "keyword arguments: the default {} is the same"
        for n in (49, 78)
    },
    "labctl.runner.x_check_out_dir__mutmut_12": "the walk up always meets a directory that "
    "exists (the root) before the loop's end: break or return is never reached",
    "labctl.evidence.findings.xǁReportǁ_claim__mutmut_35": "a text impl has returned "
    "already; claim_impl reads any other impl as None",
    **{
        f"labctl.evidence.findings.x__ordered__mutmut_{n}": "only the part before the first "
        "separator is kept: maxsplit does not change it"
        for n in (7, 10)
    },
    "labctl.evidence.findings.x__ordered__mutmut_30": "-1 or -2: either sorts before every "
    "index (>= 0)",
    "labctl.evidence.validate.x__schema__mutmut_12": "the URL goes into a key of the error "
    "that no reason reads",
    **{
        f"labctl.evidence.validate.x__schema__mutmut_{n}": "tidy() orders the problems by field "
        "and index afterwards"
        for n in (43, 45)
    },
    **{
        f"labctl.evidence.validate.x__reason__mutmut_{n}": "the strict models report a float "
        "for an int as int_type, never int_from_float"
        for n in (67, 68)
    },
    **{
        f"labctl.evidence.parse.x_escaped__mutmut_{n}": "U+0100 is a letter, never escaped: "
        "< 0x100 and <= 0x100 escape the same characters"
        for n in (9, 10)
    },
    **{
        f"labctl.evidence.parse.x_parse_text__mutmut_{n}": "str.count/rfind with start None "
        "is start 0"
        for n in (49, 62)
    },
    **{
        f"labctl.evidence.parse.xǁEvidenceLoaderǁcompose_node__mutmut_{n}": "parent and "
        "index feed only path resolvers, which the loader does not use"
        for n in (32, 33)
    },
    "labctl.verify.checks_behaviour.x_check_causal__mutmut_105": "errstate(invalid=None) "
    "only lets numpy warn: no value changes",
    "labctl.verify.checks_behaviour.x_check_causal__mutmut_111": "astype(None) is astype(float64)",
    "labctl.verify.checks_behaviour.x_check_rows_sum__mutmut_14": "with_probes=None is "
    "falsy, as False",
    "labctl.verify.checks_behaviour.x_check_rows_sum__mutmut_38": "errstate(invalid=None) "
    "only lets numpy warn: no value changes",
    **{
        f"labctl.verify.checks_behaviour.x_check_rows_sum__mutmut_{n}": "np.max's initial "
        "matters only for an empty array: structure_problem admits the reference's shapes "
        "only, and no fixture's output is empty"
        for n in (68, 70, 80, 82)
    },
}

# Pass alone, but fail in mutmut's copy on an unmutated tree (CPython 3.11: "AST constructor
# recursion depth mismatch" under mutmut's trampolines), which stops every run that needs them.
_DESELECT = [
    arg
    for test in (
        "test_each_run_writes_a_record_and_appends_to_the_history",
        "test_the_report_artifact_stays_strict_json_when_outputs_are_nan",
    )
    for arg in ("--deselect", f"tests/test_verify_checks.py::{test}")
]

_DECOY = (
    "the sequence decoded in between only has to differ from the prefix: its length and RoPE "
    "base change nothing for a decode that reads the cache it is handed, and break one that "
    "keeps its own copy of the prefix all the same"
)
_LAST_ROW = "only the last position's output is read: it sees every key, masked causally or not"
_EMPTY_SLICE = "t = T - 1 and t = T perturb an empty slice: the extra turns change nothing"
_ANY_PERTURBATION = "replacing the future, or subtracting the noise, perturbs it all the same"
_FIGURES_EMPTY = "output.figures is empty until this line: = and += give the same list"
_SAME_LENGTH = "zip(strict=...): the three outputs of each implementation always pair up"
EQUIVALENT.update(
    {
        "labctl.labs.causal_attention.x__future_invariance__mutmut_12": _EMPTY_SLICE,
        **{
            f"labctl.labs.causal_attention.x__future_invariance__mutmut_{n}": _ANY_PERTURBATION
            for n in (15, 16)
        },
        **{
            f"labctl.labs.causal_attention.x_run__mutmut_{n}": _SAME_LENGTH for n in (137, 140, 141)
        },
        "labctl.labs.causal_attention.x_run__mutmut_152": _FIGURES_EMPTY,
        **{f"labctl.labs.kv_cache.x__per_token__mutmut_{n}": _DECOY for n in (21, 28, 29, 30)},
        **{f"labctl.labs.kv_cache.x__per_token__mutmut_{n}": _LAST_ROW for n in (70, 82)},
    }
)

# evidence/submit.py, evidence/receipt.py
_FINITE = (
    "every number in a receipt is finite: a claim that is not is never re-measured, and a "
    "measurement that is not is refused as 'measured no', so allow_nan never decides"
)
EQUIVALENT.update(
    {
        **{f"labctl.evidence.receipt.x_keep__mutmut_{n}": _FINITE for n in (87, 91, 94)},
        "labctl.evidence.receipt.x_keep__mutmut_103": "codec names are case-insensitive",
        "labctl.evidence.receipt.x_keep__mutmut_86": "ensure_ascii=None is falsy, as False",
        "labctl.evidence.receipt.x_digest__mutmut_5": "ensure_ascii=None is falsy, as False",
        "labctl.evidence.receipt.x_digest__mutmut_17": "codec names are case-insensitive",
        "labctl.evidence.submit.x__compare__mutmut_42": "row is read only after the lookup "
        "set it: a claim whose lab gave no result has a reason already (its room broke)",
        "labctl.evidence.submit.x__measure__mutmut_22": "a 'both' row stored from a "
        "one-implementation run is never read: a 'both' claim runs its lab on both, or its "
        "room broke and the claim is refused for that first",
    }
)

# verify/diagnosis.py and verify/likeness.py (split from it)
EQUIVALENT.update(
    {
        **{
            f"labctl.verify.likeness.x__same_value__mutmut_{n}": "zip(strict=...): "
            "structure_problem has already matched the lengths"
            for n in (22, 26, 30)
        },
        "labctl.verify.likeness.x__same_value__mutmut_36": "every probe's reference is "
        "floating point (the probes are the float32 cases): the dtype test is always true",
        "labctl.verify.likeness.x_same_behaviour__mutmut_22": "probe=None is falsy, as False",
        **{
            f"labctl.verify.likeness.x_matches__mutmut_{n}": "evaluating every function "
            "instead of one: only that function's results are read"
            for n in (12, 14)
        },
        "labctl.verify.diagnosis.x_diagnose__mutmut_255": "-1 or -2: either sorts the package "
        "before every contract function (>= 0)",
        "labctl.verify.diagnosis.xǁFaultRoomsǁobserve__mutmut_3": "one lock for every fault "
        "room instead of one each only serializes the observations: the same results",
        **{
            f"labctl.verify.diagnosis.x__prefetch__mutmut_{n}": "the pool's size changes how "
            "many rooms are observed at once, not what is observed"
            for n in (3, 4)
        },
    }
)

# Labs gqa, residual_ablation, positions, norms_ffn, multi_head, mask_ablation.
_FLOAT_CONDITION = "np.where reads the float triangle's 1.0/0.0 as True/False, as the bool one"
_LAST_AXIS = "axis=+1 of a 2-D (T, T) array is its last axis, axis=-1"
_ELEMENTS = (
    "the cache is counted in elements (k_all.size), not in its dtype's bytes: float32 only "
    "keeps the zero weights sent to the worker small"
)
_EITHER_BRANCH = (
    "which branch runs changes nothing: the torch < 2.5 fallback is enable_gqa's documented "
    "equivalent (both are tested)"
)
_KV_NONE = "contract v1: n_kv_heads=None is H, so None and H ask for the same MHA"
EQUIVALENT.update(
    {
        **{f"labctl.labs.gqa.x__per_head_mha__mutmut_{n}": _FLOAT_CONDITION for n in (10, 12)},
        **{f"labctl.labs.gqa.x__per_head_mha__mutmut_{n}": _LAST_AXIS for n in (46, 55)},
        **{f"labctl.labs.gqa.x__torch_gqa__mutmut_{n}": _EITHER_BRANCH for n in (18, 19, 20)},
        "labctl.labs.gqa.x__llama_cache_bytes__mutmut_7": "bytes per token from a prompt of "
        "any length: the cache grows by the same size per token",
        **{
            f"labctl.labs.gqa.x__llama_cache_bytes__mutmut_{n}": _ELEMENTS
            for n in (10, 12, 16, 18, 20, 22, 25, 27)
        },
        **{f"labctl.labs.gqa.x_run__mutmut_{n}": _KV_NONE for n in (41, 47, 48)},
        "labctl.labs.gqa.x_run__mutmut_174": _FIGURES_EMPTY,
        "labctl.labs.residual_ablation.x__gradients__mutmut_3": "another stream independent of "
        "the lab's default_rng(seed) draws the same distribution: the 1 only keeps it apart",
        **{
            f"labctl.labs.residual_ablation.x__gradients__mutmut_{n}": "the final norm's gain is "
            "ones, never trained: None (no gain) or float32 ones scale by exactly 1"
            for n in (17, 19, 21, 47)
        },
        "labctl.labs.residual_ablation.x_run__mutmut_141": _FIGURES_EMPTY,
        **{
            f"labctl.labs.positions.x__measure__mutmut_{n}": "causal=None is falsy: attention "
            "without the mask, as causal=False"
            for n in (7, 16, 37, 47, 64, 75)
        },
        "labctl.labs.positions.x__pe_dots__mutmut_7": "range(0, n) is range(n)",
        "labctl.labs.positions.x__pe_dots__mutmut_11": "the extra Δ = max_delta + 1 is never read",
        **{
            f"labctl.labs.positions.x_{f}__mutmut_{n}": "np.asarray of integer positions is "
            "promoted to float64 by the product with a float"
            for f in ("half_split_rope", "interleaved_rope")
            for n in (7, 9)
        },
        **{
            f"labctl.labs.positions.x_{f}__mutmut_16": "np.arange(D / 2) is [0., 1., ...], the "
            "same values as np.arange(D // 2) for an even D"
            for f in ("half_split_rope", "interleaved_rope")
        },
        "labctl.labs.positions.x_pe_dot__mutmut_12": "np.arange(d / 2) is [0., 1., ...], the "
        "same values as np.arange(d // 2) for an even d",
        **{
            f"labctl.labs.positions.x__measure__mutmut_{n}": "axis=+1 of the 2-D (T, D) rows is "
            "their last axis"
            for n in (183, 189)
        },
        "labctl.labs.positions.x_run__mutmut_62": _FIGURES_EMPTY,
        **{
            f"labctl.labs.multi_head.x__chain__mutmut_{n}": "zip(strict=...): eight steps, "
            "eight shapes, and `have` is padded to the steps' length"
            for n in (10, 13, 14, 68, 71, 72)
        },
    }
)

# Labs sliding_window, decoder, attention_inspect, worked_examples (and its rows),
# tiled_attention, scale_ablation: the survivors no input tells apart.
_ANY_BUMP = (
    "any change to position 0 perturbs it: set, subtracted or doubled, the same outputs move"
)
_EXACT_ZERO = (
    "outputs the perturbation cannot reach differ by exactly 0, moved ones by O(1): none is 1e-12"
)
_SHORT_IS_WINDOW = (
    "the short cache holds exactly the W keys the window allows: a window masks nothing there"
)
_N_TOKENS = "zip(strict=...): both paths (and both implementations) generate N tokens each"
_DECODER_ZIPS = (111, 114, 117, 126, 129, 132, 207, 210, 211)
_LOW_DEFAULT = "rng.integers(n) is rng.integers(0, n): the same draws"
_FROM_ONE = (
    "ids drawn from 1 .. V - 1 instead of 0 .. V - 1: still random tokens; no row reads which "
    "ids were drawn, and nothing in the model treats id 0 apart"
)
_ANY_HEADS = "the padded batch's head count and width are arbitrary: masks and weights alike"
_READ_ONE = (
    "only out[0, 0, 0, 0] is read: an extra query head, query or value channel changes nothing"
)
_AT_BOUND = "< or <= at a slack of 1e-12: no entropy or row sum lands exactly on bound + 1e-12"
_ONLINE_INPUT = (
    "the online-softmax row's input (other scores with the max last, block 1 or 2, two heads "
    "or queries, causal for one query, scale 1 = 1/sqrt(1)): a right tiled_attention gives 0 "
    "on each, one that skips the rescale fails each"
)
_PE_DOTS = (
    "PE(p)·PE(p + delta) depends on delta only, and a table's first 16 rows not on its length: "
    "other positions or a 17-row table give the same dots"
)
EQUIVALENT.update(
    {
        **{f"labctl.labs.sliding_window.x__moved__mutmut_{n}": _ANY_BUMP for n in (2, 3, 5)},
        "labctl.labs.sliding_window.x__moved__mutmut_40": _EXACT_ZERO,
        **{f"labctl.labs.sliding_window.x__decode__mutmut_{n}": _SHORT_IS_WINDOW for n in (38, 45)},
        "labctl.labs.sliding_window.x_run__mutmut_37": "any Tq < Tk tests the bottom-right "
        "alignment: 4 or 5 queries of 10",
        "labctl.labs.sliding_window.x_run__mutmut_97": _FIGURES_EMPTY,
        "labctl.labs.decoder.x_run__mutmut_212": _FIGURES_EMPTY,
        **{f"labctl.labs.decoder.x_run__mutmut_{n}": _N_TOKENS for n in _DECODER_ZIPS},
        **{f"labctl.labs.decoder.x_run__mutmut_{n}": _LOW_DEFAULT for n in (21, 41)},
        "labctl.labs.decoder.x_replace_from__mutmut_8": _LOW_DEFAULT,
        **{f"labctl.labs.decoder.x_run__mutmut_{n}": _FROM_ONE for n in (24, 44)},
        "labctl.labs.decoder.x_replace_from__mutmut_16": "a shift of -(1 .. V - 1) is never "
        "0 mod V either: every later token is still replaced, by a random other one",
        "labctl.labs.decoder.x__forward__mutmut_15": "window=None is decoder_forward's default",
        "labctl.labs.decoder.x_run__mutmut_7": "C % H is 0 by then: C / H is C // H exactly",
        "labctl.labs.attention_inspect.x_run__mutmut_147": _FIGURES_EMPTY,
        "labctl.labs.worked_examples.x_run__mutmut_84": _FIGURES_EMPTY,
        **{
            f"labctl.labs.worked_examples_rows.x__online_vs_standard__mutmut_{n}": _ONLINE_INPUT
            for n in (4, 5, 6, 10, 11, 30, 31, 36, 37, 40, 41)
        },
        **{
            f"labctl.labs.worked_examples_rows.x__pe_dots__mutmut_{n}": _PE_DOTS
            for n in (6, 10, 11)
        },
        **{
            f"labctl.labs.worked_examples_rows.x__queries_per_kv_head__mutmut_{n}": "head numbers "
            "0 .. 7 are exact as int or float64, and the count of head 0 is read whatever "
            "bincount's minlength"
            for n in (11, 13, 31, 33)
        },
        **{
            f"labctl.labs.worked_examples_rows.x__reach__mutmut_{n}": "T = L·W + 2 or + 3, int "
            "or float counts, the last row or the one before: each reaches the same L(W - 1) + 1 "
            "positions, clear of position 0"
            for n in (4, 6, 21)
        },
        "labctl.labs.worked_examples_rows.x__attention3__mutmut_7": "a fourth row of zeros "
        "that no row reads",
        "labctl.labs.worked_examples_rows.x__softmax__mutmut_3": "softmax is shift-invariant; "
        "the examples' scores (at most 4) do not overflow e^(2 max)",
        **{
            f"labctl.labs.worked_examples_rows.xǁRowǁ{method}__mutmut_{n}": "the values are "
            "float64 already, and integer claims compare the same"
            for method, n in (("recompute", 13), ("recompute", 15), ("verdict", 3), ("verdict", 5))
        },
        "labctl.labs.attention_inspect.x__model__mutmut_2": "run refuses C % H != 0 first: "
        "np.repeat by C / H repeats C // H times",
        **{f"labctl.labs.attention_inspect.x__padding__mutmut_{n}": _ANY_HEADS for n in (2, 5)},
        "labctl.labs.attention_inspect.x__padding__mutmut_50": "a blocked row is blocked in "
        "every head: the mask broadcast over 1 or 2 heads gives the same rows",
        "labctl.labs.attention_inspect.x__padding__mutmut_84": "swapaxes(-1, 2) on a 4-D mask "
        "is swapaxes(-1, -2)",
        **{f"labctl.labs.attention_inspect.x__dilution__mutmut_{n}": _READ_ONE for n in (5, 6, 26)},
        **{f"labctl.labs.attention_inspect.x_run__mutmut_{n}": _AT_BOUND for n in (52, 55, 61)},
        "labctl.labs.tiled_attention.x_run__mutmut_112": _FIGURES_EMPTY,
        "labctl.labs.mask_ablation.x_run__mutmut_154": _FIGURES_EMPTY,
        "labctl.isolation.wire.x_read_exactly__mutmut_12": "left is exactly 0.0 only by "
        "chance: select with no time left then polls once, and a stalled sender still times out",
        **{
            f"labctl.isolation.wire.x_read_exactly__mutmut_{n}": "the size of one read (1 or "
            "2 MiB) changes how many reads, not what they return"
            for n in (34, 35)
        },
        **{
            f"labctl.isolation.wire.x__encode__mutmut_{n}": "the array is C-contiguous here: "
            "its bytes viewed as uint8 are the same whatever the shape given to reshape"
            for n in (18, 21)
        },
        "labctl.isolation.wire.x__parts__mutmut_18": "codec names are case-insensitive",
        **{
            f"labctl.isolation.wire.{name}__mutmut_{n}": "a signed or unsigned length reads "
            "the same below 2^31 (a header) or 2^63 (a frame): the limits are far below"
            for name, n in (("x__parts", 25), ("x_decode", 14), ("x_write_frame", 11))
        },
        "labctl.isolation.wire.x_write_frame__mutmut_16": "os.write takes the bytes whatever "
        "the memoryview's format",
        "labctl.isolation.wire.x_write_frame__mutmut_22": "a blocking pipe takes a whole write "
        "(Linux blocks until it is written): the loop for a partial write never runs twice",
        "labctl.labs.scale_ablation.x_run__mutmut_169": _FIGURES_EMPTY,
        "labctl.labs.multi_head.x_run__mutmut_61": _FIGURES_EMPTY,
        "labctl.labs.multi_head.x_run__mutmut_36": "note='' is LabOutput.add's default",
        **{
            f"labctl.labs.multi_head.x_per_head_loop__mutmut_{n}": "np.where reads a float "
            "mask's 1.0 as True: the same positions are blocked"
            for n in (10, 12)
        },
        **{
            f"labctl.labs.multi_head.x_per_head_loop__mutmut_{n}": "softmax is shift-invariant: "
            "adding the row's max, or subtracting the overall one, moves no weight beyond "
            "rounding on these O(1) scores"
            for n in (47, 48, 50)
        },
        "labctl.labs.multi_head.x__future_leak__mutmut_10": "t = T - 1 and T perturb empty "
        "slices: the output does not move, and the maximum is unchanged",
        "labctl.labs.multi_head.x__measure__mutmut_3": "run refuses C % H != 0 first: C / H "
        "is C // H, and 8.0 == 8 in the shape comparisons",
        **{
            f"labctl.labs.multi_head.x__measure__mutmut_{n}": "positions 0 .. T - 1 are exact "
            "as int or float64, in the probe and in its comparison"
            for n in (39, 41)
        },
        "labctl.labs.multi_head.x__measure__mutmut_51": "the probe is the same in every batch "
        "element: element 0 or 1 holds the same positions",
        **{
            f"labctl.labs.scale_ablation.x_run__mutmut_{n}": "zip(strict=...): both sides read "
            "the same four arrays for each d_k"
            for n in (150, 153, 158)
        },
        **{
            f"labctl.labs.scale_ablation.x{name}__mutmut_{n}": "v is never read, only the "
            "weights: a wider v changes nothing the lab measures"
            for name, n in (("_run", 22), ("__pair_inputs", 42))
        },
        "labctl.labs.scale_ablation.x__sharpness__mutmut_7": "numpy takes a negative size "
        "in reshape as the unknown one: reshape(-2, n) is reshape(-1, n)",
        "labctl.labs.scale_ablation.x__sharpness__mutmut_20": "the stand-in log is multiplied "
        "by p = 0: log 1 or log 2, the entropy term is 0",
        **{
            f"labctl.labs.scale_ablation.x__sharpness__mutmut_{n}": "axis +1 of a 2-D array "
            "is axis -1"
            for n in (28, 54, 69)
        },
        **{
            f"labctl.labs.scale_ablation.x__sharpness__mutmut_{n}": "p_i p_j is symmetric: "
            "summing it over i or over j is the same"
            for n in (43, 44)
        },
        **{f"labctl.labs.mask_ablation.x__lm_data__mutmut_{n}": _LOW_DEFAULT for n in (91, 101)},
        "labctl.labs.mask_ablation.x__lm_data__mutmut_104": _FROM_ONE,
        **{
            f"labctl.labs.mask_ablation.x{name}__mutmut_{n}": "zip(strict=...): the lists "
            "always have the same length (one entry per mask, per parameter)"
            for name, n in (
                ("_run", 87),
                ("_run", 90),
                ("_run", 97),
                ("ǁ_Adamǁstep", 8),
                ("ǁ_Adamǁstep", 12),
                ("ǁ_Adamǁstep", 13),
            )
        },
        "labctl.labs.mask_ablation.x__lm_logits__mutmut_61": "transpose(+2, -1) of a 4-D "
        "tensor is transpose(-2, -1)",
        "labctl.labs.mask_ablation.x__lm_logits__mutmut_66": "the parameters refuse a width "
        "the heads do not divide: sqrt(C / H) is sqrt(C // H)",
        "labctl.labs.mask_ablation.x__lm_logits__mutmut_75": 'float("-INF") is float("-inf")',
        **{
            f"labctl.labs.mask_ablation.x__train_lm__mutmut_{n}": "torch.tensor of a float64 "
            "array is float64 without being told"
            for n in (3, 6)
        },
        **{
            f"labctl.labs.mask_ablation.x__train_lm__mutmut_{n}": "np.array of a bool mask is "
            "bool without being told (_language_models refuses any other first)"
            for n in (15, 17)
        },
        "labctl.labs.mask_ablation.x__train_lm__mutmut_10": "with no mask, np.array(None, "
        "bool) is a 0-d False: masked_fill blocks nothing, as with None",
        "labctl.labs.mask_ablation.x__probe__mutmut_44": "t = T - 1 and T perturb empty "
        "slices: the output does not move, and the maximum is unchanged",
        "labctl.labs.tiled_attention.x_online_softmax_steps__mutmut_3": "the first step's "
        "rescale is exp(-inf - s) = 0: whatever the running sum starts at, it is then 0",
    }
)

# Functions that run only while their module is imported: a lab's metric declarations, built
# into METRICS then. mutmut switches a mutant on in a process forked after that import, so no
# test can observe one; the tolerance-table tests pin what they build (name, bound, reason).
_AT_IMPORT = (
    "runs only at import (the lab's metric declarations), before mutmut switches a mutant on; "
    "the tolerance-table tests pin what it builds"
)
IMPORT_TIME: dict[str, tuple[str, ...]] = {
    "labctl.labs.kv_cache": ("_flops_metric", "_time_metric"),
    "labctl.labs.scale_ablation": ("_var_metrics",),
}


def excluded(key: str) -> str | None:
    """Why mutant `key` is left out of the kill rate (equivalent, or unobservable), or None."""
    if key in EQUIVALENT:
        return EQUIVALENT[key]
    module = key.rpartition(".")[0]
    return _AT_IMPORT if _function(key) in IMPORT_TIME.get(module, ()) else None


def _shown(key: str, target: Target) -> bool:
    """Whether mutant `key` is in one of the target's presentation functions (not run)."""
    return _function(key) in target.presentation


def _function(key: str) -> str:
    """The function a mutant named `key` mutates (`name` or `Class.method`)."""
    mutant = key.rpartition(".")[2].split("__mutmut_")[0]
    return mutant.removeprefix("x_") if mutant.startswith("x_") else mutant[2:].replace("ǁ", ".")


KILLED = {"killed", "timeout", "caught by type check"}
NOT_COUNTED = {"skipped", "not checked"}


def _mutmut_section(target: Target) -> str:
    return "\n".join(
        [
            "[tool.mutmut]",
            'source_paths = ["labctl"]',
            f"only_mutate = {json.dumps([target.module])}",
            f"pytest_add_cli_args_test_selection = {json.dumps(list(target.tests))}",
            f"pytest_add_cli_args = {json.dumps(['-p', 'no:cacheprovider', '-q', *_DESELECT])}",
            # torch is imported by the tests: fork workers from a server free of it.
            'process_isolation = "forkserver"',
            "",
        ]
    )


def _scratch(name: str, target: Target) -> Path:
    """A copy of the package, the tests and pyproject.toml configured for this module."""
    where = SCRATCH / name
    if where.exists():
        shutil.rmtree(where)
    where.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in ("labctl", "tests"):
        shutil.copytree(ROOT / folder, where / folder, ignore=ignore)
    _configure(where, target)
    # torch imported once in mutmut's fork server, not again (~2 s) in every mutant's child.
    (where / "tests" / "conftest.py").write_text("import torch  # noqa: F401\n")
    return where


def _configure(where: Path, target: Target) -> None:
    """The project's pyproject.toml with a [tool.mutmut] section for this target only."""
    text = (ROOT / "pyproject.toml").read_text("utf-8")
    text = re.sub(r"(?ms)^\[tool\.mutmut\]\n.*?(?=^\[|\Z)", "", text)
    (where / "pyproject.toml").write_text(text.rstrip() + "\n\n" + _mutmut_section(target))


def _mutmut(where: Path, *args: str, timeout: float | None = None) -> subprocess.CompletedProcess:
    binary = Path(sys.executable).with_name("mutmut")
    # One thread per BLAS and per torch: the machine is shared, and a thread pool that torch
    # started in mutmut's fork server would hang the children forked from it.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    return subprocess.run(
        [str(binary), *args], cwd=where, capture_output=True, text=True, timeout=timeout, env=env
    )


def _survivors(where: Path, target: Target) -> list[str]:
    """The last run's survivors, and the mutants it did not reach (a run stopped early)."""
    found = []
    for line in _mutmut(where, "results").stdout.splitlines():
        key, _, status = line.strip().rpartition(": ")
        # an equivalent listed since the last run is not re-run
        kept = status not in KILLED | {"skipped"} and not excluded(key)
        if key and kept and not _shown(key, target):
            found.append(key)
    return found


def run_one(
    name: str, target: Target, timeout: float, again: bool = False, report: bool = False
) -> dict:
    """Mutate `target` in a fresh scratch copy, or (`again`) re-test only the survivors of
    the last run there against the current tests: the loop after adding a test. `report`
    runs nothing: the last run's figures, read with the equivalents as they are now."""
    where = SCRATCH / name
    names: list[str] = []
    if report:
        if not (where / "mutants").is_dir():
            raise SystemExit(f"{name}: no last run in {where} to report on")
    elif again and (where / "mutants").is_dir():
        names = _survivors(where, target)
        shutil.rmtree(where / "tests")
        shutil.copytree(
            ROOT / "tests", where / "tests", ignore=shutil.ignore_patterns("__pycache__")
        )
        shutil.rmtree(where / "mutants" / "tests", ignore_errors=True)
        shutil.copytree(where / "tests", where / "mutants" / "tests")
        # Which tests reach which function is measured anew: a test added since the last run
        # is otherwise not run against the survivors it was written for.
        (where / "mutants" / "mutmut-stats.json").unlink(missing_ok=True)
        _configure(where, target)  # the target's test files may have grown since
    else:
        where = _scratch(name, target)
        names = target.patterns()
    start = time.monotonic()
    note: list[str] = []
    # mutmut given no names mutates everything: with nothing to re-test, run nothing.
    if names or not (report or again):
        try:
            done = _mutmut(where, "run", "--max-children", "1", *names, timeout=timeout)
            failed = done.returncode != 0 and "mutations/second" not in done.stdout
            note = (done.stderr or done.stdout).strip().splitlines()[-1:] if failed else []
        except subprocess.TimeoutExpired:
            note = [f"stopped after {timeout:.0f} s: figures cover the mutants tested so far"]
    statuses: dict[str, str] = {}
    for line in _mutmut(where, "results", "--all", "true").stdout.splitlines():
        key, _, status = line.strip().rpartition(": ")
        if key:
            statuses[key] = status
    shown = {k for k in statuses if _shown(k, target)}
    # Mutant numbers shift when a function's code changes: an equivalent that a test kills, or
    # one mutmut no longer makes, is a stale key. A killed one counts as killed, not left out.
    prefix = target.module.removesuffix(".py").replace("/", ".") + "."
    stale = sorted(k for k, s in statuses.items() if k in EQUIVALENT and s in KILLED)
    stale += sorted(k for k in EQUIVALENT if k.startswith(prefix) and k not in statuses)
    counted = {
        k: s
        for k, s in statuses.items()
        if s not in NOT_COUNTED and (not excluded(k) or k in stale) and k not in shown
    }
    killed = sum(s in KILLED for s in counted.values())
    return {
        "module": target.module,
        "mutants": len(statuses),
        "presentation": len(shown),
        "equivalent": sorted(k for k in statuses if excluded(k) and k not in stale),
        "stale": stale,
        "counted": len(counted),
        "killed": killed,
        "rate": killed / len(counted) if counted else None,
        "survivors": sorted(k for k, s in counted.items() if s not in KILLED),
        "seconds": round(time.monotonic() - start),
        "note": " ".join(note),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="modules to mutate (default: all, in order)")
    parser.add_argument("--list", action="store_true", help="list the modules and their tests")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per module")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument(
        "--again",
        action="store_true",
        help="re-test the last run's survivors (and the mutants it did not reach) against "
        "the tests as they are now",
    )
    parser.add_argument(
        "--report",
        action="store_true",
        help="run nothing: the last run's figures, with the equivalents as listed now",
    )
    args = parser.parse_args(argv)
    if args.list:
        for name, target in TARGETS.items():
            shown = f"  (presentation: {', '.join(target.presentation)})" * bool(
                target.presentation
            )
            print(f"{name:18} {target.module:32} {' '.join(target.tests)}{shown}")
        return 0
    unknown = [n for n in args.names if n not in TARGETS]
    if unknown:
        parser.error(f"unknown module(s) {unknown}; see --list")
    results = []
    for name in args.names or list(TARGETS):
        doing = "the last run of" if args.report else "mutating"
        print(f"{doing} {TARGETS[name].module} ...", file=sys.stderr, flush=True)
        results.append(run_one(name, TARGETS[name], args.timeout, args.again, args.report))
        if not args.json:
            _print(results[-1])
    if args.json:
        print(json.dumps(results, indent=2))
    below = [r for r in results if r["rate"] is None or r["rate"] < 0.9]
    return 1 if below else 0


def _print(result: dict) -> None:
    rate = "n/a" if result["rate"] is None else f"{100 * result['rate']:.1f}%"
    print(
        f"{result['module']:32} killed {result['killed']}/{result['counted']} = {rate}"
        f"  (equivalent {len(result['equivalent'])}, {result['seconds']} s)"
        + (
            f"  [{result['presentation']} presentation mutants not run]"
            if result["presentation"]
            else ""
        )
        + (f"  [{result['note']}]" if result["note"] else "")
    )
    for survivor in result["survivors"]:
        print(f"    survived: {survivor}")
    for name in result["equivalent"]:
        print(f"    equivalent: {name}: {excluded(name)}")
    for name in result["stale"]:
        print(f"    stale equivalent (killed, or no longer made): {name}")


if __name__ == "__main__":
    sys.exit(main())
