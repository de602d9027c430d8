# drill: flashattention/triton-forward
# variant: key blocks walked from the last one back to the first (rows with no visible key yet kept NaN-free), q pre-scaled by sm_scale·log2(e) in registers with tl.exp2, grid given as a lambda of the launch's meta-parameters
"""A FlashAttention forward kernel in Triton that visits the key blocks in reverse. Under the
causal mask the first blocks visited may hide every key from some rows, so the running max
can still be -inf: the kernel subtracts a safe max (0 for such rows) so no exp(-inf + inf)
appears. The query block is multiplied by sm_scale·log2(e) once, on chip, and the softmax
runs in base 2."""

import math

import torch
import triton
import triton.language as tl

LOG2E = 1.4426950408889634


@triton.jit
def _flash_forward_kernel(
    Q, K, V, O,
    stride_qb, stride_qh, stride_qs,
    stride_kb, stride_kh, stride_ks,
    stride_vb, stride_vh, stride_vs,
    stride_ob, stride_oh, stride_os,
    H, S, qk_scale,
    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // H
    h = pid_bh % H
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    q = tl.load(Q + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qs + offs_d[None, :],
                mask=offs_m[:, None] < S, other=0.0)
    q = (q * qk_scale).to(Q.dtype.element_ty)  # scores come out in log2 units
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, D], dtype=tl.float32)
    hi = S
    if CAUSAL:
        hi = tl.minimum((pid_m + 1) * BLOCK_M, S)
    n_blocks = tl.cdiv(hi, BLOCK_N)
    for i in range(0, n_blocks):
        start_n = (n_blocks - 1 - i) * BLOCK_N  # last block first
        cols = start_n + offs_n
        k = tl.load(K + b * stride_kb + h * stride_kh + cols[:, None] * stride_ks + offs_d[None, :],
                    mask=cols[:, None] < S, other=0.0)
        v = tl.load(V + b * stride_vb + h * stride_vh + cols[:, None] * stride_vs + offs_d[None, :],
                    mask=cols[:, None] < S, other=0.0)
        s = tl.dot(q, tl.trans(k))
        keep = cols[None, :] < S
        if CAUSAL:
            keep = keep & (cols[None, :] <= offs_m[:, None])
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # no key seen yet: nothing to scale
        alpha = tl.exp2(m_i - m_safe)
        p = tl.exp2(s - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    acc = acc / l_i[:, None]
    tl.store(O + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_os + offs_d[None, :],
             acc.to(O.dtype.element_ty), mask=offs_m[:, None] < S)


def flash_attention(q, k, v, causal=False, sm_scale=None):
    """softmax(q kᵀ · sm_scale) v for q, k, v [B, H, S, D]; causal: query i sees keys j <= i."""
    assert q.dim() == 4 and q.shape == k.shape == v.shape, "q, k, v must all be [B, H, S, D]"
    assert q.dtype == k.dtype == v.dtype and q.device == k.device == v.device
    B, H, S, D = q.shape
    assert D in (16, 32, 64, 128), "head dim must be 16, 32, 64 or 128"
    if sm_scale is None:
        sm_scale = D ** -0.5
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    o = torch.empty((B, H, S, D), dtype=q.dtype, device=q.device)
    if q.is_cuda:
        cfg = dict(BLOCK_M=128, BLOCK_N=64, num_warps=4 if D <= 64 else 8, num_stages=3 if D <= 64 else 2)
    else:
        cfg = dict(BLOCK_M=32, BLOCK_N=16, num_warps=4, num_stages=1)
    grid = lambda meta: (triton.cdiv(S, meta["BLOCK_M"]), B * H)  # noqa: E731
    _flash_forward_kernel[grid](
        q, k, v, o,
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        o.stride(0), o.stride(1), o.stride(2),
        H, S, float(sm_scale) * LOG2E,
        D=D, CAUSAL=bool(causal), **cfg,
    )
    return o
