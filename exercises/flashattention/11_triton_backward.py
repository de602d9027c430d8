# drill: flashattention/triton-backward
"""The FlashAttention backward in Triton.

    forward:   s = q kᵀ · sm_scale,  p = softmax(s),  o = p v      q, k, v, o: [B, H, S, D]
    given:     o, lse = logsumexp(s) per row [B, H, S] (fp32, natural log), do = ∂loss/∂o
    wanted:    dq, dk, dv, each [B, H, S, D] in q's dtype          sm_scale defaults to 1/√D
                                                                   (None only: 0.0 is a scale)
    causal=True: query i sees only keys j <= i (q and k have the same length S)

The backward of one (query block i, key block j) pair, with everything recomputed on chip:

    p_ij  = exp(q_i k_jᵀ · sm_scale - lse_i)        the forward's softmax, rebuilt from lse
    dv_j += p_ijᵀ do_i
    dp_ij = do_i v_jᵀ
    ds_ij = p_ij ∘ (dp_ij - D_i)                    D = rowsum(do ∘ o), one number per row
    dq_i += ds_ij k_j · sm_scale
    dk_j += ds_ijᵀ q_i · sm_scale

The launcher below is written for you (grids, strides, outputs); write the three kernel bodies:

  _bwd_preprocess    grid (cdiv(S, BLOCK_M), B·H):  delta[b·H + h, i] = Σ_d do[b, h, i, d] · o[b, h, i, d]
  _bwd_dkdv_kernel   grid (cdiv(S, BLOCK_N), B·H):  one key block per program; loop over query blocks
  _bwd_dq_kernel     grid (cdiv(S, BLOCK_M), B·H):  one query block per program; loop over key blocks

Scores, p, dp and ds exist only block by block inside a program: no buffer keeps them (drill
counts the memory your kernels are handed besides the inputs and outputs) and no program builds
a block larger than 128 × 128 elements, let alone a whole head's S × S.

Each program owns the gradient rows it writes, so no atomics are needed (the other layout
drill accepts, one kernel over key blocks adding dq with tl.atomic_add into a zeroed fp32
buffer, needs a launcher of your own). A launcher only allocates, takes views, casts, copies
and launches: drill counts any other torch operation in your file as computing beside the
kernels (fixing up lse with torch.where, say; do that in the kernels). dk, dv, dq and delta
are fresh contiguous buffers (row i of head b·H + h starts at (b·H + h)·S·D + i·D); q, k, v, o,
do and lse arrive with their own strides. S need not be a multiple of the block sizes.

A row whose lse is -inf saw no key in the forward (its o is 0): its p row is all zeros, so its
dq row is 0 and it adds nothing to dk and dv. exp(s - (-inf)) is inf, so treat that lse
specially (for example, read it as +inf, which makes exp(s - lse) exactly 0).

Tiny example: B = H = 1, S = 1: the only row sees only key 0 with p = 1, so dv = do,
and dq = dk = 0 (ds = 1 · (do·v - do·o) = 0 because o = v).

Without a GPU, drill runs your kernels under the Triton interpreter (TRITON_INTERPRET=1) on
small fp32 shapes: correctness only. On a GPU it checks fp16 and bf16 and times your backward
against drill's reference backward and PyTorch's SDPA backward.
Triton reminders: tl.arange(0, N) needs a power of two; tl.load(ptrs, mask=..., other=0.0);
tl.dot(a, b) on [M, K] x [K, N] blocks, its operands in the same dtype (cast p and ds with
.to(do.dtype)); tl.trans(x); tl.sum(x, 1); tl.where(cond, x, y); tl.exp; tl.store(ptrs, x,
mask=...). Use pointer arithmetic, not tl.make_block_ptr.

Check your work:  drill check 11_triton_backward.py
"""

import math

import torch
import triton
import triton.language as tl


@triton.jit
def _bwd_preprocess(
    O, DO, Delta,
    stride_ob, stride_oh, stride_os,
    stride_dob, stride_doh, stride_dos,
    H, S,
    D: tl.constexpr, BLOCK_M: tl.constexpr,
):
    # TODO: pid_m = tl.program_id(0) is the query block, tl.program_id(1) = b * H + h.
    # TODO: load the o and do blocks [BLOCK_M, D] (rows past S masked, other=0.0), in fp32.
    # TODO: store rowsum(do * o) [BLOCK_M] at Delta + (b * H + h) * S + row, rows past S masked.
    pass


@triton.jit
def _bwd_dkdv_kernel(
    Q, K, V, DO, LSE, Delta, DK, DV,
    stride_qb, stride_qh, stride_qs,
    stride_kb, stride_kh, stride_ks,
    stride_vb, stride_vh, stride_vs,
    stride_dob, stride_doh, stride_dos,
    stride_lb, stride_lh,
    H, S, sm_scale,
    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
):
    # TODO: pid_n = tl.program_id(0) is the key block, tl.program_id(1) = b * H + h.
    # TODO: load K_j and V_j [BLOCK_N, D] once (rows past S masked); dk, dv = 0 in fp32.
    # TODO: for each query block start_m (causal: queries before this key block see none of it):
    #         load q_i, do_i [BLOCK_M, D], lse_i and delta_i [BLOCK_M] (rows past S masked;
    #         an lse of -inf, and rows past S, must give p = 0)
    #         s = (q_i k_jᵀ) · sm_scale; p = exp(s - lse_i); causal: p = 0 where key > query
    #         dv += p_ijᵀ do_i            (p cast to do's dtype for tl.dot)
    #         dp = do_i v_jᵀ; ds = p · (dp - delta_i)
    #         dk += ds_ijᵀ q_i            (ds cast to q's dtype)
    # TODO: dk *= sm_scale; store dk and dv (contiguous [B·H, S, D]), key rows past S masked.
    pass


@triton.jit
def _bwd_dq_kernel(
    Q, K, V, DO, LSE, Delta, DQ,
    stride_qb, stride_qh, stride_qs,
    stride_kb, stride_kh, stride_ks,
    stride_vb, stride_vh, stride_vs,
    stride_dob, stride_doh, stride_dos,
    stride_lb, stride_lh,
    H, S, sm_scale,
    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
):
    # TODO: pid_m = tl.program_id(0) is the query block, tl.program_id(1) = b * H + h.
    # TODO: load q_i, do_i [BLOCK_M, D], lse_i, delta_i [BLOCK_M] once (same masking as above);
    #       dq = 0 in fp32.
    # TODO: for each key block start_n (causal: stop after the block holding this block's last row):
    #         load k_j, v_j (rows past S masked); s, p as in the dK/dV kernel, with p = 0 for
    #         keys past S and, if CAUSAL, keys past the query
    #         dp = do_i v_jᵀ; ds = p · (dp - delta_i); dq += ds_ij k_j
    # TODO: dq *= sm_scale; store it (contiguous [B·H, S, D]), query rows past S masked.
    pass


def flash_attention_backward(q, k, v, o, lse, do, causal=False, sm_scale=None):
    """(dq, dk, dv) of o = softmax(q kᵀ · sm_scale) v, from the forward's o and lse [B, H, S] (natural log)."""
    assert q.dim() == 4 and q.shape == k.shape == v.shape == o.shape == do.shape, \
        "q, k, v, o and do must all be [B, H, S, D]"
    B, H, S, D = q.shape
    assert lse.shape == (B, H, S), "lse must be [B, H, S]"
    assert D in (16, 32, 64, 128), "head dim must be 16, 32, 64 or 128"
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(D)
    # The kernels step along D with stride 1 (and along S with stride 1 in lse).
    q, k, v, o, do = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v, o, do))
    lse = lse.float()
    lse = lse if lse.stride(-1) == 1 else lse.contiguous()

    # Fresh, contiguous outputs, in the inputs' dtype; Delta in fp32.
    dq = torch.empty((B, H, S, D), dtype=q.dtype, device=q.device)
    dk = torch.empty((B, H, S, D), dtype=q.dtype, device=q.device)
    dv = torch.empty((B, H, S, D), dtype=q.dtype, device=q.device)
    delta = torch.empty((B, H, S), dtype=torch.float32, device=q.device)

    if q.is_cuda:
        # The dK/dV kernel keeps two [BLOCK_N, D] fp32 accumulators and streams thin query
        # blocks; the dQ kernel keeps one [BLOCK_M, D] and streams thin key blocks.
        KV_BLOCKS, Q_BLOCKS = (32, 64), (64, 32)  # (BLOCK_M, BLOCK_N) of each kernel
        # At D = 128 Triton 3.6 on Hopper computes a wrong dK with two pipeline stages in this
        # kernel pair (seen on an H200, most seeds); one stage is right.
        num_warps, num_stages = (4, 2) if D <= 64 else (8, 1)
    else:  # the Triton interpreter: small, unequal blocks
        KV_BLOCKS, Q_BLOCKS = (16, 32), (32, 16)
        num_warps, num_stages = 4, 1

    _bwd_preprocess[(triton.cdiv(S, Q_BLOCKS[0]), B * H)](
        o, do, delta,
        o.stride(0), o.stride(1), o.stride(2),
        do.stride(0), do.stride(1), do.stride(2),
        H, S, D=D, BLOCK_M=Q_BLOCKS[0],
    )
    strides = (q.stride(0), q.stride(1), q.stride(2),
               k.stride(0), k.stride(1), k.stride(2),
               v.stride(0), v.stride(1), v.stride(2),
               do.stride(0), do.stride(1), do.stride(2),
               lse.stride(0), lse.stride(1))
    meta = dict(D=D, CAUSAL=bool(causal), num_warps=num_warps, num_stages=num_stages)
    # One program per key block for dK/dV, then one per query block for dQ.
    _bwd_dkdv_kernel[(triton.cdiv(S, KV_BLOCKS[1]), B * H)](
        q, k, v, do, lse, delta, dk, dv, *strides, H, S, float(sm_scale),
        BLOCK_M=KV_BLOCKS[0], BLOCK_N=KV_BLOCKS[1], **meta)
    _bwd_dq_kernel[(triton.cdiv(S, Q_BLOCKS[0]), B * H)](
        q, k, v, do, lse, delta, dq, *strides, H, S, float(sm_scale),
        BLOCK_M=Q_BLOCKS[0], BLOCK_N=Q_BLOCKS[1], **meta)
    # TODO: remove this line once the kernels write delta, dk, dv and dq.
    raise NotImplementedError("write the bodies of _bwd_preprocess, _bwd_dkdv_kernel and _bwd_dq_kernel")
    return dq, dk, dv
