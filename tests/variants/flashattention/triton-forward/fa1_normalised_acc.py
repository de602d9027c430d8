# drill: flashattention/triton-forward
# variant: FlashAttention-1 ordering: acc kept normalised after every key block (no final divide); BLOCK_N wider than BLOCK_M; o from torch.empty_like(q), stored through o's own strides
"""A FlashAttention forward kernel in Triton in the order of the first FlashAttention paper:
after each key block the running output is already divided by the running sum, so the last
block leaves o finished. The interpreter blocks are 16 query rows by 32 keys, and o is
allocated with torch.empty_like(q), so it may be strided like q."""

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
    start_m = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1)
    b = bh // H
    h = bh - b * H
    rows = start_m + tl.arange(0, BLOCK_M)
    keys = tl.arange(0, BLOCK_N)
    dd = tl.arange(0, D)
    q = tl.load(Q + b * stride_qb + h * stride_qh + rows[:, None] * stride_qs + dd[None, :],
                mask=rows[:, None] < S, other=0.0)
    m = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l = tl.zeros([BLOCK_M], dtype=tl.float32)
    o = tl.zeros([BLOCK_M, D], dtype=tl.float32)  # normalised: o = acc / l at every step
    end = S
    if CAUSAL:
        end = tl.minimum(start_m + BLOCK_M, S)
    for n0 in range(0, end, BLOCK_N):
        cols = n0 + keys
        k = tl.load(K + b * stride_kb + h * stride_kh + cols[:, None] * stride_ks + dd[None, :],
                    mask=cols[:, None] < S, other=0.0)
        v = tl.load(V + b * stride_vb + h * stride_vh + cols[:, None] * stride_vs + dd[None, :],
                    mask=cols[:, None] < S, other=0.0)
        s = tl.dot(q, tl.trans(k)) * sm_scale
        visible = cols[None, :] < S
        if CAUSAL:
            visible = visible & (rows[:, None] >= cols[None, :])
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        p = tl.exp(s - m_new[:, None])
        l_old = l * tl.exp(m - m_new)
        l = l_old + tl.sum(p, axis=1)
        # o_new = (l_old · o + p v) / l_new
        o = o * (l_old / l)[:, None] + tl.dot(p.to(v.dtype), v) / l[:, None]
        m = m_new
    tl.store(O + b * stride_ob + h * stride_oh + rows[:, None] * stride_os + dd[None, :],
             o.to(O.dtype.element_ty), mask=rows[:, None] < S)


def flash_attention(q, k, v, causal=False, sm_scale=None):
    """softmax(q kᵀ · sm_scale) v for q, k, v [B, H, S, D]; causal: query i sees keys j <= i."""
    assert q.dim() == 4 and q.shape == k.shape == v.shape
    assert q.dtype == k.dtype == v.dtype
    B, H, S, D = q.shape
    assert D in (16, 32, 64, 128)
    scale = 1.0 / math.sqrt(D) if sm_scale is None else float(sm_scale)
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    o = torch.empty_like(q)
    if q.is_cuda:
        BLOCK_M, BLOCK_N, warps, stages = 128, 64, (4 if D <= 64 else 8), (3 if D <= 64 else 2)
    else:
        BLOCK_M, BLOCK_N, warps, stages = 16, 32, 4, 1
    _flash_forward_kernel[(triton.cdiv(S, BLOCK_M), B * H)](
        q, k, v, o,
        *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *o.stride()[:3],
        H, S, scale,
        D=D, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, CAUSAL=causal,
        num_warps=warps, num_stages=stages,
    )
    return o
