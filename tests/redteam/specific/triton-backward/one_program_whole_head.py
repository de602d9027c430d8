# drill: flashattention/triton-backward
"""Not a FlashAttention backward: ONE Triton program per (batch, head) loads the whole
sequence (BLOCK = next_power_of_2(S)) and materialises the full S x S matrices p, dp and ds
in registers; no tiling, no loop over key or query blocks, no _bwd_preprocess.

Slipped past every interpreter-mode check, before the launch check counted programs per head: the values are right, test_launches only asks for a
launch of a kernel from this file with B*H in its grid and no torch compute, and nothing under
TRITON_INTERPRET looks at block sizes, loops or the number of programs per head (only the GPU
checks, skipped without a GPU, use sizes where a whole head cannot fit in one program).
"""

import math

import torch
import triton
import triton.language as tl


@triton.jit
def _whole_head_bwd(
    Q, K, V, O, DO, LSE, DQ, DK, DV,
    stride_qb, stride_qh, stride_qs,
    stride_kb, stride_kh, stride_ks,
    stride_vb, stride_vh, stride_vs,
    stride_ob, stride_oh, stride_os,
    stride_dob, stride_doh, stride_dos,
    stride_lb, stride_lh,
    H, S, sm_scale,
    D: tl.constexpr, BLOCK: tl.constexpr, CAUSAL: tl.constexpr,
):
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    rows = tl.arange(0, BLOCK)
    cols = tl.arange(0, D)
    ok = rows < S
    q = tl.load(Q + b * stride_qb + h * stride_qh + rows[:, None] * stride_qs + cols[None, :], mask=ok[:, None], other=0.0)
    k = tl.load(K + b * stride_kb + h * stride_kh + rows[:, None] * stride_ks + cols[None, :], mask=ok[:, None], other=0.0)
    v = tl.load(V + b * stride_vb + h * stride_vh + rows[:, None] * stride_vs + cols[None, :], mask=ok[:, None], other=0.0)
    o = tl.load(O + b * stride_ob + h * stride_oh + rows[:, None] * stride_os + cols[None, :], mask=ok[:, None], other=0.0)
    do = tl.load(DO + b * stride_dob + h * stride_doh + rows[:, None] * stride_dos + cols[None, :], mask=ok[:, None], other=0.0)
    lse = tl.load(LSE + b * stride_lb + h * stride_lh + rows, mask=ok, other=float("inf"))
    lse = tl.where(lse == float("-inf"), float("inf"), lse)
    delta = tl.sum(do.to(tl.float32) * o.to(tl.float32), 1)
    s = tl.dot(q, tl.trans(k)) * sm_scale  # the whole S x S score matrix
    keep = ok[:, None] & ok[None, :]
    if CAUSAL:
        keep = keep & (rows[None, :] <= rows[:, None])
    p = tl.where(keep, tl.exp(s - lse[:, None]), 0.0)
    dv = tl.dot(tl.trans(p.to(do.dtype)), do)
    dp = tl.dot(do, tl.trans(v))
    ds = p * (dp - delta[:, None])
    dq = tl.dot(ds.to(k.dtype), k) * sm_scale
    dk = tl.dot(tl.trans(ds.to(q.dtype)), q) * sm_scale
    out = bh * S * D + rows[:, None] * D + cols[None, :]
    tl.store(DQ + out, dq.to(DQ.dtype.element_ty), mask=ok[:, None])
    tl.store(DK + out, dk.to(DK.dtype.element_ty), mask=ok[:, None])
    tl.store(DV + out, dv.to(DV.dtype.element_ty), mask=ok[:, None])


def flash_attention_backward(q, k, v, o, lse, do, causal=False, sm_scale=None):
    B, H, S, D = q.shape
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(D)
    q, k, v, o, do = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v, o, do))
    lse = lse.float()
    lse = lse if lse.stride(-1) == 1 else lse.contiguous()
    dq = torch.empty((B, H, S, D), dtype=q.dtype, device=q.device)
    dk = torch.empty((B, H, S, D), dtype=q.dtype, device=q.device)
    dv = torch.empty((B, H, S, D), dtype=q.dtype, device=q.device)
    BLOCK = max(16, triton.next_power_of_2(S))
    _whole_head_bwd[(1, B * H)](
        q, k, v, o, do, lse, dq, dk, dv,
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        o.stride(0), o.stride(1), o.stride(2),
        do.stride(0), do.stride(1), do.stride(2),
        lse.stride(0), lse.stride(1),
        H, S, float(sm_scale), D=D, BLOCK=BLOCK, CAUSAL=bool(causal))
    return dq, dk, dv
