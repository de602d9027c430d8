# drill: flashattention/triton-backward
"""Attack: stored_scores.py with p and ds kept where no count looks: drill puts 2^17 elements of
guard memory after every torch.empty allocation (to see stores past the end) and leaves the guard
out of the scratch count. Four one-element buffers lend their guards to the S x S p and ds, and a
last kernel writes the poison back, so the post-hoc overrun check sees nothing. Caught by the
probe's store watch under the interpreter: every address a kernel stores to is recorded, and a
store into an allocation's guard (or into an input's memory) fails the call (as_grads).
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
def _scores_to_hbm(Q, K, V, DO, LSE, Delta, P0, P1, DS0, DS1,
                   stride_qb, stride_qh, stride_qs, stride_kb, stride_kh, stride_ks,
                   stride_vb, stride_vh, stride_vs, stride_dob, stride_doh, stride_dos,
                   stride_lb, stride_lh, H, S, sm_scale,
                   D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
                   G: tl.constexpr):
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
        m = ok[:, None] & kok[None, :]
        tl.store(P0 + 1 + at, p, mask=m & (at < G))
        tl.store(P1 + 1 + at - G, p, mask=m & (at >= G))
        tl.store(DS0 + 1 + at, ds, mask=m & (at < G))
        tl.store(DS1 + 1 + at - G, ds, mask=m & (at >= G))


@triton.jit
def _dkdv_from_hbm(Q, DO, P0, P1, DS0, DS1, DK, DV, stride_qb, stride_qh, stride_qs, stride_dob, stride_doh, stride_dos,
                   H, S, sm_scale, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, G: tl.constexpr):
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
        p = tl.load(P0 + 1 + at, mask=m & (at < G), other=0.0) + tl.load(P1 + 1 + at - G, mask=m & (at >= G), other=0.0)
        ds = tl.load(DS0 + 1 + at, mask=m & (at < G), other=0.0) + tl.load(DS1 + 1 + at - G, mask=m & (at >= G), other=0.0)
        dv += tl.dot(tl.trans(p.to(do.dtype)), do)
        dk += tl.dot(tl.trans(ds.to(q.dtype)), q)
    out = bh * S * D + keys[:, None] * D + cols[None, :]
    tl.store(DK + out, (dk * sm_scale).to(DK.dtype.element_ty), mask=kok[:, None])
    tl.store(DV + out, dv.to(DV.dtype.element_ty), mask=kok[:, None])


@triton.jit
def _dq_from_hbm(K, DS0, DS1, DQ, stride_kb, stride_kh, stride_ks, H, S, sm_scale,
                 D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, G: tl.constexpr):
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
        at = bh * S * S + rows[:, None] * S + keys[None, :]
        m = ok[:, None] & kok[None, :]
        ds = tl.load(DS0 + 1 + at, mask=m & (at < G), other=0.0) + tl.load(DS1 + 1 + at - G, mask=m & (at >= G), other=0.0)
        dq += tl.dot(ds.to(k.dtype), k)
    tl.store(DQ + bh * S * D + rows[:, None] * D + cols[None, :], (dq * sm_scale).to(DQ.dtype.element_ty),
             mask=ok[:, None])


@triton.jit
def _restore(BUF, N, BLOCK: tl.constexpr):
    # Put the poison back where the scores were, so the guard looks untouched afterwards.
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(BUF + 1 + i, tl.full([BLOCK], -32768.0, tl.float32), mask=i < N)


def flash_attention_backward(q, k, v, o, lse, do, causal=False, sm_scale=None):
    B, H, S, D = q.shape
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(D)
    q, k, v, o, do = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v, o, do))
    lse = lse.float()
    lse = lse if lse.stride(-1) == 1 else lse.contiguous()
    dq, dk, dv = (torch.empty((B, H, S, D), dtype=q.dtype, device=q.device) for _ in range(3))
    delta = torch.empty((B, H, S), dtype=torch.float32, device=q.device)
    # Four one-element buffers: what lies after each of them holds the scores.
    p0, p1, ds0, ds1 = (torch.empty((1,), dtype=torch.float32, device=q.device) for _ in range(4))
    G = 1 << 17
    BM, BN = 16, 16
    _bwd_preprocess[(triton.cdiv(S, BM), B * H)](
        o, do, delta, o.stride(0), o.stride(1), o.stride(2), do.stride(0), do.stride(1), do.stride(2),
        H, S, D=D, BLOCK_M=BM)
    _scores_to_hbm[(triton.cdiv(S, BM), B * H)](
        q, k, v, do, lse, delta, p0, p1, ds0, ds1,
        q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2), do.stride(0), do.stride(1), do.stride(2),
        lse.stride(0), lse.stride(1), H, S, float(sm_scale), D=D, BLOCK_M=BM, BLOCK_N=BN, CAUSAL=bool(causal), G=G)
    _dkdv_from_hbm[(triton.cdiv(S, BN), B * H)](
        q, do, p0, p1, ds0, ds1, dk, dv, q.stride(0), q.stride(1), q.stride(2), do.stride(0), do.stride(1), do.stride(2),
        H, S, float(sm_scale), D=D, BLOCK_M=BM, BLOCK_N=BN, G=G)
    _dq_from_hbm[(triton.cdiv(S, BM), B * H)](
        k, ds0, ds1, dq, k.stride(0), k.stride(1), k.stride(2), H, S, float(sm_scale), D=D, BLOCK_M=BM, BLOCK_N=BN, G=G)
    n = B * H * S * S
    for buf, cnt in ((p0, min(n, G)), (p1, max(0, n - G)), (ds0, min(n, G)), (ds1, max(0, n - G))):
        if cnt:
            _restore[(triton.cdiv(cnt, 1024),)](buf, cnt, BLOCK=1024)
    return dq, dk, dv
