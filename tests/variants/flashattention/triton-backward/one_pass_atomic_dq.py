# drill: flashattention/triton-backward
# variant: one kernel per key block computes dK/dV and adds its share of dQ with fp32 atomics
"""The FlashAttention backward as one pass over key blocks, dQ accumulated with atomics.

_bwd_delta computes D = rowsum(dO ∘ O) per query row. _bwd_fused then owns a key block:
it keeps K_j, V_j, dK_j, dV_j on chip, walks the query blocks that see it and, for each,
adds dS_ij K_j · sm_scale into an fp32 dQ buffer with tl.atomic_add (every key block adds
to the same dQ rows). _cast_dq writes that buffer out in the inputs' dtype.
"""

import math

import torch
import triton
import triton.language as tl


@triton.jit
def _bwd_delta(O, DO, Delta, so_b, so_h, so_s, sd_b, sd_h, sd_s, H, S,
               D: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    bh = tl.program_id(1)
    rows = pid * BLOCK + tl.arange(0, BLOCK)
    cols = tl.arange(0, D)
    ok = rows < S
    o = tl.load(O + (bh // H) * so_b + (bh % H) * so_h + rows[:, None] * so_s + cols[None, :],
                mask=ok[:, None], other=0.0).to(tl.float32)
    do = tl.load(DO + (bh // H) * sd_b + (bh % H) * sd_h + rows[:, None] * sd_s + cols[None, :],
                 mask=ok[:, None], other=0.0).to(tl.float32)
    tl.store(Delta + bh * S + rows, tl.sum(o * do, axis=1), mask=ok)


@triton.jit
def _bwd_fused(Q, K, V, DO, LSE, Delta, DQ, DK, DV,
               sq_b, sq_h, sq_s, sk_b, sk_h, sk_s, sv_b, sv_h, sv_s, sd_b, sd_h, sd_s, sl_b, sl_h,
               H, S, scale, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, CAUSAL: tl.constexpr):
    j = tl.program_id(0)
    bh = tl.program_id(1)
    b, h = bh // H, bh % H
    keys = j * BN + tl.arange(0, BN)
    cols = tl.arange(0, D)
    key_ok = keys < S
    kt = tl.load(K + b * sk_b + h * sk_h + keys[:, None] * sk_s + cols[None, :], mask=key_ok[:, None], other=0.0)
    vt = tl.load(V + b * sv_b + h * sv_h + keys[:, None] * sv_s + cols[None, :], mask=key_ok[:, None], other=0.0)
    acc_k = tl.zeros([BN, D], dtype=tl.float32)
    acc_v = tl.zeros([BN, D], dtype=tl.float32)
    start = (j * BN) // BM * BM if CAUSAL else 0
    for i0 in range(start, S, BM):
        rows = i0 + tl.arange(0, BM)
        ok = rows < S
        qt = tl.load(Q + b * sq_b + h * sq_h + rows[:, None] * sq_s + cols[None, :], mask=ok[:, None], other=0.0)
        dot = tl.load(DO + b * sd_b + h * sd_h + rows[:, None] * sd_s + cols[None, :], mask=ok[:, None], other=0.0)
        m = tl.load(LSE + b * sl_b + h * sl_h + rows, mask=ok, other=float("inf"))
        m = tl.where(m == float("-inf"), float("inf"), m)
        dd = tl.load(Delta + bh * S + rows, mask=ok, other=0.0)
        p = tl.exp(tl.dot(qt, tl.trans(kt)) * scale - m[:, None])
        seen = key_ok[None, :] & ok[:, None]
        if CAUSAL:
            seen = seen & (keys[None, :] <= rows[:, None])
        p = tl.where(seen, p, 0.0)
        acc_v += tl.dot(tl.trans(p), dot.to(tl.float32))
        ds = p * (tl.dot(dot, tl.trans(vt)) - dd[:, None])
        acc_k += tl.dot(tl.trans(ds), qt.to(tl.float32))
        part = tl.dot(ds, kt.to(tl.float32)) * scale
        tl.atomic_add(DQ + bh * S * D + rows[:, None] * D + cols[None, :], part, mask=ok[:, None])
    out = bh * S * D + keys[:, None] * D + cols[None, :]
    tl.store(DK + out, (acc_k * scale).to(DK.dtype.element_ty), mask=key_ok[:, None])
    tl.store(DV + out, acc_v.to(DV.dtype.element_ty), mask=key_ok[:, None])


@triton.jit
def _cast_dq(SRC, DST, S, D: tl.constexpr, BLOCK: tl.constexpr):
    bh = tl.program_id(1)
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    cols = tl.arange(0, D)
    at = bh * S * D + rows[:, None] * D + cols[None, :]
    ok = rows[:, None] < S
    tl.store(DST + at, tl.load(SRC + at, mask=ok, other=0.0).to(DST.dtype.element_ty), mask=ok)


def flash_attention_backward(q, k, v, o, lse, do, causal=False, sm_scale=None):
    B, H, S, D = q.shape
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(D)
    q, k, v, o, do = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v, o, do))
    lse = lse.float()
    lse = lse if lse.stride(-1) == 1 else lse.contiguous()
    BM, BN = 16, 16
    delta = torch.empty((B, H, S), dtype=torch.float32, device=q.device)
    dq_acc = torch.zeros((B, H, S, D), dtype=torch.float32, device=q.device)
    dq = torch.empty((B, H, S, D), dtype=q.dtype, device=q.device)
    dk = torch.empty((B, H, S, D), dtype=q.dtype, device=q.device)
    dv = torch.empty((B, H, S, D), dtype=q.dtype, device=q.device)
    _bwd_delta[(triton.cdiv(S, BM), B * H)](o, do, delta, *o.stride()[:3], *do.stride()[:3], H, S, D=D, BLOCK=BM)
    _bwd_fused[(triton.cdiv(S, BN), B * H)](
        q, k, v, do, lse, delta, dq_acc, dk, dv, *q.stride()[:3], *k.stride()[:3], *v.stride()[:3],
        *do.stride()[:3], lse.stride(0), lse.stride(1), H, S, float(sm_scale),
        D=D, BM=BM, BN=BN, CAUSAL=bool(causal))
    _cast_dq[(triton.cdiv(S, BM), B * H)](dq_acc, dq, S, D=D, BLOCK=BM)
    return dq, dk, dv
