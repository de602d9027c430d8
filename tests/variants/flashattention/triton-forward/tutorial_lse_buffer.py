# drill: flashattention/triton-forward
# variant: the fused-attention tutorial's shape: scale·log2(e) folded in the launcher, acc passed into tl.dot, all four strides (D's too) passed and used with int64 head offsets, tl.range key loop, a 3-D grid (Q blocks, B·H, 1), and a per-row logsumexp written to a side buffer nobody returns
"""Forward attention in the style of Triton's fused-attention tutorial, in my own words.

The launcher hands the kernel qk_scale = sm_scale · log2(e) so the kernel works in base 2
(exp2), and a float32 buffer M [B, H, S] where each program leaves its rows' logsumexp
(base 2), as a backward pass would want; this exercise returns only o.
"""

import torch
import triton
import triton.language as tl

LOG2E = 1.4426950408889634

@triton.jit
def _attn_fwd(Q, K, V, M, Out, qk_scale,
              stride_qz, stride_qh, stride_qm, stride_qk,
              stride_kz, stride_kh, stride_kn, stride_kk,
              stride_vz, stride_vh, stride_vn, stride_vk,
              stride_oz, stride_oh, stride_om, stride_ok,
              H, N_CTX,
              HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, IS_CAUSAL: tl.constexpr):
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    off_z = off_hz // H
    off_h = off_hz % H
    q_base = Q + off_z.to(tl.int64) * stride_qz + off_h.to(tl.int64) * stride_qh
    k_base = K + off_z.to(tl.int64) * stride_kz + off_h.to(tl.int64) * stride_kh
    v_base = V + off_z.to(tl.int64) * stride_vz + off_h.to(tl.int64) * stride_vh
    o_base = Out + off_z.to(tl.int64) * stride_oz + off_h.to(tl.int64) * stride_oh

    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    m_ok = offs_m < N_CTX

    q = tl.load(q_base + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qk, mask=m_ok[:, None], other=0.0)
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)

    hi = N_CTX
    if IS_CAUSAL:
        hi = tl.minimum((start_m + 1) * BLOCK_M, N_CTX)
    for start_n in tl.range(0, hi, BLOCK_N):
        cols = start_n + offs_n
        n_ok = cols < N_CTX
        k = tl.load(k_base + cols[:, None] * stride_kn + offs_d[None, :] * stride_kk, mask=n_ok[:, None], other=0.0)
        v = tl.load(v_base + cols[:, None] * stride_vn + offs_d[None, :] * stride_vk, mask=n_ok[:, None], other=0.0)
        qk = tl.dot(q, tl.trans(k)) * qk_scale
        keep = n_ok[None, :]
        if IS_CAUSAL:
            keep = keep & (offs_m[:, None] >= cols[None, :])
        qk = tl.where(keep, qk, float("-inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.math.exp2(qk - m_ij[:, None])
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_ij

    m_i += tl.math.log2(l_i)
    acc = acc / l_i[:, None]
    tl.store(M + off_hz * N_CTX + offs_m, m_i, mask=m_ok)
    tl.store(o_base + offs_m[:, None] * stride_om + offs_d[None, :] * stride_ok,
             acc.to(Out.dtype.element_ty), mask=m_ok[:, None])

def flash_attention(q, k, v, causal=False, sm_scale=None):
    HEAD_DIM = q.shape[-1]
    assert HEAD_DIM == k.shape[-1] == v.shape[-1] and HEAD_DIM in {16, 32, 64, 128}
    if sm_scale is None:
        sm_scale = HEAD_DIM ** -0.5
    o = torch.empty_like(q)
    M = torch.empty((q.shape[0], q.shape[1], q.shape[2]), device=q.device, dtype=torch.float32)
    if q.is_cuda:
        BLOCK_M, BLOCK_N, warps, stages = 128, 64, (4 if HEAD_DIM <= 64 else 8), 3
    else:
        BLOCK_M, BLOCK_N, warps, stages = 64, 32, 4, 1
    grid = (triton.cdiv(q.shape[2], BLOCK_M), q.shape[0] * q.shape[1], 1)
    _attn_fwd[grid](
        q, k, v, M, o, sm_scale * LOG2E,
        q.stride(0), q.stride(1), q.stride(2), q.stride(3),
        k.stride(0), k.stride(1), k.stride(2), k.stride(3),
        v.stride(0), v.stride(1), v.stride(2), v.stride(3),
        o.stride(0), o.stride(1), o.stride(2), o.stride(3),
        q.shape[1], q.shape[2],
        HEAD_DIM=HEAD_DIM, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, IS_CAUSAL=causal,
        num_warps=warps, num_stages=stages)
    return o
