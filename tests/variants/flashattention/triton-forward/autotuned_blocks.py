# drill: flashattention/triton-forward
# variant: block sizes, warps and stages chosen by triton.autotune (a grid lambda of the chosen BLOCK_M)
"""FlashAttention forward in Triton with the block sizes left to triton.autotune.

The autotuner times each config on the first call for a new (S, D, causal) and then launches the
fastest; its trial launches are timing runs, the call still makes one launch of the kernel. On a
GPU the timing is triton.testing.do_bench; under the interpreter nothing can be timed, so every
config gets the same time and the first one is used.
"""

import math
import os

import torch
import triton
import triton.language as tl


def _timer(kernel_call, quantiles):
    """do_bench on a GPU; under the interpreter one run and a flat time for every config."""
    if torch.cuda.is_available():
        return triton.testing.do_bench(kernel_call, quantiles=quantiles)
    kernel_call()
    return [1.0] * len(quantiles)


if os.environ.get("TRITON_INTERPRET") == "1":
    _CONFIGS = [triton.Config({"BLOCK_M": 32, "BLOCK_N": 16}, num_warps=4, num_stages=1),
                triton.Config({"BLOCK_M": 16, "BLOCK_N": 32}, num_warps=4, num_stages=1)]
else:
    _CONFIGS = [triton.Config({"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=4, num_stages=3),
                triton.Config({"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=8, num_stages=2),
                triton.Config({"BLOCK_M": 64, "BLOCK_N": 64}, num_warps=4, num_stages=2)]


@triton.autotune(configs=_CONFIGS, key=["S", "D", "CAUSAL"], do_bench=_timer)
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
    pid_m = tl.program_id(0)  # which block of queries
    pid_bh = tl.program_id(1)  # which (batch, head): pid_bh = b * H + h
    b = pid_bh // H
    h = pid_bh % H

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # [BLOCK_M] query rows of this block
    offs_n = tl.arange(0, BLOCK_N)  # [BLOCK_N] key rows, relative to the key block
    offs_d = tl.arange(0, D)  # [D]
    row_ok = offs_m < S  # the last query block may stick out past S

    # Each tensor has its own strides: never assume q, k, v and o share a layout.
    q_base = Q + b * stride_qb + h * stride_qh
    k_base = K + b * stride_kb + h * stride_kh
    v_base = V + b * stride_vb + h * stride_vh
    o_base = O + b * stride_ob + h * stride_oh

    q = tl.load(q_base + offs_m[:, None] * stride_qs + offs_d[None, :],
                mask=row_ok[:, None], other=0.0)  # [BLOCK_M, D]

    # Online-softmax state, in fp32 whatever the input dtype.
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)  # running max of each row
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)  # running sum of exp(s - m)
    acc = tl.zeros([BLOCK_M, D], dtype=tl.float32)  # running sum of exp(s - m) * v

    # Causal: no query of this block sees a key past its last row, so stop there.
    if CAUSAL:
        hi = tl.minimum((pid_m + 1) * BLOCK_M, S)
    else:
        hi = S

    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n  # [BLOCK_N] key rows of this block
        col_ok = cols < S
        k = tl.load(k_base + cols[:, None] * stride_ks + offs_d[None, :],
                    mask=col_ok[:, None], other=0.0)  # [BLOCK_N, D]
        v = tl.load(v_base + cols[:, None] * stride_vs + offs_d[None, :],
                    mask=col_ok[:, None], other=0.0)  # [BLOCK_N, D]

        s = tl.dot(q, tl.trans(k)) * sm_scale  # [BLOCK_M, BLOCK_N], fp32
        # Keys past S were loaded as zeros, which would score 0, not "absent": mask them to -inf.
        keep = col_ok[None, :]
        if CAUSAL:
            keep = keep & (cols[None, :] <= offs_m[:, None])  # query i sees keys j <= i
        s = tl.where(keep, s, float("-inf"))

        # Every row sees key 0 in the first block, so m_new is finite from then on and
        # exp(m_i - m_new) never meets -inf - (-inf).
        m_new = tl.maximum(m_i, tl.max(s, 1))  # [BLOCK_M]
        alpha = tl.exp(m_i - m_new)  # <= 1: moves the old state onto the new max
        p = tl.exp(s - m_new[:, None])  # [BLOCK_M, BLOCK_N]
        l_i = l_i * alpha + tl.sum(p, 1)
        # P is cast to the input dtype only for the matmul; acc stays fp32.
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new

    o = acc / l_i[:, None]  # divide once, at the end (FlashAttention-2)
    tl.store(o_base + offs_m[:, None] * stride_os + offs_d[None, :],
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

    grid = lambda meta: (triton.cdiv(S, meta["BLOCK_M"]), B * H)  # noqa: E731 - the chosen BLOCK_M
    _flash_forward_kernel[grid](
        q, k, v, o,
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        o.stride(0), o.stride(1), o.stride(2),
        H, S, float(sm_scale),
        D=D, CAUSAL=bool(causal),
    )
    return o
