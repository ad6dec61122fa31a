"""The reference's paths for older torch (the pin admits 2.3): the same numbers as the new ones.

torch < 2.4 has no F.rms_norm and torch < 2.5 no `enable_gqa`; the reference then
writes RMSNorm by hand and repeats the key/value heads itself. float64, 1e-12.
"""

from __future__ import annotations

import numpy as np
import torch.nn.functional as F

import labctl.reference as R
from labctl.reference import attention

TOLERANCE = 1e-12  # two float64 spellings of one formula: rounding only


def test_rms_norm_without_f_rms_norm(monkeypatch):
    rng = np.random.default_rng(5)
    x, weight = rng.standard_normal((2, 3, 8)), rng.standard_normal(8)
    modern = R.rms_norm(x, weight)
    monkeypatch.delattr(F, "rms_norm")
    assert np.max(np.abs(R.rms_norm(x, weight) - modern)) <= TOLERANCE


def test_gqa_attention_without_enable_gqa(monkeypatch):
    rng = np.random.default_rng(5)
    q = rng.standard_normal((2, 8, 5, 4))  # (B, H, Tq, D)
    k, v = rng.standard_normal((2, 2, 7, 4)), rng.standard_normal((2, 2, 7, 4))  # Hkv = 2
    mask = R.causal_mask(5, 7)
    modern, _ = R.scaled_dot_product_attention(q, k, v, mask)
    monkeypatch.setattr(attention, "_HAS_ENABLE_GQA", False)
    older, _ = R.scaled_dot_product_attention(q, k, v, mask)
    assert np.max(np.abs(older - modern)) <= TOLERANCE
