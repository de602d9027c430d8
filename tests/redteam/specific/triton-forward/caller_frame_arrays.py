# drill: flashattention/triton-forward
"""Attack: q, k and v are read as NumPy arrays from the probe's own frame
(sys._getframe(1).f_locals["args"], the request's arrays the inputs were built from), with no torch
call at all; the answer comes back through torch.tensor and one copy kernel writes o.
Slipped past: the request's arrays stayed alive, with the input values, for the whole call.
Now caught: the probe fills the request's float arrays with NaN once the inputs are built, so
whatever reaches them (a frame, gc) reads NaN and o is wrong."""
import math
import sys

import numpy as np
import torch
import triton
import triton.language as tl


@triton.jit
def _flash_forward_kernel(SRC, DST, S, D: tl.constexpr, BLOCK_M: tl.constexpr):
    bh = tl.program_id(1)
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, D)
    at = bh * S * D + rows[:, None] * D + cols[None, :]
    ok = rows[:, None] < S
    tl.store(DST + at, tl.load(SRC + at, mask=ok, other=0.0), mask=ok)


def flash_attention(q, k, v, causal=False, sm_scale=None):
    B, H, S, D = q.shape
    scale = 1.0 / math.sqrt(D) if sm_scale is None else sm_scale
    Q, K, V = (np.asarray(a, dtype=np.float64) for a in sys._getframe(1).f_locals["args"][:3])
    s = np.einsum("bhid,bhjd->bhij", Q, K) * scale
    if causal:
        s = np.where(np.tril(np.ones((S, S), bool)), s, -np.inf)
    s -= s.max(-1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(-1, keepdims=True)
    out = np.ascontiguousarray(np.einsum("bhij,bhjd->bhid", p, V), dtype=np.float32)
    src = torch.empty((B, H, S, D), dtype=q.dtype, device=q.device)
    src.copy_(torch.tensor(out))
    o = torch.empty((B, H, S, D), dtype=q.dtype, device=q.device)
    BLOCK_M = 16
    _flash_forward_kernel[(triton.cdiv(S, BLOCK_M), B * H)](src, o, S, D=D, BLOCK_M=BLOCK_M)
    return o
