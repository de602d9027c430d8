# drill: flashattention/triton-forward
# variant: causal by masking alone: every key block is visited and the scores above the diagonal set to -inf
"""A FlashAttention forward kernel in Triton that does not skip the causal mask's empty blocks:
it walks every key block for every query block and masks. Twice the work of skipping under
the mask, but the same attention."""

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
    b = pid_bh // H
    h = pid_bh % H
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, D)
    q = tl.load(Q + b * stride_qb + h * stride_qh + rows[:, None] * stride_qs + dims[None, :],
                mask=(rows < S)[:, None], other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, D], dtype=tl.float32)
    for start_n in range(0, S, BLOCK_N):
        cols = start_n + tl.arange(0, BLOCK_N)
        k = tl.load(K + b * stride_kb + h * stride_kh + cols[:, None] * stride_ks + dims[None, :],
                    mask=(cols < S)[:, None], other=0.0)
        v = tl.load(V + b * stride_vb + h * stride_vh + cols[:, None] * stride_vs + dims[None, :],
                    mask=(cols < S)[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k)) * sm_scale
        visible = (cols < S)[None, :]
        if CAUSAL:
            visible = visible & (cols[None, :] <= rows[:, None])
        s = tl.where(visible, s, float("-inf"))
        # A block wholly above a row's diagonal leaves its max where it was: key 0, seen in the
        # first block, keeps m finite.
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        l_i = alpha * l_i + tl.sum(p, 1)
        acc = alpha[:, None] * acc + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    tl.store(O + b * stride_ob + h * stride_oh + rows[:, None] * stride_os + dims[None, :],
             (acc / l_i[:, None]).to(O.dtype.element_ty), mask=(rows < S)[:, None])


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
        BLOCK_M, BLOCK_N = 32, 16
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
