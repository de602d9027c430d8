# drill: flashattention/triton-backward
# variant: two launches: the dQ kernel runs first and also writes delta = rowsum(dO ∘ O) for its rows, then the dK/dV kernel reads it, walking its query blocks last to first; ds multiplied by sm_scale before the dots
"""The FlashAttention backward in Triton with the preprocess folded into the dQ kernel: each dQ
program loads its O and dO block, computes delta for its own rows, stores it, and uses it
at once; the dK/dV kernel is launched after it (the launch order is the synchronisation) and
reads delta from memory. The dK/dV kernel visits query blocks from the last one back, and
both kernels fold sm_scale into ds before their dots instead of scaling the result."""

import math

import torch
import triton
import triton.language as tl


@triton.jit
def _bwd_dq_and_delta_kernel(
    Q, K, V, O, DO, LSE, Delta, DQ,
    stride_qb, stride_qh, stride_qs,
    stride_kb, stride_kh, stride_ks,
    stride_vb, stride_vh, stride_vs,
    stride_ob, stride_oh, stride_os,
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
    dd = tl.arange(0, D)
    ok = rows < S
    q = tl.load(Q + b * stride_qb + h * stride_qh + rows[:, None] * stride_qs + dd[None, :], mask=ok[:, None], other=0.0)
    do = tl.load(DO + b * stride_dob + h * stride_doh + rows[:, None] * stride_dos + dd[None, :],
                 mask=ok[:, None], other=0.0)
    o = tl.load(O + b * stride_ob + h * stride_oh + rows[:, None] * stride_os + dd[None, :], mask=ok[:, None], other=0.0)
    delta = tl.sum(do.to(tl.float32) * o.to(tl.float32), 1)
    tl.store(Delta + bh * S + rows, delta, mask=ok)  # for the dK/dV kernel, launched next
    lse = tl.load(LSE + b * stride_lb + h * stride_lh + rows, mask=ok, other=float("inf"))
    lse = tl.where(lse == float("-inf"), float("inf"), lse)
    dq = tl.zeros([BLOCK_M, D], dtype=tl.float32)
    hi = S
    if CAUSAL:
        hi = tl.minimum((pid_m + 1) * BLOCK_M, S)
    for n0 in range(0, hi, BLOCK_N):
        cols = n0 + tl.arange(0, BLOCK_N)
        k = tl.load(K + b * stride_kb + h * stride_kh + cols[:, None] * stride_ks + dd[None, :],
                    mask=cols[:, None] < S, other=0.0)
        v = tl.load(V + b * stride_vb + h * stride_vh + cols[:, None] * stride_vs + dd[None, :],
                    mask=cols[:, None] < S, other=0.0)
        p = tl.exp(tl.dot(q, tl.trans(k)) * sm_scale - lse[:, None])
        keep = cols[None, :] < S
        if CAUSAL:
            keep = keep & (cols[None, :] <= rows[:, None])
        p = tl.where(keep, p, 0.0)
        ds = p * (tl.dot(do, tl.trans(v)) - delta[:, None]) * sm_scale
        dq += tl.dot(ds.to(k.dtype), k)
    tl.store(DQ + bh * S * D + rows[:, None] * D + dd[None, :], dq.to(DQ.dtype.element_ty), mask=ok[:, None])


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
    k_ok = keys < S
    k = tl.load(K + b * stride_kb + h * stride_kh + keys[:, None] * stride_ks + dd[None, :], mask=k_ok[:, None], other=0.0)
    v = tl.load(V + b * stride_vb + h * stride_vh + keys[:, None] * stride_vs + dd[None, :], mask=k_ok[:, None], other=0.0)
    dk = tl.zeros([BLOCK_N, D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, D], dtype=tl.float32)
    first = 0
    if CAUSAL:
        first = (pid_n * BLOCK_N) // BLOCK_M  # earlier query blocks see none of these keys
    last = tl.cdiv(S, BLOCK_M) - 1
    for i in range(0, last - first + 1):
        rows = (last - i) * BLOCK_M + tl.arange(0, BLOCK_M)
        ok = rows < S
        q = tl.load(Q + b * stride_qb + h * stride_qh + rows[:, None] * stride_qs + dd[None, :],
                    mask=ok[:, None], other=0.0)
        do = tl.load(DO + b * stride_dob + h * stride_doh + rows[:, None] * stride_dos + dd[None, :],
                     mask=ok[:, None], other=0.0)
        lse = tl.load(LSE + b * stride_lb + h * stride_lh + rows, mask=ok, other=float("inf"))
        lse = tl.where(lse == float("-inf"), float("inf"), lse)
        delta = tl.load(Delta + bh * S + rows, mask=ok, other=0.0)
        p = tl.exp(tl.dot(q, tl.trans(k)) * sm_scale - lse[:, None])
        if CAUSAL:
            p = tl.where(keys[None, :] <= rows[:, None], p, 0.0)
        dv += tl.dot(tl.trans(p.to(do.dtype)), do)
        ds = p * (tl.dot(do, tl.trans(v)) - delta[:, None]) * sm_scale
        dk += tl.dot(tl.trans(ds.to(q.dtype)), q)
    tl.store(DK + bh * S * D + keys[:, None] * D + dd[None, :], dk.to(DK.dtype.element_ty), mask=k_ok[:, None])
    tl.store(DV + bh * S * D + keys[:, None] * D + dd[None, :], dv.to(DV.dtype.element_ty), mask=k_ok[:, None])


def flash_attention_backward(q, k, v, o, lse, do, causal=False, sm_scale=None):
    """(dq, dk, dv) of o = softmax(q kᵀ · sm_scale) v, from the forward's o and lse [B, H, S] (natural log)."""
    assert q.dim() == 4 and q.shape == k.shape == v.shape == o.shape == do.shape
    B, H, S, D = q.shape
    assert lse.shape == (B, H, S) and D in (16, 32, 64, 128)
    if sm_scale is None:
        sm_scale = D ** -0.5
    q, k, v, o, do = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v, o, do))
    lse = lse.to(torch.float32)
    if lse.stride(-1) != 1:
        lse = lse.contiguous()
    dq = torch.empty((B, H, S, D), dtype=q.dtype, device=q.device)
    dk = torch.empty_like(dq)
    dv = torch.empty_like(dq)
    delta = torch.empty((B * H, S), dtype=torch.float32, device=q.device)
    if q.is_cuda:
        (KV_M, KV_N), (Q_M, Q_N) = (32, 64), (64, 32)
        num_warps, num_stages = (4, 2) if D <= 64 else (8, 1)
    else:
        (KV_M, KV_N), (Q_M, Q_N) = (16, 32), (32, 16)
        num_warps, num_stages = 4, 1
    qkv = (*q.stride()[:3], *k.stride()[:3], *v.stride()[:3])
    tail = (*do.stride()[:3], lse.stride(0), lse.stride(1), H, S, float(sm_scale))
    _bwd_dq_and_delta_kernel[(triton.cdiv(S, Q_M), B * H)](
        q, k, v, o, do, lse, delta, dq, *qkv, *o.stride()[:3], *tail,
        D=D, BLOCK_M=Q_M, BLOCK_N=Q_N, CAUSAL=bool(causal), num_warps=num_warps, num_stages=num_stages)
    _bwd_dkdv_kernel[(triton.cdiv(S, KV_N), B * H)](
        q, k, v, do, lse, delta, dk, dv, *qkv, *tail,
        D=D, BLOCK_M=KV_M, BLOCK_N=KV_N, CAUSAL=bool(causal), num_warps=num_warps, num_stages=num_stages)
    return dq, dk, dv
