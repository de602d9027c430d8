# drill: flashattention/triton-backward
# variant: FA2's two-kernel layout launched with grid lambdas of the launch's meta-parameters (grid = lambda META: (triton.cdiv(S, META["BLOCK_N"]), B * H)), block sizes as keyword constexprs, causal bounds as loop limits, ds scaled by sm_scale once before both dots
"""The FlashAttention backward with every grid written as a function of the block sizes.

Triton calls a grid lambda with the launch's meta-parameters, so the grid follows whatever
BLOCK_M / BLOCK_N the launch passes: the block sizes are written once, at the launch.
"""

import math

import torch
import triton
import triton.language as tl


@triton.jit
def _preprocess(O, DO, DELTA, so_b, so_h, so_s, sdo_b, sdo_h, sdo_s, H, S,
                D: tl.constexpr, BLOCK_M: tl.constexpr):
    bh = tl.program_id(1)
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, D)
    ok = rows < S
    o = tl.load(O + (bh // H) * so_b + (bh % H) * so_h + rows[:, None] * so_s + cols[None, :],
                mask=ok[:, None], other=0.0).to(tl.float32)
    do = tl.load(DO + (bh // H) * sdo_b + (bh % H) * sdo_h + rows[:, None] * sdo_s + cols[None, :],
                 mask=ok[:, None], other=0.0).to(tl.float32)
    tl.store(DELTA + bh * S + rows, tl.sum(o * do, axis=1), mask=ok)


@triton.jit
def _probs(q, k, lse, rows, keys, S, sm_scale, CAUSAL: tl.constexpr):
    """p = exp(q kᵀ · sm_scale - lse) for one [BLOCK_M, BLOCK_N] tile, 0 where the key is hidden."""
    s = tl.dot(q, tl.trans(k)) * sm_scale
    seen = (rows[:, None] < S) & (keys[None, :] < S) & (lse[:, None] != float("-inf"))
    if CAUSAL:
        seen = seen & (keys[None, :] <= rows[:, None])
    return tl.where(seen, tl.exp(s - tl.where(seen, lse[:, None], 0.0)), 0.0)


@triton.jit
def _dkdv(Q, K, V, DO, LSE, DELTA, DK, DV,
          sq_b, sq_h, sq_s, sk_b, sk_h, sk_s, sv_b, sv_h, sv_s, sdo_b, sdo_h, sdo_s, sl_b, sl_h,
          H, S, sm_scale, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    keys = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, D)
    k = tl.load(K + b * sk_b + h * sk_h + keys[:, None] * sk_s + cols[None, :], mask=keys[:, None] < S, other=0.0)
    v = tl.load(V + b * sv_b + h * sv_h + keys[:, None] * sv_s + cols[None, :], mask=keys[:, None] < S, other=0.0)
    dk = tl.zeros([BLOCK_N, D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, D], dtype=tl.float32)
    first = 0
    if CAUSAL:
        first = (tl.program_id(0) * BLOCK_N) // BLOCK_M * BLOCK_M
    for start in range(first, S, BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M)
        live = rows[:, None] < S
        q = tl.load(Q + b * sq_b + h * sq_h + rows[:, None] * sq_s + cols[None, :], mask=live, other=0.0)
        do = tl.load(DO + b * sdo_b + h * sdo_h + rows[:, None] * sdo_s + cols[None, :], mask=live, other=0.0)
        lse = tl.load(LSE + b * sl_b + h * sl_h + rows, mask=rows < S, other=float("-inf"))
        delta = tl.load(DELTA + bh * S + rows, mask=rows < S, other=0.0)
        p = _probs(q, k, lse, rows, keys, S, sm_scale, CAUSAL)
        dv += tl.dot(tl.trans(p.to(do.dtype)), do)
        ds = p * (tl.dot(do, tl.trans(v)) - delta[:, None]) * sm_scale
        dk += tl.dot(tl.trans(ds.to(q.dtype)), q)
    out = bh * S * D + keys[:, None] * D + cols[None, :]
    tl.store(DK + out, dk.to(DK.dtype.element_ty), mask=keys[:, None] < S)
    tl.store(DV + out, dv.to(DV.dtype.element_ty), mask=keys[:, None] < S)


@triton.jit
def _dq(Q, K, V, DO, LSE, DELTA, DQ,
        sq_b, sq_h, sq_s, sk_b, sk_h, sk_s, sv_b, sv_h, sv_s, sdo_b, sdo_h, sdo_s, sl_b, sl_h,
        H, S, sm_scale, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, D)
    live = rows[:, None] < S
    q = tl.load(Q + b * sq_b + h * sq_h + rows[:, None] * sq_s + cols[None, :], mask=live, other=0.0)
    do = tl.load(DO + b * sdo_b + h * sdo_h + rows[:, None] * sdo_s + cols[None, :], mask=live, other=0.0)
    lse = tl.load(LSE + b * sl_b + h * sl_h + rows, mask=rows < S, other=float("-inf"))
    delta = tl.load(DELTA + bh * S + rows, mask=rows < S, other=0.0)
    dq = tl.zeros([BLOCK_M, D], dtype=tl.float32)
    last = S
    if CAUSAL:
        last = tl.minimum((tl.program_id(0) + 1) * BLOCK_M, S)
    for start in range(0, last, BLOCK_N):
        keys = start + tl.arange(0, BLOCK_N)
        k = tl.load(K + b * sk_b + h * sk_h + keys[:, None] * sk_s + cols[None, :], mask=keys[:, None] < S, other=0.0)
        v = tl.load(V + b * sv_b + h * sv_h + keys[:, None] * sv_s + cols[None, :], mask=keys[:, None] < S, other=0.0)
        p = _probs(q, k, lse, rows, keys, S, sm_scale, CAUSAL)
        ds = p * (tl.dot(do, tl.trans(v)) - delta[:, None]) * sm_scale
        dq += tl.dot(ds.to(k.dtype), k)
    tl.store(DQ + bh * S * D + rows[:, None] * D + cols[None, :], dq.to(DQ.dtype.element_ty), mask=live)


def flash_attention_backward(q, k, v, o, lse, do, causal=False, sm_scale=None):
    B, H, S, D = q.shape
    assert lse.shape == (B, H, S) and D in (16, 32, 64, 128)
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(D)
    q, k, v, o, do = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v, o, do))
    lse = lse.float()
    lse = lse if lse.stride(-1) == 1 else lse.contiguous()
    dq, dk, dv = (torch.empty((B, H, S, D), dtype=q.dtype, device=q.device) for _ in range(3))
    delta = torch.empty((B, H, S), dtype=torch.float32, device=q.device)
    small, big = (32, 64) if q.is_cuda else (16, 32)

    _preprocess[lambda META: (triton.cdiv(S, META["BLOCK_M"]), B * H)](
        o, do, delta, *o.stride()[:3], *do.stride()[:3], H, S, D=D, BLOCK_M=big)
    args = (q, k, v, do, lse, delta)
    strides = (*q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *do.stride()[:3], lse.stride(0), lse.stride(1))
    _dkdv[lambda META: (triton.cdiv(S, META["BLOCK_N"]), B * H)](
        *args, dk, dv, *strides, H, S, float(sm_scale), D=D, BLOCK_M=small, BLOCK_N=big, CAUSAL=bool(causal))
    _dq[lambda META: (triton.cdiv(S, META["BLOCK_M"]), B * H)](
        *args, dq, *strides, H, S, float(sm_scale), D=D, BLOCK_M=big, BLOCK_N=small, CAUSAL=bool(causal))
    return dq, dk, dv
