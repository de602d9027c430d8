# drill: flashattention/{{ID}}
"""Attack: causal work in two loops, an unmasked one over keys [0, first row of the query block)
and a masked one from that row on, which is right only when BLOCK_N divides BLOCK_M; the
launcher picks BLOCK_M = 32, BLOCK_N = 16 for D <= 64 and BLOCK_M = 16, BLOCK_N = 32 for
D = 128, so at D = 128 the unmasked loop runs past the diagonal (later keys seen, some counted
twice). Slipped past because every causal check ran D = 32; test_head_dims now runs each head
dim with the causal mask too.
"""


import math

import torch
import triton
import triton.language as tl


@triton.jit
def _attend(acc, l_i, m_i, q, k_base, v_base, stride_ks, stride_vs, offs_m, offs_n, offs_d, S, qk_scale,
            lo, hi, MASK_DIAGONAL: tl.constexpr, BLOCK_N: tl.constexpr):
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n
        col_ok = cols < S
        k = tl.load(k_base + cols[:, None] * stride_ks + offs_d[None, :], mask=col_ok[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k)) * qk_scale  # log2 units
        keep = col_ok[None, :]
        if MASK_DIAGONAL:
            keep = keep & (cols[None, :] <= offs_m[:, None])
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        v = tl.load(v_base + cols[:, None] * stride_vs + offs_d[None, :], mask=col_ok[:, None], other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        l_i = l_i * alpha + tl.sum(p, 1)
        m_i = m_new
    return acc, l_i, m_i


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
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // H
    h = pid_bh % H
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    row_ok = offs_m < S
    q = tl.load(Q + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qs + offs_d[None, :],
                mask=row_ok[:, None], other=0.0)
    k_base = K + b * stride_kb + h * stride_kh
    v_base = V + b * stride_vb + h * stride_vh
    qk_scale = sm_scale * 1.4426950408889634

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, D], dtype=tl.float32)
    if CAUSAL:
        first = pid_m * BLOCK_M
        below = first  # assumes BLOCK_N divides BLOCK_M
        acc, l_i, m_i = _attend(acc, l_i, m_i, q, k_base, v_base, stride_ks, stride_vs, offs_m, offs_n, offs_d,
                                S, qk_scale, 0, below, False, BLOCK_N)
        acc, l_i, m_i = _attend(acc, l_i, m_i, q, k_base, v_base, stride_ks, stride_vs, offs_m, offs_n, offs_d,
                                S, qk_scale, below, tl.minimum(first + BLOCK_M, S), True, BLOCK_N)
    else:
        acc, l_i, m_i = _attend(acc, l_i, m_i, q, k_base, v_base, stride_ks, stride_vs, offs_m, offs_n, offs_d,
                                S, qk_scale, 0, S, False, BLOCK_N)
    o = acc / l_i[:, None]
    tl.store(O + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_os + offs_d[None, :],
             o.to(O.dtype.element_ty), mask=row_ok[:, None])


def flash_attention(q, k, v, causal=False, sm_scale=None):
    """softmax(q kᵀ · sm_scale) v for q, k, v [B, H, S, D]; causal: query i sees keys j <= i."""
    assert q.dim() == 4 and q.shape == k.shape == v.shape, "q, k, v must all be [B, H, S, D]"
    assert q.dtype == k.dtype == v.dtype and q.device == k.device == v.device
    B, H, S, D = q.shape
    assert D in (16, 32, 64, 128), "head dim must be 16, 32, 64 or 128"
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(D)
    # The kernel steps along D with stride 1; the other three strides are passed in.
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    o = torch.empty((B, H, S, D), dtype=q.dtype, device=q.device)

    if q.is_cuda:
        BLOCK_M, BLOCK_N = 128, 64
        num_warps, num_stages = (4, 3) if D <= 64 else (8, 2)
    else:  # the Triton interpreter: small, unequal blocks
        BLOCK_M, BLOCK_N = (32, 16) if D <= 64 else (16, 32)
        num_warps, num_stages = 4, 1

    grid = (triton.cdiv(S, BLOCK_M), B * H)  # every query row lands in some block
    _flash_forward_kernel[grid](
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
