# drill: flashattention/triton-backward
# variant: no preprocess kernel: each kernel recomputes D = rowsum(dO ∘ O) from the O and dO blocks it loads (launcher passes O); causal loops in a masked and an unmasked stage
"""The FlashAttention backward in Triton without a separate D pass.

D_i = rowsum(dO_i ∘ O_i) is cheap, so instead of a preprocessing launch writing it to HBM, each
kernel recomputes it from the O and dO rows of the query block in hand. Causal loops run in two
stages: blocks straddling the diagonal (masked), then the blocks wholly visible.
"""

import math

import torch
import triton
import triton.language as tl


@triton.jit
def _dkdv_step(q_base, do_base, lse_base, o_base, stride_qs, stride_dos, stride_os,
               k, v, dk, dv, keys, c, start_m, S, sm_scale,
               BLOCK_M: tl.constexpr, MASK_CAUSAL: tl.constexpr):
    rows = start_m + tl.arange(0, BLOCK_M)
    live = rows < S
    q = tl.load(q_base + rows[:, None] * stride_qs + c[None, :], mask=live[:, None], other=0.0)
    q = (q * sm_scale).to(k.dtype)  # back to the input dtype: tl.dot takes equal operand types
    do = tl.load(do_base + rows[:, None] * stride_dos + c[None, :], mask=live[:, None], other=0.0)
    lse = tl.load(lse_base + rows, mask=live, other=0.0)
    o = tl.load(o_base + rows[:, None] * stride_os + c[None, :], mask=live[:, None], other=0.0)
    dlt = tl.sum(do.to(tl.float32) * o.to(tl.float32), 1)
    s = tl.dot(q, tl.trans(k))
    p = tl.exp(s - lse[:, None])
    keep = live[:, None] & (lse[:, None] != float("-inf")) & (keys[None, :] < S)
    if MASK_CAUSAL:
        keep = keep & (keys[None, :] <= rows[:, None])
    p = tl.where(keep, p, 0.0)
    dv += tl.dot(tl.trans(p.to(do.dtype)), do)
    dp = tl.dot(do, tl.trans(v))
    ds = p * (dp - dlt[:, None])
    dk += tl.dot(tl.trans(ds.to(q.dtype)), q)  # q already carries sm_scale
    return dk, dv


@triton.jit
def _bwd_dkdv_kernel(
    Q, K, V, O, DO, LSE, DK, DV,
    stride_qb, stride_qh, stride_qs,
    stride_ob, stride_oh, stride_os,
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
    start_n = pid_n * BLOCK_N
    keys = start_n + tl.arange(0, BLOCK_N)
    c = tl.arange(0, D)
    kmask = keys < S
    k = tl.load(K + b * stride_kb + h * stride_kh + keys[:, None] * stride_ks + c[None, :],
                mask=kmask[:, None], other=0.0)
    v = tl.load(V + b * stride_vb + h * stride_vh + keys[:, None] * stride_vs + c[None, :],
                mask=kmask[:, None], other=0.0)
    dk = tl.zeros([BLOCK_N, D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, D], dtype=tl.float32)
    q_base = Q + b * stride_qb + h * stride_qh
    do_base = DO + b * stride_dob + h * stride_doh
    lse_base = LSE + b * stride_lb + h * stride_lh
    o_base = O + b * stride_ob + h * stride_oh

    if CAUSAL:
        # Stage 1: query blocks that overlap this key block's rows (partly masked).
        lo = (start_n // BLOCK_M) * BLOCK_M
        hi = tl.cdiv(start_n + BLOCK_N, BLOCK_M) * BLOCK_M
        for start_m in range(lo, hi, BLOCK_M):
            dk, dv = _dkdv_step(q_base, do_base, lse_base, o_base, stride_qs, stride_dos, stride_os,
                                k, v, dk, dv, keys, c, start_m, S, sm_scale, BLOCK_M, True)
        # Stage 2: every later query sees the whole key block.
        for start_m in range(hi, S, BLOCK_M):
            dk, dv = _dkdv_step(q_base, do_base, lse_base, o_base, stride_qs, stride_dos, stride_os,
                                k, v, dk, dv, keys, c, start_m, S, sm_scale, BLOCK_M, False)
    else:
        for start_m in range(0, S, BLOCK_M):
            dk, dv = _dkdv_step(q_base, do_base, lse_base, o_base, stride_qs, stride_dos, stride_os,
                                k, v, dk, dv, keys, c, start_m, S, sm_scale, BLOCK_M, False)

    out = bh * S * D + keys[:, None] * D + c[None, :]
    tl.store(DK + out, dk.to(DK.dtype.element_ty), mask=kmask[:, None])
    tl.store(DV + out, dv.to(DV.dtype.element_ty), mask=kmask[:, None])


@triton.jit
def _dq_step(k_base, v_base, stride_ks, stride_vs, q, do, lse, dlt, dq, rows, c, start_n, S, sm_scale,
             BLOCK_N: tl.constexpr, MASK_CAUSAL: tl.constexpr):
    keys = start_n + tl.arange(0, BLOCK_N)
    kmask = keys < S
    k = tl.load(k_base + keys[:, None] * stride_ks + c[None, :], mask=kmask[:, None], other=0.0)
    v = tl.load(v_base + keys[:, None] * stride_vs + c[None, :], mask=kmask[:, None], other=0.0)
    s = tl.dot(q, tl.trans(k))  # q already carries sm_scale
    p = tl.exp(s - lse[:, None])
    keep = (rows[:, None] < S) & (lse[:, None] != float("-inf")) & kmask[None, :]
    if MASK_CAUSAL:
        keep = keep & (keys[None, :] <= rows[:, None])
    p = tl.where(keep, p, 0.0)
    dp = tl.dot(do, tl.trans(v))
    ds = p * (dp - dlt[:, None])
    dq += tl.dot(ds.to(k.dtype), k)
    return dq


@triton.jit
def _bwd_dq_kernel(
    Q, K, V, O, DO, LSE, DQ,
    stride_qb, stride_qh, stride_qs,
    stride_ob, stride_oh, stride_os,
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
    start_m = pid_m * BLOCK_M
    rows = start_m + tl.arange(0, BLOCK_M)
    c = tl.arange(0, D)
    live = rows < S
    q = tl.load(Q + b * stride_qb + h * stride_qh + rows[:, None] * stride_qs + c[None, :],
                mask=live[:, None], other=0.0)
    q = (q * sm_scale).to(Q.dtype.element_ty)  # back to the input dtype: tl.dot takes equal operand types
    do = tl.load(DO + b * stride_dob + h * stride_doh + rows[:, None] * stride_dos + c[None, :],
                 mask=live[:, None], other=0.0)
    lse = tl.load(LSE + b * stride_lb + h * stride_lh + rows, mask=live, other=0.0)
    o = tl.load(O + b * stride_ob + h * stride_oh + rows[:, None] * stride_os + c[None, :],
                mask=live[:, None], other=0.0)
    dlt = tl.sum(do.to(tl.float32) * o.to(tl.float32), 1)  # D for this block's rows, kept on chip
    dq = tl.zeros([BLOCK_M, D], dtype=tl.float32)
    k_base = K + b * stride_kb + h * stride_kh
    v_base = V + b * stride_vb + h * stride_vh

    if CAUSAL:
        # Stage 1: key blocks wholly before this query block (no causal mask needed).
        full_end = (start_m // BLOCK_N) * BLOCK_N
        for start_n in range(0, full_end, BLOCK_N):
            dq = _dq_step(k_base, v_base, stride_ks, stride_vs, q, do, lse, dlt, dq, rows, c, start_n, S,
                          sm_scale, BLOCK_N, False)
        # Stage 2: key blocks that reach into this query block, masked; none past its last row.
        stop = tl.minimum(start_m + BLOCK_M, S)
        for start_n in range(full_end, stop, BLOCK_N):
            dq = _dq_step(k_base, v_base, stride_ks, stride_vs, q, do, lse, dlt, dq, rows, c, start_n, S,
                          sm_scale, BLOCK_N, True)
    else:
        for start_n in range(0, S, BLOCK_N):
            dq = _dq_step(k_base, v_base, stride_ks, stride_vs, q, do, lse, dlt, dq, rows, c, start_n, S,
                          sm_scale, BLOCK_N, False)

    dq = dq * sm_scale
    tl.store(DQ + bh * S * D + rows[:, None] * D + c[None, :], dq.to(DQ.dtype.element_ty), mask=live[:, None])


def flash_attention_backward(q, k, v, o, lse, do, causal=False, sm_scale=None):
    """(dq, dk, dv) of o = softmax(q kᵀ · sm_scale) v, from the forward's o and lse [B, H, S] (natural log)."""
    assert q.dim() == 4 and q.shape == k.shape == v.shape == o.shape == do.shape, \
        "q, k, v, o and do must all be [B, H, S, D]"
    B, H, S, D = q.shape
    assert lse.shape == (B, H, S), "lse must be [B, H, S]"
    assert D in (16, 32, 64, 128), "head dim must be 16, 32, 64 or 128"
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(D)
    q, k, v, o, do = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v, o, do))
    lse = lse.float()
    lse = lse if lse.stride(-1) == 1 else lse.contiguous()

    dq = torch.empty((B, H, S, D), dtype=q.dtype, device=q.device)
    dk = torch.empty((B, H, S, D), dtype=q.dtype, device=q.device)
    dv = torch.empty((B, H, S, D), dtype=q.dtype, device=q.device)

    if q.is_cuda:
        KV_BLOCKS, Q_BLOCKS = (32, 64), (64, 32)
        num_warps, num_stages = (4, 2) if D <= 64 else (8, 1)
    else:
        KV_BLOCKS, Q_BLOCKS = (16, 32), (32, 16)
        num_warps, num_stages = 4, 1

    strides = (q.stride(0), q.stride(1), q.stride(2),
               o.stride(0), o.stride(1), o.stride(2),
               k.stride(0), k.stride(1), k.stride(2),
               v.stride(0), v.stride(1), v.stride(2),
               do.stride(0), do.stride(1), do.stride(2),
               lse.stride(0), lse.stride(1))
    meta = dict(D=D, CAUSAL=bool(causal), num_warps=num_warps, num_stages=num_stages)
    _bwd_dkdv_kernel[(triton.cdiv(S, KV_BLOCKS[1]), B * H)](
        q, k, v, o, do, lse, dk, dv, *strides, H, S, float(sm_scale),
        BLOCK_M=KV_BLOCKS[0], BLOCK_N=KV_BLOCKS[1], **meta)
    _bwd_dq_kernel[(triton.cdiv(S, Q_BLOCKS[0]), B * H)](
        q, k, v, o, do, lse, dq, *strides, H, S, float(sm_scale),
        BLOCK_M=Q_BLOCKS[0], BLOCK_N=Q_BLOCKS[1], **meta)
    return dq, dk, dv
