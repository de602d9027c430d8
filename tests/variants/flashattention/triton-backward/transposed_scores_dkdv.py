# drill: flashattention/triton-backward
# variant: the dK/dV kernel works on transposed blocks (sᵀ = K·Qᵀ with Q loaded as [D, BLOCK_M], as Triton's tutorial does); the dQ kernel loads K and V already transposed
"""The FlashAttention backward in Triton with the dK/dV kernel in key-major form: it loads each
query block as Qᵀ [D, BLOCK_M] through its pointers and builds sᵀ, pᵀ, dpᵀ and dsᵀ
[BLOCK_N, BLOCK_M] directly, so dV += pᵀ dO and dK += dsᵀ Q need no transposes of p or ds.
The dQ kernel reads Kᵀ and Vᵀ [D, BLOCK_N] by pointers. Same three kernels and grids."""

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
    bh = tl.program_id(1)
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    dd = tl.arange(0, D)
    ok = rows[:, None] < S
    o = tl.load(O + (bh // H) * stride_ob + (bh % H) * stride_oh + rows[:, None] * stride_os + dd[None, :],
                mask=ok, other=0.0)
    do = tl.load(DO + (bh // H) * stride_dob + (bh % H) * stride_doh + rows[:, None] * stride_dos + dd[None, :],
                 mask=ok, other=0.0)
    tl.store(Delta + bh * S + rows, tl.sum(o.to(tl.float32) * do.to(tl.float32), axis=1), mask=rows < S)


@triton.jit
def _bwd_dkdv_kernel(
    Q, K, V, DO, LSE, Delta, DK, DV,
    stride_qb, stride_qh, stride_qs,
    stride_kb, stride_kh, stride_ks,
    stride_vb, stride_vh, stride_vs,
    stride_dob, stride_doh, stride_dos,
    stride_lb, stride_lh,
    H, S, sm_scale,
    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
):
    pid_n = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    keys = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    dd = tl.arange(0, D)
    key_ok = keys < S
    k = tl.load(K + b * stride_kb + h * stride_kh + keys[:, None] * stride_ks + dd[None, :],
                mask=key_ok[:, None], other=0.0)
    v = tl.load(V + b * stride_vb + h * stride_vh + keys[:, None] * stride_vs + dd[None, :],
                mask=key_ok[:, None], other=0.0)
    dk = tl.zeros([BLOCK_N, D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, D], dtype=tl.float32)
    start = 0
    if CAUSAL:
        start = (pid_n * BLOCK_N) // BLOCK_M * BLOCK_M  # the query block holding this block's first key
    for m0 in range(start, S, BLOCK_M):
        rows = m0 + tl.arange(0, BLOCK_M)
        row_ok = rows < S
        qT = tl.load(Q + b * stride_qb + h * stride_qh + dd[:, None] + rows[None, :] * stride_qs,
                     mask=row_ok[None, :], other=0.0)  # [D, BLOCK_M]
        do = tl.load(DO + b * stride_dob + h * stride_doh + rows[:, None] * stride_dos + dd[None, :],
                     mask=row_ok[:, None], other=0.0)  # [BLOCK_M, D]
        lse = tl.load(LSE + b * stride_lb + h * stride_lh + rows, mask=row_ok, other=float("inf"))
        lse = tl.where(lse == float("-inf"), float("inf"), lse)
        delta = tl.load(Delta + bh * S + rows, mask=row_ok, other=0.0)
        sT = tl.dot(k, qT) * sm_scale  # [BLOCK_N, BLOCK_M]
        pT = tl.exp(sT - lse[None, :])
        if CAUSAL:
            pT = tl.where(rows[None, :] >= keys[:, None], pT, 0.0)
        dv += tl.dot(pT.to(do.dtype), do)
        dpT = tl.dot(v, tl.trans(do))  # [BLOCK_N, BLOCK_M]
        dsT = pT * (dpT - delta[None, :])
        dk += tl.dot(dsT.to(qT.dtype), tl.trans(qT))
    out = bh * S * D + keys[:, None] * D + dd[None, :]
    tl.store(DK + out, (dk * sm_scale).to(DK.dtype.element_ty), mask=key_ok[:, None])
    tl.store(DV + out, dv.to(DV.dtype.element_ty), mask=key_ok[:, None])


@triton.jit
def _bwd_dq_kernel(
    Q, K, V, DO, LSE, Delta, DQ,
    stride_qb, stride_qh, stride_qs,
    stride_kb, stride_kh, stride_ks,
    stride_vb, stride_vh, stride_vs,
    stride_dob, stride_doh, stride_dos,
    stride_lb, stride_lh,
    H, S, sm_scale,
    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
):
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    dd = tl.arange(0, D)
    row_ok = rows < S
    q = tl.load(Q + b * stride_qb + h * stride_qh + rows[:, None] * stride_qs + dd[None, :],
                mask=row_ok[:, None], other=0.0)
    do = tl.load(DO + b * stride_dob + h * stride_doh + rows[:, None] * stride_dos + dd[None, :],
                 mask=row_ok[:, None], other=0.0)
    lse = tl.load(LSE + b * stride_lb + h * stride_lh + rows, mask=row_ok, other=float("inf"))
    lse = tl.where(lse == float("-inf"), float("inf"), lse)
    delta = tl.load(Delta + bh * S + rows, mask=row_ok, other=0.0)
    kT_ptrs = K + b * stride_kb + h * stride_kh + dd[:, None] + cols[None, :] * stride_ks
    vT_ptrs = V + b * stride_vb + h * stride_vh + dd[:, None] + cols[None, :] * stride_vs
    dq = tl.zeros([BLOCK_M, D], dtype=tl.float32)
    end = S
    if CAUSAL:
        end = tl.minimum(pid_m * BLOCK_M + BLOCK_M, S)
    for n0 in range(0, end, BLOCK_N):
        ok = (n0 + cols) < S
        kT = tl.load(kT_ptrs + n0 * stride_ks, mask=ok[None, :], other=0.0)
        vT = tl.load(vT_ptrs + n0 * stride_vs, mask=ok[None, :], other=0.0)
        p = tl.exp(tl.dot(q, kT) * sm_scale - lse[:, None])
        keep = ok[None, :]
        if CAUSAL:
            keep = keep & ((n0 + cols)[None, :] <= rows[:, None])
        p = tl.where(keep, p, 0.0)
        ds = p * (tl.dot(do, vT) - delta[:, None])
        dq += tl.dot(ds.to(kT.dtype), tl.trans(kT))
    tl.store(DQ + bh * S * D + rows[:, None] * D + dd[None, :], (dq * sm_scale).to(DQ.dtype.element_ty),
             mask=row_ok[:, None])


def flash_attention_backward(q, k, v, o, lse, do, causal=False, sm_scale=None):
    """(dq, dk, dv) of o = softmax(q kᵀ · sm_scale) v, from the forward's o and lse [B, H, S] (natural log)."""
    assert q.dim() == 4 and q.shape == k.shape == v.shape == o.shape == do.shape
    B, H, S, D = q.shape
    assert lse.shape == (B, H, S)
    assert D in (16, 32, 64, 128)
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(D)
    q, k, v, o, do = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v, o, do))
    lse = lse.float()
    lse = lse if lse.stride(-1) == 1 else lse.contiguous()
    dq, dk, dv = (torch.empty((B, H, S, D), dtype=q.dtype, device=q.device) for _ in range(3))
    delta = torch.empty((B, H, S), dtype=torch.float32, device=q.device)
    if q.is_cuda:
        KV_BLOCKS, Q_BLOCKS = (32, 64), (64, 32)
        num_warps, num_stages = (4, 2) if D <= 64 else (8, 1)
    else:
        KV_BLOCKS, Q_BLOCKS = (16, 32), (32, 16)
        num_warps, num_stages = 4, 1
    _bwd_preprocess[(triton.cdiv(S, Q_BLOCKS[0]), B * H)](
        o, do, delta, *o.stride()[:3], *do.stride()[:3], H, S, D=D, BLOCK_M=Q_BLOCKS[0])
    strides = (*q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *do.stride()[:3], lse.stride(0), lse.stride(1))
    meta = dict(D=D, CAUSAL=bool(causal), num_warps=num_warps, num_stages=num_stages)
    _bwd_dkdv_kernel[(triton.cdiv(S, KV_BLOCKS[1]), B * H)](
        q, k, v, do, lse, delta, dk, dv, *strides, H, S, float(sm_scale),
        BLOCK_M=KV_BLOCKS[0], BLOCK_N=KV_BLOCKS[1], **meta)
    _bwd_dq_kernel[(triton.cdiv(S, Q_BLOCKS[0]), B * H)](
        q, k, v, do, lse, delta, dq, *strides, H, S, float(sm_scale),
        BLOCK_M=Q_BLOCKS[0], BLOCK_N=Q_BLOCKS[1], **meta)
    return dq, dk, dv
