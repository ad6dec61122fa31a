"""Faults beyond the course table, in contract order: softmax, the masks, attention, merge_heads."""

from __future__ import annotations

from labctl.faults.base import Fault
from labctl.i18n import N_

ATTENTION: tuple[Fault, ...] = (
    Fault(
        name="softmax-no-max",
        function="softmax",
        module="primitives",
        description=N_(
            "softmax does not subtract the max first: exp(1000) overflows to inf and "
            "inf / inf gives NaN"
        ),
        course=N_("Transformer 手撕与注意力机制 §03.5 数值稳定的 softmax：减去最大值防止 exp 溢出"),
        signal="finite",
        source="""
        def softmax(x, axis=-1):
            x = _as_float(x, "x")
            e = np.exp(x)  # no max subtracted
            return (e / np.sum(e, axis=axis, keepdims=True)).astype(_float_dtype(x), copy=False)
        """,
    ),
    Fault(
        name="softmax-blocked-nan",
        function="softmax",
        module="primitives",
        description=N_(
            "a slice that is all -inf (every key blocked) gives NaN: -inf - (-inf) is "
            "NaN, and the contract asks for zeros; shift by 0 where the max is -inf, and "
            "give a slice whose sum is 0 zeros"
        ),
        course=N_(
            "contract v1 conventions: a fully blocked row gets all-zero weights, never NaN; "
            "Transformer 手撕与注意力机制 §04 Causal Mask"
        ),
        signal="rows-sum",
        source="""
        def softmax(x, axis=-1):
            x = _as_float(x, "x")
            e = np.exp(x - np.max(x, axis=axis, keepdims=True))
            return (e / np.sum(e, axis=axis, keepdims=True)).astype(_float_dtype(x), copy=False)
        """,
    ),
    Fault(
        name="causal-top-left",
        function="causal_mask",
        module="primitives",
        description=N_(
            "the causal mask is aligned top-left (j > i, as PyTorch's is_causal): "
            "right when Tq == Tk, wrong for decode with a cache (Tq < Tk)"
        ),
        course=N_(
            "Transformer 手撕与注意力机制 §07 KV Cache; contract v1: causal alignment is bottom-right"
        ),
        source="""
        def causal_mask(t_q, t_k=None):
            t_q = _as_size(t_q, "t_q")
            t_k = t_q if t_k is None else _as_size(t_k, "t_k")
            return np.arange(t_k)[None, :] > np.arange(t_q)[:, None]
        """,
    ),
    Fault(
        name="window-off-by-one",
        function="sliding_window_mask",
        module="primitives",
        description=N_(
            "the sliding window sees keys p - window .. p: window + 1 keys, the current "
            "token not counted in the window"
        ),
        course=N_("第8章 · Attention 与 Transformer Block 阶段五 滑动窗口注意力: [i-W+1, i]"),
        source="""
        def sliding_window_mask(t_q, window, t_k=None):
            t_q = _as_size(t_q, "t_q")
            window = _as_size(window, "window", minimum=1)
            t_k = t_q if t_k is None else _as_size(t_k, "t_k")
            p = (t_k - t_q) + np.arange(t_q)[:, None]
            j = np.arange(t_k)[None, :]
            return (j > p) | (j < p - window)
        """,
    ),
    Fault(
        name="window-unchecked",
        function="sliding_window_mask",
        module="primitives",
        description=N_(
            "window < 1 is accepted and gives a mask that blocks every key, instead of "
            "a ValueError naming window"
        ),
        course=N_("contract v1 Bad input: window < 1"),
        signal="bad-input",
        source="""
        def sliding_window_mask(t_q, window, t_k=None):
            t_q = _as_size(t_q, "t_q")
            t_k = t_q if t_k is None else _as_size(t_k, "t_k")
            p = (t_k - t_q) + np.arange(t_q)[:, None]
            j = np.arange(t_k)[None, :]
            return (j > p) | (j < p - int(window) + 1)
        """,
    ),
    Fault(
        name="padding-off-by-one",
        function="padding_mask",
        module="primitives",
        description=N_(
            "the padding mask blocks positions > length instead of >= length: the "
            "first pad token stays visible"
        ),
        course=N_("contract v1 padding_mask: True where key position >= lengths[b]"),
        source="""
        def padding_mask(lengths, t):
            lengths = np.asarray(lengths)
            t = _as_size(t, "t")
            return (np.arange(t)[None, :] > lengths[:, None])[:, None, None, :]
        """,
    ),
    Fault(
        name="mask-after-softmax",
        function="scaled_dot_product_attention",
        module="attention",
        description=N_(
            "the mask zeroes blocked weights after the softmax instead of -inf before "
            "it: rows no longer sum to 1 and the future still moves the denominator"
        ),
        course=N_(
            "Transformer 手撕与注意力机制 §04 Causal Mask: 不是把 mask 位置的权重设为 0（在 softmax 之后）"
        ),
        signal="rows-sum",
        source="""
        def scaled_dot_product_attention(q, k, v, mask=None, scale=None):
            q, k, v, n_rep = _check_qkv(q, k, v)
            k = repeat_kv(k, n_rep)
            v = repeat_kv(v, n_rep)
            weights = softmax((q @ k.swapaxes(-1, -2)) * _scale(scale, q.shape[-1]), axis=-1)
            if mask is not None:
                weights = np.where(np.broadcast_to(np.asarray(mask), weights.shape), 0.0, weights)
            dtype = _float_dtype(q)
            return (weights @ v).astype(dtype, copy=False), weights.astype(dtype, copy=False)
        """,
    ),
    Fault(
        name="merge-heads-imports-torch",
        function="merge_heads",
        module="primitives",
        description=N_(
            "merge_heads tries `import torch` for a faster path (and falls back to "
            "NumPy): the clean room breaks the import policy"
        ),
        course=N_(
            "第8章 · Attention 与 Transformer Block L3 clean-room 要求: 不得导入课程参考实现"
        ),
        signal="import-policy",
        source="""
        def merge_heads(x):
            try:
                import torch  # a faster path when torch is there
            except ImportError:
                torch = None
            x = _as_float(x, "x", ndim=4)
            B, H, T, D = x.shape
            return np.ascontiguousarray(x.transpose(0, 2, 1, 3)).reshape(B, T, H * D)
        """,
    ),
)
