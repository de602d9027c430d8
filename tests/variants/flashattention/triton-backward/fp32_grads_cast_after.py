# drill: flashattention/triton-backward
# variant: kernels write fp32 dq, dk, dv buffers that the launcher casts to q's dtype (.to) at the end; preprocess is one program per head looping over its rows; dQ walks key blocks last to first; lse = -inf rows flagged and zeroed after the exp; 32×32 interpreter blocks
"""The FlashAttention backward in Triton with fp32 gradient buffers: the kernels store fp32 and
the launcher returns them cast to q's dtype (no copy at all when q is fp32). The delta
preprocess runs one program per (batch, head) and loops over that head's rows. The dQ kernel
visits its key blocks in reverse. A row whose lse is -inf is flagged and its p set to 0 with
tl.where after the exp (its lse replaced by 0 first, so nothing overflows)."""

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
    bh = tl.program_id(0)
    o_base = O + (bh // H) * stride_ob + (bh % H) * stride_oh
    do_base = DO + (bh // H) * stride_dob + (bh % H) * stride_doh
    dd = tl.arange(0, D)
    for m0 in range(0, S, BLOCK_M):
        rows = m0 + tl.arange(0, BLOCK_M)
        ok = rows < S
        o = tl.load(o_base + rows[:, None] * stride_os + dd[None, :], mask=ok[:, None], other=0.0).to(tl.float32)
        do = tl.load(do_base + rows[:, None] * stride_dos + dd[None, :], mask=ok[:, None], other=0.0).to(tl.float32)
        tl.store(Delta + bh * S + rows, tl.sum(o * do, 1), mask=ok)


@triton.jit
def _load_lse(LSE, rows, ok):
    lse = tl.load(LSE + rows, mask=ok, other=0.0)
    seen = ok & (lse > float("-inf"))
    return tl.where(seen, lse, 0.0), seen


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
    for m0 in range(0, S, BLOCK_M):
        # causal: a query block that ends before this key block starts sees none of it
        if (not CAUSAL) or (m0 + BLOCK_M > pid_n * BLOCK_N):
            rows = m0 + tl.arange(0, BLOCK_M)
            ok = rows < S
            q = tl.load(Q + b * stride_qb + h * stride_qh + rows[:, None] * stride_qs + dd[None, :],
                        mask=ok[:, None], other=0.0)
            do = tl.load(DO + b * stride_dob + h * stride_doh + rows[:, None] * stride_dos + dd[None, :],
                         mask=ok[:, None], other=0.0)
            lse, seen = _load_lse(LSE + b * stride_lb + h * stride_lh, rows, ok)
            delta = tl.load(Delta + bh * S + rows, mask=ok, other=0.0)
            p = tl.exp(tl.dot(q, tl.trans(k)) * sm_scale - lse[:, None])
            keep = seen[:, None]
            if CAUSAL:
                keep = keep & (keys[None, :] <= rows[:, None])
            p = tl.where(keep, p, 0.0)
            dv += tl.dot(tl.trans(p).to(do.dtype), do)
            ds = p * (tl.dot(do, tl.trans(v)) - delta[:, None])
            dk += tl.dot(tl.trans(ds).to(q.dtype), q)
    tl.store(DK + bh * S * D + keys[:, None] * D + dd[None, :], dk * sm_scale, mask=k_ok[:, None])
    tl.store(DV + bh * S * D + keys[:, None] * D + dd[None, :], dv, mask=k_ok[:, None])


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
    dd = tl.arange(0, D)
    ok = rows < S
    q = tl.load(Q + b * stride_qb + h * stride_qh + rows[:, None] * stride_qs + dd[None, :], mask=ok[:, None], other=0.0)
    do = tl.load(DO + b * stride_dob + h * stride_doh + rows[:, None] * stride_dos + dd[None, :],
                 mask=ok[:, None], other=0.0)
    lse, seen = _load_lse(LSE + b * stride_lb + h * stride_lh, rows, ok)
    delta = tl.load(Delta + bh * S + rows, mask=ok, other=0.0)
    dq = tl.zeros([BLOCK_M, D], dtype=tl.float32)
    hi = S
    if CAUSAL:
        hi = tl.minimum((pid_m + 1) * BLOCK_M, S)
    n_blocks = tl.cdiv(hi, BLOCK_N)
    for i in range(n_blocks):
        cols = (n_blocks - 1 - i) * BLOCK_N + tl.arange(0, BLOCK_N)  # last key block first
        c_ok = cols < S
        k = tl.load(K + b * stride_kb + h * stride_kh + cols[:, None] * stride_ks + dd[None, :],
                    mask=c_ok[:, None], other=0.0)
        v = tl.load(V + b * stride_vb + h * stride_vh + cols[:, None] * stride_vs + dd[None, :],
                    mask=c_ok[:, None], other=0.0)
        p = tl.exp(tl.dot(q, tl.trans(k)) * sm_scale - lse[:, None])
        keep = seen[:, None] & c_ok[None, :]
        if CAUSAL:
            keep = keep & (cols[None, :] <= rows[:, None])
        p = tl.where(keep, p, 0.0)
        ds = p * (tl.dot(do, tl.trans(v)) - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k)
    tl.store(DQ + bh * S * D + rows[:, None] * D + dd[None, :], dq * sm_scale, mask=ok[:, None])


def flash_attention_backward(q, k, v, o, lse, do, causal=False, sm_scale=None):
    """(dq, dk, dv) of o = softmax(q kᵀ · sm_scale) v, from the forward's o and lse [B, H, S] (natural log)."""
    assert q.dim() == 4 and q.shape == k.shape == v.shape == o.shape == do.shape
    B, H, S, D = q.shape
    assert lse.shape == (B, H, S) and D in (16, 32, 64, 128)
    sm_scale = 1.0 / math.sqrt(D) if sm_scale is None else float(sm_scale)
    q, k, v, o, do = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v, o, do))
    lse = lse.float()
    lse = lse if lse.stride(-1) == 1 else lse.contiguous()
    dq32, dk32, dv32 = (torch.empty((B, H, S, D), dtype=torch.float32, device=q.device) for _ in range(3))
    delta = torch.empty((B, H, S), dtype=torch.float32, device=q.device)
    if q.is_cuda:
        BM, BN, num_warps, num_stages = 64, 64, (4 if D <= 64 else 8), 1
    else:
        BM, BN, num_warps, num_stages = 32, 32, 4, 1
    _bwd_preprocess[(B * H,)](o, do, delta, *o.stride()[:3], *do.stride()[:3], H, S, D=D, BLOCK_M=BM)
    strides = (*q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *do.stride()[:3], lse.stride(0), lse.stride(1))
    meta = dict(D=D, BLOCK_M=BM, BLOCK_N=BN, CAUSAL=bool(causal), num_warps=num_warps, num_stages=num_stages)
    _bwd_dkdv_kernel[(triton.cdiv(S, BN), B * H)](q, k, v, do, lse, delta, dk32, dv32, *strides, H, S, sm_scale, **meta)
    _bwd_dq_kernel[(triton.cdiv(S, BM), B * H)](q, k, v, do, lse, delta, dq32, *strides, H, S, sm_scale, **meta)
    return dq32.to(q.dtype), dk32.to(q.dtype), dv32.to(q.dtype)
