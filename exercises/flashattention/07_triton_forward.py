# drill: flashattention/triton-forward
"""A FlashAttention forward kernel in Triton.

    o = softmax(q kᵀ · sm_scale) v        q, k, v, o: [B, H, S, D]; sm_scale defaults to 1/√D
                                          (None only: 0.0 is a scale); q, k, v left unchanged
    causal=True: query i sees only keys j <= i (q and k have the same length S)

The launcher below is written for you: it allocates o, works out the grid and passes every
stride. Your job is the body of `_flash_forward_kernel`: that one launch computes o (no second
kernel, no torch computing beside it). One program handles one block of BLOCK_M queries of one
(batch, head); the grid is

    (triton.cdiv(S, BLOCK_M), B * H)      axis 0: which query block, axis 1: b * H + h

Inside a program, walk over the keys in blocks of BLOCK_N and keep, for each query row, the
online-softmax state in fp32 (exercise 01 in vector form):

    m   [BLOCK_M]      running max of the scores seen so far          (start -inf)
    l   [BLOCK_M]      running sum of exp(score - m)                   (start 0)
    acc [BLOCK_M, D]   running sum of exp(score - m) · v               (start 0)

and write acc / l once, at the end. S need not be a multiple of the block sizes.

Tiny example: B = H = 1, S = 2, D = 16, q = k = 0 (all scores equal): every row of o is the
mean of the two rows of v.

Without a GPU, drill runs your kernel under the Triton interpreter (TRITON_INTERPRET=1) on
small fp32 shapes: correctness only. On a GPU it checks fp16 and bf16 and times your kernel
against drill's reference kernel and PyTorch's SDPA.
Triton reminders: tl.arange(0, N) needs a power of two; tl.load(ptrs, mask=..., other=0.0);
tl.dot(a, b) on [M, K] x [K, N] blocks; tl.trans(k); tl.max(x, 1) and tl.sum(x, 1) reduce
rows; tl.where(cond, x, y); tl.exp; x.to(tl.float16). Use pointer arithmetic, not
tl.make_block_ptr (recent Triton interpreters no longer accept it).

Check your work:  drill check 07_triton_forward.py
"""

import math

import torch
import triton
import triton.language as tl


@triton.jit
def _flash_forward_kernel(
    Q, K, V, O,                               # pointers to the first element of q, k, v, o
    stride_qb, stride_qh, stride_qs,          # q's strides along B, H, S (along D it is 1)
    stride_kb, stride_kh, stride_ks,
    stride_vb, stride_vh, stride_vs,
    stride_ob, stride_oh, stride_os,
    H, S, sm_scale,
    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
):
    # TODO: which work is mine? pid_m = tl.program_id(0) picks the query block,
    #       tl.program_id(1) = b * H + h picks the (batch, head).
    # TODO: offsets: the query rows of this block [BLOCK_M], the key rows of one key block
    #       [BLOCK_N] and the head dim [D]; the start of this head in q, k, v and o, using
    #       each tensor's own batch and head strides.
    # TODO: load the Q block [BLOCK_M, D], masking rows past S.
    # TODO: m [BLOCK_M] = -inf, l [BLOCK_M] = 0, acc [BLOCK_M, D] = 0, all tl.float32.
    # TODO: for each key block (range(0, S, BLOCK_N); causal: no query here sees keys past
    #       this block's last row):
    #         load K_j, V_j [BLOCK_N, D], masking rows past S
    #         s = (Q K_jᵀ) · sm_scale                       [BLOCK_M, BLOCK_N], fp32
    #         set s to -inf where the key is past S (and, if CAUSAL, where key > query)
    #         m_new = max(m, rowmax s); alpha = exp(m - m_new); p = exp(s - m_new)
    #         l = alpha · l + rowsum p; acc = alpha · acc + p V_j  (p cast to V's dtype)
    # TODO: o = acc / l; store it in O's dtype, masking rows past S.
    pass


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
    # TODO: remove this line once the kernel writes o.
    raise NotImplementedError("write the body of _flash_forward_kernel")
    return o
