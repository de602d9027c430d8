# drill: flashattention/{{ID}}
"""Attack: no FlashAttention at all. A first kernel of this file runs one program per (batch,
head) over the whole S×S score matrix at once (plain softmax, no key loop) into a scratch
buffer; then _flash_forward_kernel, launched over (cdiv(S, BLOCK_M), B·H), only copies that
buffer into o. Slipped past because check_kernel_work read the grid of the last launch only;
it now fails unless exactly one launch, of a kernel of this file, happens in the call.
"""


import math

import torch
import triton
import triton.language as tl


@triton.jit
def _naive_kernel(Q, K, V, O, stride_qb, stride_qh, stride_qs, stride_kb, stride_kh, stride_ks,
                  stride_vb, stride_vh, stride_vs, H, S, sm_scale,
                  D: tl.constexpr, SP: tl.constexpr, CAUSAL: tl.constexpr):
    pid = tl.program_id(0)
    b = pid // H
    h = pid % H
    rows = tl.arange(0, SP)
    dims = tl.arange(0, D)
    ok = rows < S
    q = tl.load(Q + b * stride_qb + h * stride_qh + rows[:, None] * stride_qs + dims[None, :], mask=ok[:, None], other=0.0)
    k = tl.load(K + b * stride_kb + h * stride_kh + rows[:, None] * stride_ks + dims[None, :], mask=ok[:, None], other=0.0)
    v = tl.load(V + b * stride_vb + h * stride_vh + rows[:, None] * stride_vs + dims[None, :], mask=ok[:, None], other=0.0)
    s = tl.dot(q, tl.trans(k)) * sm_scale  # the whole S x S score matrix at once
    keep = ok[None, :]
    if CAUSAL:
        keep = keep & (rows[None, :] <= rows[:, None])
    s = tl.where(keep, s, float("-inf"))
    p = tl.exp(s - tl.max(s, 1)[:, None])
    o = tl.dot(p, v) / tl.sum(p, 1)[:, None]
    tl.store(O + pid * S * D + rows[:, None] * D + dims[None, :], o, mask=ok[:, None])


@triton.jit
def _flash_forward_kernel(T, O, stride_ob, stride_oh, stride_os, H, S,
                          D: tl.constexpr, BLOCK_M: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, D)
    ok = rows < S
    x = tl.load(T + pid_bh * S * D + rows[:, None] * D + dims[None, :], mask=ok[:, None], other=0.0)
    b = pid_bh // H
    h = pid_bh % H
    tl.store(O + b * stride_ob + h * stride_oh + rows[:, None] * stride_os + dims[None, :], x, mask=ok[:, None])


def flash_attention(q, k, v, causal=False, sm_scale=None):
    B, H, S, D = q.shape
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(D)
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    scratch = torch.empty((B, H, S, D), dtype=q.dtype, device=q.device)
    o = torch.empty((B, H, S, D), dtype=q.dtype, device=q.device)
    SP = max(16, triton.next_power_of_2(S))
    _naive_kernel[(B * H,)](q, k, v, scratch, q.stride(0), q.stride(1), q.stride(2),
                            k.stride(0), k.stride(1), k.stride(2), v.stride(0), v.stride(1), v.stride(2),
                            H, S, float(sm_scale), D=D, SP=SP, CAUSAL=bool(causal))
    BLOCK_M = 32
    _flash_forward_kernel[(triton.cdiv(S, BLOCK_M), B * H)](scratch, o, o.stride(0), o.stride(1), o.stride(2), H, S,
                                                          D=D, BLOCK_M=BLOCK_M)
    return o
