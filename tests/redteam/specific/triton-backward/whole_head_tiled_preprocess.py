# drill: flashattention/triton-backward
"""Attack: one_program_whole_head.py with a decoy. A real, tiled _bwd_preprocess runs over
(cdiv(S, 16), B*H); then ONE program per head loads the whole sequence and builds the full
S x S p, dp and ds in registers. Slipped past test_launches, which only asks that SOME launch of
the file cuts S into blocks (the preprocess does) and compares values at S <= 96, where a
whole-head tile is small. Caught by test_scores_stay_on_chip: under the interpreter the probe
records the largest block any program builds (the TensorHandle sizes), and at S = 384 a
384 x 384 block is far past the 128 x 128 limit.
"""

import math

import torch
import triton
import triton.language as tl


@triton.jit
def _bwd_preprocess(
    O, DO, Delta,
    stride_ob, stride_oh, stride_os,
    stride_dob, stride_doh, stride_dos,
    H, S,
    D: tl.constexpr, BLOCK_M: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // H
    h = pid_bh % H
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    row_ok = offs_m < S
    o = tl.load(O + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_os + offs_d[None, :],
                mask=row_ok[:, None], other=0.0).to(tl.float32)
    do = tl.load(DO + b * stride_dob + h * stride_doh + offs_m[:, None] * stride_dos + offs_d[None, :],
                 mask=row_ok[:, None], other=0.0).to(tl.float32)
    tl.store(Delta + pid_bh * S + offs_m, tl.sum(o * do, 1), mask=row_ok)


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
    s = tl.dot(q, tl.trans(k)) * sm_scale
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
    delta = torch.empty((B, H, S), dtype=torch.float32, device=q.device)
    _bwd_preprocess[(triton.cdiv(S, 16), B * H)](
        o, do, delta,
        o.stride(0), o.stride(1), o.stride(2),
        do.stride(0), do.stride(1), do.stride(2),
        H, S, D=D, BLOCK_M=16)
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
