# drill: flashattention/triton-forward
# variant: the key loop always runs over all of S and skips, with an `if`, key blocks the causal mask hides entirely; contiguous copies of q, k, v made up front; launch arguments by keyword
"""A FlashAttention forward kernel in Triton whose key loop spans the whole sequence and tests
each block: under the causal mask a block that starts past this query block's last row is
skipped with an `if` (an early exit per block rather than a shorter loop). The launcher makes
q, k and v contiguous and passes everything by keyword."""

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
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    q_ptr = Q + (pid_bh // H) * stride_qb + (pid_bh % H) * stride_qh
    k_ptr = K + (pid_bh // H) * stride_kb + (pid_bh % H) * stride_kh
    v_ptr = V + (pid_bh // H) * stride_vb + (pid_bh % H) * stride_vh
    o_ptr = O + (pid_bh // H) * stride_ob + (pid_bh % H) * stride_oh
    first = pid_m * BLOCK_M
    last = first + BLOCK_M - 1
    rows = first + tl.arange(0, BLOCK_M)
    dd = tl.arange(0, D)
    q = tl.load(q_ptr + rows[:, None] * stride_qs + dd[None, :], mask=rows[:, None] < S, other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.full([BLOCK_M], 0.0, tl.float32)
    acc = tl.full([BLOCK_M, D], 0.0, tl.float32)
    for start_n in range(0, S, BLOCK_N):
        if (not CAUSAL) or (start_n <= last):
            cols = start_n + tl.arange(0, BLOCK_N)
            k = tl.load(k_ptr + cols[:, None] * stride_ks + dd[None, :], mask=cols[:, None] < S, other=0.0)
            v = tl.load(v_ptr + cols[:, None] * stride_vs + dd[None, :], mask=cols[:, None] < S, other=0.0)
            s = tl.dot(q, tl.trans(k)) * sm_scale
            if CAUSAL:
                s = tl.where((cols[None, :] < S) & (cols[None, :] <= rows[:, None]), s, float("-inf"))
            else:
                s = tl.where(cols[None, :] < S, s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            alpha = tl.exp(m_i - m_new)
            p = tl.exp(s - m_new[:, None])
            l_i = alpha * l_i + tl.sum(p, 1)
            acc = alpha[:, None] * acc + tl.dot(p.to(v.dtype), v)
            m_i = m_new
    tl.store(o_ptr + rows[:, None] * stride_os + dd[None, :], (acc / l_i[:, None]).to(O.dtype.element_ty),
             mask=rows[:, None] < S)


def flash_attention(q, k, v, causal=False, sm_scale=None):
    """softmax(q kᵀ · sm_scale) v for q, k, v [B, H, S, D]; causal: query i sees keys j <= i."""
    assert q.dim() == 4 and q.shape == k.shape == v.shape, "q, k, v must all be [B, H, S, D]"
    assert q.dtype == k.dtype == v.dtype and q.device == k.device == v.device
    B, H, S, D = q.shape
    assert D in (16, 32, 64, 128), "head dim must be 16, 32, 64 or 128"
    sm_scale = 1.0 / math.sqrt(D) if sm_scale is None else sm_scale
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    o = torch.zeros((B, H, S, D), dtype=q.dtype, device=q.device)
    block_m, block_n = (128, 64) if q.is_cuda else (64, 16)
    _flash_forward_kernel[(triton.cdiv(S, block_m), B * H)](
        Q=q, K=k, V=v, O=o,
        stride_qb=q.stride(0), stride_qh=q.stride(1), stride_qs=q.stride(2),
        stride_kb=k.stride(0), stride_kh=k.stride(1), stride_ks=k.stride(2),
        stride_vb=v.stride(0), stride_vh=v.stride(1), stride_vs=v.stride(2),
        stride_ob=o.stride(0), stride_oh=o.stride(1), stride_os=o.stride(2),
        H=H, S=S, sm_scale=float(sm_scale),
        D=D, BLOCK_M=block_m, BLOCK_N=block_n, CAUSAL=bool(causal),
        num_warps=4 if D <= 64 else 8, num_stages=(3 if D <= 64 else 2) if q.is_cuda else 1,
    )
    return o
