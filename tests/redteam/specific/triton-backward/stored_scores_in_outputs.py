# drill: flashattention/triton-backward
"""Attack: stored_scores.py with p and ds hidden in the outputs' memory: one flat buffer holds
dq, dk, dv and then p and ds, and only [B, H, S, D] views of its start are returned. A count
of extra memory that skipped every storage an output lives in would miss it. Caught by
test_scores_stay_on_chip: an output's storage counts whole, less only the output's own elements.
"""

import math

import torch
import triton
import triton.language as tl


@triton.jit
def _bwd_preprocess(O, DO, Delta, stride_ob, stride_oh, stride_os, stride_dob, stride_doh, stride_dos,
                    H, S, D: tl.constexpr, BLOCK_M: tl.constexpr):
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, D)
    ok = rows < S
    o = tl.load(O + b * stride_ob + h * stride_oh + rows[:, None] * stride_os + cols[None, :], mask=ok[:, None], other=0.0)
    do = tl.load(DO + b * stride_dob + h * stride_doh + rows[:, None] * stride_dos + cols[None, :], mask=ok[:, None], other=0.0)
    tl.store(Delta + bh * S + rows, tl.sum(o.to(tl.float32) * do.to(tl.float32), 1), mask=ok)


@triton.jit
def _scores_to_hbm(Q, K, V, DO, LSE, Delta, P, DS,
                   stride_qb, stride_qh, stride_qs, stride_kb, stride_kh, stride_ks,
                   stride_vb, stride_vh, stride_vs, stride_dob, stride_doh, stride_dos,
                   stride_lb, stride_lh, H, S, sm_scale,
                   D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    # Tiled, but every p and ds block is written to an S x S buffer in global memory.
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, D)
    ok = rows < S
    q = tl.load(Q + b * stride_qb + h * stride_qh + rows[:, None] * stride_qs + cols[None, :], mask=ok[:, None], other=0.0)
    do = tl.load(DO + b * stride_dob + h * stride_doh + rows[:, None] * stride_dos + cols[None, :], mask=ok[:, None], other=0.0)
    lse = tl.load(LSE + b * stride_lb + h * stride_lh + rows, mask=ok, other=float("inf"))
    lse = tl.where(lse == float("-inf"), float("inf"), lse)
    delta = tl.load(Delta + bh * S + rows, mask=ok, other=0.0)
    for start_n in range(0, S, BLOCK_N):
        keys = start_n + tl.arange(0, BLOCK_N)
        kok = keys < S
        k = tl.load(K + b * stride_kb + h * stride_kh + keys[:, None] * stride_ks + cols[None, :], mask=kok[:, None], other=0.0)
        v = tl.load(V + b * stride_vb + h * stride_vh + keys[:, None] * stride_vs + cols[None, :], mask=kok[:, None], other=0.0)
        keep = kok[None, :] & ok[:, None]
        if CAUSAL:
            keep = keep & (keys[None, :] <= rows[:, None])
        p = tl.where(keep, tl.exp(tl.dot(q, tl.trans(k)) * sm_scale - lse[:, None]), 0.0)
        ds = p * (tl.dot(do, tl.trans(v)) - delta[:, None])
        at = bh * S * S + rows[:, None] * S + keys[None, :]
        tl.store(P + at, p, mask=ok[:, None] & kok[None, :])
        tl.store(DS + at, ds, mask=ok[:, None] & kok[None, :])


@triton.jit
def _dkdv_from_hbm(Q, DO, P, DS, DK, DV, stride_qb, stride_qh, stride_qs, stride_dob, stride_doh, stride_dos,
                   H, S, sm_scale, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid_n = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    keys = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    kok = keys < S
    cols = tl.arange(0, D)
    dk = tl.zeros([BLOCK_N, D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, D], dtype=tl.float32)
    for start_m in range(0, S, BLOCK_M):
        rows = start_m + tl.arange(0, BLOCK_M)
        ok = rows < S
        q = tl.load(Q + b * stride_qb + h * stride_qh + rows[:, None] * stride_qs + cols[None, :], mask=ok[:, None], other=0.0)
        do = tl.load(DO + b * stride_dob + h * stride_doh + rows[:, None] * stride_dos + cols[None, :], mask=ok[:, None], other=0.0)
        at = bh * S * S + rows[:, None] * S + keys[None, :]
        m = ok[:, None] & kok[None, :]
        p = tl.load(P + at, mask=m, other=0.0)
        ds = tl.load(DS + at, mask=m, other=0.0)
        dv += tl.dot(tl.trans(p.to(do.dtype)), do)
        dk += tl.dot(tl.trans(ds.to(q.dtype)), q)
    out = bh * S * D + keys[:, None] * D + cols[None, :]
    tl.store(DK + out, (dk * sm_scale).to(DK.dtype.element_ty), mask=kok[:, None])
    tl.store(DV + out, dv.to(DV.dtype.element_ty), mask=kok[:, None])


@triton.jit
def _dq_from_hbm(K, DS, DQ, stride_kb, stride_kh, stride_ks, H, S, sm_scale,
                 D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    ok = rows < S
    cols = tl.arange(0, D)
    dq = tl.zeros([BLOCK_M, D], dtype=tl.float32)
    for start_n in range(0, S, BLOCK_N):
        keys = start_n + tl.arange(0, BLOCK_N)
        kok = keys < S
        k = tl.load(K + b * stride_kb + h * stride_kh + keys[:, None] * stride_ks + cols[None, :], mask=kok[:, None], other=0.0)
        ds = tl.load(DS + bh * S * S + rows[:, None] * S + keys[None, :], mask=ok[:, None] & kok[None, :], other=0.0)
        dq += tl.dot(ds.to(k.dtype), k)
    tl.store(DQ + bh * S * D + rows[:, None] * D + cols[None, :], (dq * sm_scale).to(DQ.dtype.element_ty),
             mask=ok[:, None])


def flash_attention_backward(q, k, v, o, lse, do, causal=False, sm_scale=None):
    B, H, S, D = q.shape
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(D)
    q, k, v, o, do = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v, o, do))
    lse = lse.float()
    lse = lse if lse.stride(-1) == 1 else lse.contiguous()
    # One buffer: the three gradients first, then p and ds. Only the gradients are returned, as
    # views, so p and ds live in the outputs' own memory.
    n, m = B * H * S * D, B * H * S * S
    buf = torch.empty((3 * n + 2 * m,), dtype=torch.float32, device=q.device)
    dq, dk, dv = (buf[i * n:(i + 1) * n].view(B, H, S, D) for i in range(3))
    p = buf[3 * n:3 * n + m].view(B * H, S, S)
    ds = buf[3 * n + m:].view(B * H, S, S)
    delta = torch.empty((B, H, S), dtype=torch.float32, device=q.device)
    BM, BN = 16, 16
    _bwd_preprocess[(triton.cdiv(S, BM), B * H)](
        o, do, delta, o.stride(0), o.stride(1), o.stride(2), do.stride(0), do.stride(1), do.stride(2),
        H, S, D=D, BLOCK_M=BM)
    _scores_to_hbm[(triton.cdiv(S, BM), B * H)](
        q, k, v, do, lse, delta, p, ds,
        q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2), do.stride(0), do.stride(1), do.stride(2),
        lse.stride(0), lse.stride(1), H, S, float(sm_scale), D=D, BLOCK_M=BM, BLOCK_N=BN, CAUSAL=bool(causal))
    _dkdv_from_hbm[(triton.cdiv(S, BN), B * H)](
        q, do, p, ds, dk, dv, q.stride(0), q.stride(1), q.stride(2), do.stride(0), do.stride(1), do.stride(2),
        H, S, float(sm_scale), D=D, BLOCK_M=BM, BLOCK_N=BN)
    _dq_from_hbm[(triton.cdiv(S, BM), B * H)](
        k, ds, dq, k.stride(0), k.stride(1), k.stride(2), H, S, float(sm_scale), D=D, BLOCK_M=BM, BLOCK_N=BN)
    return dq, dk, dv
