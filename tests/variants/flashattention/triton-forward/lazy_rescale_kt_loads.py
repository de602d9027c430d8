# drill: flashattention/triton-forward
# variant: lazy rescaling (a row's reference max moves only when the block max exceeds it by more than 8), K loaded already transposed as [D, BLOCK_N], square 32×32 interpreter blocks
"""A FlashAttention forward kernel in Triton with lazy rescaling, as FlashAttention-4 does: the
max that p is taken against moves only when a row's scores outgrow it by more than 8 (in
natural-log units), so most blocks skip rescaling acc; p stays below e^8, safe in fp16/fp32,
and acc / l is exact whichever reference max was used. K blocks are loaded transposed by
their pointers, so the scores are tl.dot(q, kT)."""

import math

import torch
import triton
import triton.language as tl


@triton.jit
def _flash_forward_kernel(
    Q, K, V, O,
    stride_qb, stride_qh, stride_qs,
    stride_kb, stride_kh, stride_ks,
    stride_vb, stride_vh, stride_vs,
    stride_ob, stride_oh, stride_os,
    H, S, sm_scale,
    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
):
    TAU: tl.constexpr = 8.0
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // H
    h = pid_bh % H
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    q = tl.load(Q + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qs + offs_d[None, :],
                mask=offs_m[:, None] < S, other=0.0)
    kT_ptrs = K + b * stride_kb + h * stride_kh + offs_d[:, None] + offs_n[None, :] * stride_ks  # [D, BLOCK_N]
    v_ptrs = V + b * stride_vb + h * stride_vh + offs_n[:, None] * stride_vs + offs_d[None, :]
    m_ref = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, D], dtype=tl.float32)
    hi = S
    if CAUSAL:
        hi = tl.minimum((pid_m + 1) * BLOCK_M, S)
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n
        kT = tl.load(kT_ptrs + start_n * stride_ks, mask=cols[None, :] < S, other=0.0)
        v = tl.load(v_ptrs + start_n * stride_vs, mask=cols[:, None] < S, other=0.0)
        s = tl.dot(q, kT) * sm_scale
        ok = cols[None, :] < S
        if CAUSAL:
            ok = ok & (offs_m[:, None] >= cols[None, :])
        s = tl.where(ok, s, float("-inf"))
        blk_max = tl.max(s, 1)
        move = blk_max > m_ref + TAU  # also true the first time (m_ref = -inf)
        m_new = tl.where(move, blk_max, m_ref)
        alpha = tl.where(move, tl.exp(m_ref - m_new), 1.0)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_ref = m_new
    out = acc / l_i[:, None]
    tl.store(O + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_os + offs_d[None, :],
             out.to(O.dtype.element_ty), mask=offs_m[:, None] < S)


def flash_attention(q, k, v, causal=False, sm_scale=None):
    """softmax(q kᵀ · sm_scale) v for q, k, v [B, H, S, D]; causal: query i sees keys j <= i."""
    assert q.dim() == 4 and q.shape == k.shape == v.shape, "q, k, v must all be [B, H, S, D]"
    assert q.dtype == k.dtype == v.dtype and q.device == k.device == v.device
    B, H, S, D = q.shape
    assert D in (16, 32, 64, 128), "head dim must be 16, 32, 64 or 128"
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(D)
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    o = q.new_empty((B, H, S, D))
    if q.is_cuda:
        BLOCK_M, BLOCK_N = 128, 64
        num_warps, num_stages = (4, 3) if D <= 64 else (8, 2)
    else:
        BLOCK_M = BLOCK_N = 32
        num_warps, num_stages = 4, 1
    _flash_forward_kernel[(triton.cdiv(S, BLOCK_M), B * H)](
        q, k, v, o,
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        o.stride(0), o.stride(1), o.stride(2),
        H, S, float(sm_scale),
        D=D, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, CAUSAL=bool(causal),
        num_warps=num_warps, num_stages=num_stages,
    )
    return o
