"""Reference FlashAttention-2 in Triton: forward, backward, LSE, bottom-right causal mask, GQA,
sliding window, packed (varlen) batches.

Shapes: q [B, H, Sq, D]; k and v [B, Hkv, Sk, D] with Hkv dividing H (grouped-query
attention: query head h reads key/value head h // (H / Hkv); Hkv = 1 is multi-query).
Any strides with a contiguous last dimension are read in place: in particular the
[B, S, H, D] layout most models hold, passed as `x.transpose(1, 2)`, is not copied, and the
output and the gradients come back in the layout of the input they belong to (o and dq
like q, dk like k, dv like v). A tensor whose last dimension is not contiguous is copied
once. D is a power of two from 16 to 256.

Precision: fp16 and bf16 run their matmuls on the tensor cores with fp32 accumulation.
fp32 follows PyTorch's rule for matmuls: fp32 accuracy unless torch.backends.cuda.matmul
allows TF32 (allow_tf32 = True or fp32_precision = "tf32"). The accurate path is "tf32x3"
(each product as three TF32 matmuls on split operands): on the H200 its errors against
float64 are those of the scalar-FMA "ieee" path and of SDPA EFFICIENT (4e-7 to 4e-6) at
18-34 TFLOP/s, where "ieee" runs at 2-4 (BENCHMARKS.md, fp32 table).

On Hopper, dispatch.py's forward plan may run gluon_fwd.py's warp-specialised Gluon kernel
instead of this file's, for the calls it covers; the backward below serves either, as both
write the same o and lse. This file knows nothing of that plan: it is one backend, with its own
launch-config tuner.

Forward (one program per (query block, batch*head)):
    Q_i [BLOCK_M, D] stays in registers; K_j, V_j [BLOCK_N, D] stream past it.
    s = Q_i K_j^T * scale * log2(e)            # base-2 scores, [BLOCK_M, BLOCK_N]
    m' = max(m, rowmax s); p = 2^(s - m')       # online softmax with exp2
    l = 2^(m - m') l + rowsum p; acc = 2^(m - m') acc + p V_j
    o = acc / l;  lse = (m + log2 l) * ln 2     # the saved statistic, natural log
  The key loop runs in two stages: blocks every row of the query block sees in full (no
  mask arithmetic), then the few blocks on the causal diagonal or past the ragged end of K,
  where scores are masked to -inf. In the first stage a fraction of the exponentials (the
  launch config's POLY: none, a half or a quarter of the columns) may be computed by a
  polynomial on the FMA units instead of the special-function unit (FlashAttention-4's
  trick; kernels/NOTES.md has the arithmetic). Exact fp32 never uses it.

Causal masking is aligned to the bottom right (FlashAttention >= 2.1): query i sees key j
iff j <= i + Sk - Sq. A row that sees no key gets o = 0, lse = -inf and zero gradients.

Sliding window (constexpr WINDOW, runtime WIN_L, WIN_R >= 0): query i sees keys
j0 - WIN_L <= j <= j0 + WIN_R, j0 = i + Sk - Sq. A query block visits only the key blocks the
band touches, masked on its two edges and unmasked between (_window_keys); a key block of the
dK/dV pass visits only the query blocks whose band reaches it (_window_rows).

Packed batches (constexpr VARLEN): q, k, v are [total, heads, D] tensors seen as [1, heads,
total, D]; the grid's batch index is a sequence, whose bounds come from int32 cumulative
lengths (CU_Q, CU_K); lse, delta are [H, total_q]; programs past a shorter sequence's end
return at once. Tiles go through pointers or per-program descriptors sized to the sequence
(MODE 0 or 1), never host descriptors, which would let a ragged tile read the next sequence.

Backward (deterministic: every output element is written by exactly one program):
    preprocess: delta_i = rowsum(dO_i * O_i) - dlse_i; lse2 = lse * log2(e) (+inf if empty)
    dK/dV pass: one program per (key block, key/value head), looping over the query heads
      of its group and, for each, over query blocks (so a group's sum has a fixed order):
        p^T = 2^(K Q^T * scale*log2e - lse2);  dV += p^T dO;  dp^T = V dO^T
        ds^T = p^T (dp^T - delta);  dK += ds^T Q * scale
    dQ pass: one program per query block, looping over key blocks:
        p = 2^(Q K^T * scale*log2e - lse2);  dp = dO V^T;  ds = p (dp - delta);  dQ += ds K * scale
  On Hopper, dispatch.py's backward plan may run gluon_bwd.py's kernel for either pass (the same
  loops and sums, warp-specialised like the forward), so the result stays bitwise reproducible
  either way.

Three ways of moving tiles, picked at launch by the constexpr MODE:
  2 host tensor descriptors, one per tensor, over a 2-D [rows, row stride] view of its
    memory; head (b, h) starts at element offset b*stride_b + h*stride_h, i.e. at row
    offset // row_stride and column offset % row_stride. That covers the contiguous
    [B, H, S, D] layout (column 0, rows b*H*S + h*S) and [B, S, H, D] (rows b*S, column
    h*D) alike. Used when every head's columns fit inside one row stride and the block
    sizes divide Sq and Sk, so no tile crosses into a neighbouring head (the fast Hopper
    path: TMA bulk copies, nothing to set up per program).
  1 tensor descriptors built in the kernel per head (tl.make_tensor_descriptor): TMA as
    well; out-of-range rows read as zero and are never written, so ragged blocks are safe.
  0 plain pointer arithmetic with masked loads: any CUDA GPU, odd alignments.
All three run under TRITON_INTERPRET=1 (tl.make_block_ptr does not, on Triton 3.9).
"""

from __future__ import annotations

import os
from typing import NamedTuple

import torch
import triton
import triton.language as tl
import triton.runtime.errors
from triton.tools.tensor_descriptor import TensorDescriptor

from .common import LOG2E, bucket, empty_in_layout, host_ok, last_dim_contiguous
from .fastlaunch import FastLaunch
from .fastlaunch import interpreting as _interpreting


# --------------------------------------------------------------------------- helpers


@triton.jit
def _tile_source(base, offset, n_rows, stride_row, BLOCK: tl.constexpr, D: tl.constexpr, MODE: tl.constexpr):
    """What tiles of one head's [n_rows, D] matrix are read through (MODE: module docstring)."""
    if MODE == 1:
        return tl.make_tensor_descriptor(base + offset, shape=[n_rows, D], strides=[stride_row, 1],
                                         block_shape=[BLOCK, D])
    elif MODE == 2:
        return base  # a host descriptor over the tensor's [rows, row stride] view
    else:
        return base + offset


@triton.jit
def _origin(offset, stride_row):
    """(row, column) where a head starting at element `offset` begins in a [rows, stride_row]
    view; used by MODE 2 only (and optimised away otherwise)."""
    return (offset // stride_row).to(tl.int32), (offset % stride_row).to(tl.int32)


@triton.jit
def _head(base, b, h, stride_b, stride_h, n_rows, stride_row, BLOCK: tl.constexpr, D: tl.constexpr,
          MODE: tl.constexpr):
    """Head h of batch b of a [B, H, n_rows, D]-shaped tensor (any strides): its tile source and
    the (row, column) where it begins, for _load_rows and _store_rows."""
    offset = b * stride_b + h * stride_h
    r0, c0 = _origin(offset, stride_row)
    return _tile_source(base, offset, n_rows, stride_row, BLOCK, D, MODE), r0, c0


@triton.jit
def _load_rows(src, r0, c0, row0, n_rows, stride_row, BLOCK: tl.constexpr, D: tl.constexpr, MODE: tl.constexpr):
    """Rows [row0, row0 + BLOCK) of one head, zeros past n_rows. -> [BLOCK, D]"""
    if MODE == 1:
        return src.load([row0, 0])
    elif MODE == 2:
        return src.load([r0 + row0, c0])
    else:
        rows = row0 + tl.arange(0, BLOCK)
        ptrs = src + rows[:, None] * stride_row + tl.arange(0, D)[None, :]
        return tl.load(ptrs, mask=rows[:, None] < n_rows, other=0.0)


@triton.jit
def _store_rows(dst, r0, c0, row0, n_rows, stride_row, x, BLOCK: tl.constexpr, D: tl.constexpr,
                MODE: tl.constexpr):
    """Write x [BLOCK, D] to rows [row0, row0 + BLOCK), dropping rows past n_rows."""
    if MODE == 1:
        dst.store([row0, 0], x)
    elif MODE == 2:
        dst.store([r0 + row0, c0], x)
    else:
        rows = row0 + tl.arange(0, BLOCK)
        ptrs = dst + rows[:, None] * stride_row + tl.arange(0, D)[None, :]
        tl.store(ptrs, x, mask=rows[:, None] < n_rows)


@triton.jit
def _exp2_fma(x):
    """2^x for x <= 0 without the special-function unit (FlashAttention-4's trick).

    Adding 1.5 * 2^23 rounds x to an integer j held in the low mantissa bits of t; 2^f for
    f = x - j in [-0.5, 0.5] is a degree-3 minimax polynomial (relative error 7.5e-5, below
    the rounding of P to bf16 or fp16); shifting t's bits left by 23 leaves j << 23, which
    added to the polynomial's bits scales it by 2^j. x is clamped at -125 so the result
    stays a normal number (2^-125 where the hardware would give 0: harmless beside l >= 1).
    """
    x = tl.maximum(x, -125.0)
    t = x + 12582912.0
    j = t - 12582912.0
    f = x - j
    p = ((0.05517143 * f + 0.24261081) * f + 0.69326097) * f + 0.9999281
    bits = p.to(tl.int32, bitcast=True) + (t.to(tl.int32, bitcast=True) << 23)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _exp2_mixed(x, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, POLY: tl.constexpr):
    """2^x of a score tile, 1/POLY of its columns through _exp2_fma (POLY = 0: none).

    The columns are picked so each thread keeps its own elements: Hopper's matmul result
    gives a thread pairs of adjacent columns, so splitting off the odd columns is a
    relabelling of registers; for a quarter the odd columns are split again by the parity
    of their 8-column group, which a thread also holds both of."""
    if POLY == 0:
        return tl.math.exp2(x)
    a, b = tl.split(tl.reshape(x, [BLOCK_M, BLOCK_N // 2, 2]))
    if POLY == 2:
        eb = _exp2_fma(b)
    else:
        b0, b1 = tl.split(tl.permute(tl.reshape(b, [BLOCK_M, BLOCK_N // 16, 2, 4]), (0, 1, 3, 2)))
        eb = tl.reshape(tl.permute(tl.join(tl.math.exp2(b0), _exp2_fma(b1)), (0, 1, 3, 2)),
                        [BLOCK_M, BLOCK_N // 2])
    return tl.reshape(tl.join(tl.math.exp2(a), eb), [BLOCK_M, BLOCK_N])


@triton.jit
def _sequence(CU_Q, CU_K, b):
    """Sequence b of a packed (varlen) batch: (its first query row, its query count, its first key
    row, its key count), from the cumulative lengths."""
    q_first = tl.load(CU_Q + b)
    k_first = tl.load(CU_K + b)
    return q_first, tl.load(CU_Q + b + 1) - q_first, k_first, tl.load(CU_K + b + 1) - k_first


@triton.jit
def _window_keys(start_m, SQ, SK, WIN_L, WIN_R, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """The key blocks a query block [start_m, start_m + BLOCK_M) visits under a sliding window:
    (lo, full_lo, full_hi, hi) with masked blocks in [lo, full_lo) and [full_hi, hi) and blocks
    every row sees in full in [full_lo, full_hi). Blocks outside [lo, hi) are never loaded: that
    is the whole saving of a window. lo and full_lo, full_hi are multiples of BLOCK_N (or hi).

    Row i sees keys [i + shift - WIN_L, i + shift + WIN_R] within [0, SK), so the block's keys run
    from its first row's left edge to its last real row's right edge, and every row sees the
    intersection of its last row's left edge and its first row's right edge."""
    shift = SK - SQ
    last = tl.minimum(start_m + BLOCK_M, SQ) - 1
    lo = tl.maximum(start_m + shift - WIN_L, 0) // BLOCK_N * BLOCK_N
    hi = tl.maximum(tl.minimum(last + shift + WIN_R + 1, SK), lo)  # lo: no key at all, nothing to visit
    full_lo = tl.minimum(tl.maximum(tl.cdiv(last + shift - WIN_L, BLOCK_N) * BLOCK_N, lo), hi)
    full_hi = tl.minimum(start_m + shift + WIN_R + 1, hi) // BLOCK_N * BLOCK_N
    full_hi = tl.maximum(full_hi, full_lo)
    return lo, full_lo, full_hi, hi


@triton.jit
def _query_program(Q, K, V, CU_Q, CU_K, sqb, sqh, sqs, skb, skh, sks, svb, svh, svs, H, G, SQ, SK, WIN_L, WIN_R,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr, CAUSAL: tl.constexpr,
                   WINDOW: tl.constexpr, VARLEN: tl.constexpr, MODE: tl.constexpr):
    """The set-up shared by the programs that own one query block (forward and dQ), so the
    masking bounds are written once: which rows, which keys, and what q, k, v tiles come through.

    Keys [key_lo, full_end) are seen in full by every row of the block (no mask); [full_end,
    diag_end) straddle the causal diagonal, the window's right edge or the ragged end of K
    (masked); with a window, [win_lo, key_lo) straddle its left edge (masked); other keys are never
    visited. The mask is aligned bottom-right: row i's diagonal key is rows_shifted[i] = i + SK - SQ.

    VARLEN: q, k, v are packed [total, heads, D] tensors seen as [1, heads, total, D], and the
    host passes each row stride as the batch stride, so the batch term of a head's offset becomes
    the sequence's first row (b_q, b_k); SQ, SK (the packed totals on entry) become the sequence's
    lengths, and the per-row statistics (lse, delta) of the [H, total_q] arrays start at stat.
    Every branch is on a constexpr, so each specialisation compiles to what the inlined code gave.
    """
    pid_m = tl.program_id(0)
    if CAUSAL:
        # heavy (late) query blocks first, so the short ones fill the tail of the grid
        pid_m = tl.num_programs(0) - 1 - pid_m
    off_hz = tl.program_id(1)
    b = (off_hz // H).to(tl.int64)
    h = off_hz % H
    hk = h // G  # the key/value head of this query head's group
    start_m = pid_m * BLOCK_M
    if VARLEN:
        q_first, SQ_SEQ, k_first, SK_SEQ = _sequence(CU_Q, CU_K, b)
        stat = h * SQ + q_first  # lse is [H, total_q]
        SQ = SQ_SEQ
        SK = SK_SEQ
        b_q = q_first.to(tl.int64)
        b_k = k_first.to(tl.int64)
    else:
        stat = off_hz * SQ
        b_q = b
        b_k = b

    q_src, q_r0, q_c0 = _head(Q, b_q, h, sqb, sqh, SQ, sqs, BLOCK_M, D, MODE)
    k_src, k_r0, k_c0 = _head(K, b_k, hk, skb, skh, SK, sks, BLOCK_N, D, MODE)
    v_src, v_r0, v_c0 = _head(V, b_k, hk, svb, svh, SK, svs, BLOCK_N, D, MODE)

    rows = start_m + tl.arange(0, BLOCK_M)
    win_lo = 0
    key_lo = 0
    if CAUSAL:
        shift = SK - SQ  # bottom-right alignment: row i sees keys j <= i + shift
        full_end = tl.maximum(tl.minimum(start_m + shift + 1, SK), 0) // BLOCK_N * BLOCK_N
        diag_end = tl.minimum(start_m + BLOCK_M + shift, SK)
    elif WINDOW:
        shift = SK - SQ
        win_lo, key_lo, full_end, diag_end = _window_keys(start_m, SQ, SK, WIN_L, WIN_R, BLOCK_M, BLOCK_N)
    else:
        shift = 0
        full_end = SK // BLOCK_N * BLOCK_N
        diag_end = SK
    rows_shifted = rows + shift
    return (off_hz, b_q, h, start_m, rows, rows_shifted, win_lo, key_lo, full_end, diag_end, SQ, SK, stat,
            q_src, q_r0, q_c0, k_src, k_r0, k_c0, v_src, v_r0, v_c0)


@triton.jit
def _keep(cols, rows_shifted, SK, WIN_L, WIN_R, CAUSAL: tl.constexpr, WINDOW: tl.constexpr):
    """[BLOCK_M, BLOCK_N] mask of the keys `cols` each row sees (rows by their diagonal key)."""
    keep = cols[None, :] < SK
    if CAUSAL:
        keep = keep & (cols[None, :] <= rows_shifted[:, None])
    if WINDOW:
        off = cols[None, :] - rows_shifted[:, None]  # key minus the row's diagonal key
        keep = keep & (off >= -WIN_L) & (off <= WIN_R)
    return keep


# --------------------------------------------------------------------------- forward


@triton.jit
def _fwd_inner(acc, l_i, m_i, q, k_src, k_r0, k_c0, v_src, v_r0, v_c0, sks, svs, SK, lo, hi, rows_shifted, qk_scale,
               WIN_L, WIN_R, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr, MASKED: tl.constexpr,
               CAUSAL: tl.constexpr, WINDOW: tl.constexpr, MODE: tl.constexpr, POLY: tl.constexpr,
               PREC: tl.constexpr):
    for start_n in tl.range(lo, hi, BLOCK_N):
        k = _load_rows(k_src, k_r0, k_c0, start_n, SK, sks, BLOCK_N, D, MODE)  # [BLOCK_N, D]
        qk = tl.dot(q, tl.trans(k), input_precision=PREC)  # [BLOCK_M, BLOCK_N], fp32
        if MASKED:
            keep = _keep(start_n + tl.arange(0, BLOCK_N), rows_shifted, SK, WIN_L, WIN_R, CAUSAL, WINDOW)
            s = tl.where(keep, qk * qk_scale, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            # a row with every key masked so far keeps m = -inf; subtract 0 instead of -inf
            m_sub = tl.where(m_new == float("-inf"), 0.0, m_new)
            p = tl.math.exp2(s - m_sub[:, None])
            alpha = tl.math.exp2(m_i - m_sub)
        else:
            # scale > 0, so max(qk) * scale = max(qk * scale); the FMA below does the rest
            m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            p = _exp2_mixed(qk * qk_scale - m_new[:, None], BLOCK_M, BLOCK_N, POLY)
            alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = _load_rows(v_src, v_r0, v_c0, start_n, SK, svs, BLOCK_N, D, MODE)  # [BLOCK_N, D]
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision=PREC)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _fwd_inner_prefetch(acc, l_i, m_i, q, k_src, k_r0, k_c0, v_src, v_r0, v_c0, sks, svs, SK, lo, hi, qk_scale,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr, MODE: tl.constexpr,
                        POLY: tl.constexpr, PREC: tl.constexpr):
    """The unmasked stage with the next block's Q K^T issued before this block's softmax.

    On Hopper the score matmul is an asynchronous wgmma: carrying its result into the next
    iteration lets the tensor cores work on block j+1 while the exp2s of block j run (the
    FlashAttention-3 overlap, within one warpgroup). Costs one wasted Q K^T per program (the
    prefetch past `hi`, which reads zeros or the first diagonal block).
    """
    k = _load_rows(k_src, k_r0, k_c0, lo, SK, sks, BLOCK_N, D, MODE)
    qk = tl.dot(q, tl.trans(k), input_precision=PREC)
    for start_n in tl.range(lo, hi, BLOCK_N):
        k_next = _load_rows(k_src, k_r0, k_c0, start_n + BLOCK_N, SK, sks, BLOCK_N, D, MODE)
        qk_next = tl.dot(q, tl.trans(k_next), input_precision=PREC)
        m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        p = _exp2_mixed(qk * qk_scale - m_new[:, None], BLOCK_M, BLOCK_N, POLY)
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = _load_rows(v_src, v_r0, v_c0, start_n, SK, svs, BLOCK_N, D, MODE)
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision=PREC)
        m_i = m_new
        qk = qk_next
    return acc, l_i, m_i


@triton.jit
def _fwd_kernel(Q, K, V, O, LSE,
                sqb, sqh, sqs, skb, skh, sks, svb, svh, svs, sob, soh, sos,
                H, G, SQ, SK, qk_scale, CU_Q, CU_K, WIN_L, WIN_R,
                D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
                MODE: tl.constexpr, PREFETCH: tl.constexpr, POLY: tl.constexpr, PREC: tl.constexpr,
                WINDOW: tl.constexpr, VARLEN: tl.constexpr):
    (off_hz, b, h, start_m, rows, rows_shifted, win_lo, key_lo, full_end, diag_end, SQ, SK, stat,
     q_src, q_r0, q_c0, k_src, k_r0, k_c0, v_src, v_r0, v_c0) = _query_program(
        Q, K, V, CU_Q, CU_K, sqb, sqh, sqs, skb, skh, sks, svb, svh, svs, H, G, SQ, SK, WIN_L, WIN_R,
        BLOCK_M, BLOCK_N, D, CAUSAL, WINDOW, VARLEN, MODE)
    if VARLEN:
        if start_m >= SQ:  # the grid covers the longest sequence; this one is shorter
            return
    o_src, o_r0, o_c0 = _head(O, b, h, sob, soh, SQ, sos, BLOCK_M, D, MODE)

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    q = _load_rows(q_src, q_r0, q_c0, start_m, SQ, sqs, BLOCK_M, D, MODE)  # [BLOCK_M, D]

    if WINDOW:  # the blocks on the window's left edge
        acc, l_i, m_i = _fwd_inner(acc, l_i, m_i, q, k_src, k_r0, k_c0, v_src, v_r0, v_c0, sks, svs, SK,
                                   win_lo, key_lo, rows_shifted, qk_scale, WIN_L, WIN_R, BLOCK_M, BLOCK_N, D, True,
                                   CAUSAL, WINDOW, MODE, 0, PREC)
    if PREFETCH:
        acc, l_i, m_i = _fwd_inner_prefetch(acc, l_i, m_i, q, k_src, k_r0, k_c0, v_src, v_r0, v_c0, sks, svs, SK,
                                            key_lo, full_end, qk_scale, BLOCK_M, BLOCK_N, D, MODE, POLY, PREC)
    else:
        acc, l_i, m_i = _fwd_inner(acc, l_i, m_i, q, k_src, k_r0, k_c0, v_src, v_r0, v_c0, sks, svs, SK,
                                   key_lo, full_end, rows_shifted, qk_scale, WIN_L, WIN_R, BLOCK_M, BLOCK_N, D, False,
                                   CAUSAL, WINDOW, MODE, POLY, PREC)
    acc, l_i, m_i = _fwd_inner(acc, l_i, m_i, q, k_src, k_r0, k_c0, v_src, v_r0, v_c0, sks, svs, SK,
                               full_end, diag_end, rows_shifted, qk_scale, WIN_L, WIN_R, BLOCK_M, BLOCK_N, D, True,
                               CAUSAL, WINDOW, MODE, 0, PREC)

    empty = l_i == 0.0  # rows that saw no key
    o = acc / tl.where(empty, 1.0, l_i)[:, None]
    lse = tl.where(empty, float("-inf"), (m_i + tl.math.log2(tl.where(empty, 1.0, l_i))) * 0.6931471805599453)
    tl.store(LSE + stat + rows, lse, mask=rows < SQ)
    _store_rows(o_src, o_r0, o_c0, start_m, SQ, sos, o.to(q.dtype), BLOCK_M, D, MODE)


# --------------------------------------------------------------------------- backward


@triton.jit
def _bwd_prep_kernel(O, DO, LSE, DLSE, DELTA, LSE2,
                     sob, soh, sos, sdob, sdoh, sdos, H, SQ,
                     D: tl.constexpr, BLOCK_M: tl.constexpr, HAS_DLSE: tl.constexpr):
    """delta = rowsum(dO * O) - dlse and the base-2 LSE (+inf for empty rows), [B*H, SQ] each."""
    pid_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    b = (off_hz // H).to(tl.int64)
    h = off_hz % H
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, D)
    in_seq = rows < SQ
    o = tl.load(O + b * sob + h * soh + rows[:, None] * sos + cols[None, :], mask=in_seq[:, None], other=0.0)
    do = tl.load(DO + b * sdob + h * sdoh + rows[:, None] * sdos + cols[None, :], mask=in_seq[:, None], other=0.0)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)
    if HAS_DLSE:
        delta -= tl.load(DLSE + off_hz * SQ + rows, mask=in_seq, other=0.0)
    lse = tl.load(LSE + off_hz * SQ + rows, mask=in_seq, other=0.0)
    lse2 = tl.where(lse == float("-inf"), float("inf"), lse * 1.4426950408889634)
    tl.store(DELTA + off_hz * SQ + rows, delta, mask=in_seq)
    tl.store(LSE2 + off_hz * SQ + rows, lse2, mask=in_seq)


@triton.jit
def _dq_add(dq, DQACC, CNT, start_m, j, last_j, SQ, BLOCK_M: tl.constexpr, D: tl.constexpr,
            DQ_MODE: tl.constexpr):
    """Add this key block's dQ_partial [BLOCK_M, D] (fp32) into one head's dQ buffer.

    DQ_MODE 1 (deterministic): key block j of this query block adds after key blocks 0..j-1,
    through the query block's counter in CNT: wait until it reads j (acquire), load, add, store,
    then set it to j + 1 (release), or back to 0 if j is the last key block that visits this
    query block, so every launch leaves the counters as it found them. Key block 0 stores
    without loading (the buffer needs no zero fill). Thread 0 does the atomics; CTA barriers
    order the other threads' loads and stores around them (the CUTLASS semaphore pattern).
    Deadlock-free because j waits only on key blocks of the same head with a smaller block
    index, dispatched before it (see _bwd_kv_kernel). The spin loop sits inside `if j > 0`
    on purpose: a loop directly inside the query loop's body would stop Triton's pipeliner
    from multi-buffering that loop's loads.
    DQ_MODE 2 (not deterministic, for comparison only): atomic fp32 adds into a zeroed buffer.
    """
    rows = start_m + tl.arange(0, BLOCK_M)
    ptrs = DQACC + rows[:, None] * D + tl.arange(0, D)[None, :]
    in_seq = rows[:, None] < SQ
    if DQ_MODE == 2:
        tl.atomic_add(ptrs, dq, mask=in_seq, sem="relaxed", scope="gpu")
    else:
        cnt = CNT + start_m // BLOCK_M
        if j > 0:
            while tl.atomic_add(cnt, 0, sem="acquire", scope="gpu") != j:
                pass
            dq += tl.load(ptrs, mask=in_seq, other=0.0, cache_modifier=".cg")
        tl.store(ptrs, dq, mask=in_seq)
        # Read the counter (it is j) once more: Triton lowers a scalar atomic whose value is used
        # as "thread 0 performs it, CTA barrier, every thread reads it from shared memory". That
        # barrier is what orders every thread's stores above before thread 0's release below (and
        # the spin's own barrier orders the loads after the acquire). tl.debug_barrier() would
        # say it plainly but stops Triton 3.6 from pipelining the query loop.
        now = tl.atomic_add(cnt, 0, sem="relaxed", scope="gpu")
        tl.atomic_add(cnt, tl.where(j == last_j, -now, 1), sem="release", scope="gpu")


@triton.jit
def _bwd_kv_inner(dk, dv, k, v, q_src, q_r0, q_c0, do_src, do_r0, do_c0, LSE2, DELTA, sqs, sdos, SQ, lo, hi,
                  cols_shifted, qk_scale, DQACC, CNT, pid_n, shift, SK, WIN_L, WIN_R,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr, MASKED: tl.constexpr,
                  CAUSAL: tl.constexpr, WINDOW: tl.constexpr, MODE: tl.constexpr, PREC: tl.constexpr,
                  DQ_MODE: tl.constexpr):
    for start_m in tl.range(lo, hi, BLOCK_M):
        rows = start_m + tl.arange(0, BLOCK_M)
        q = _load_rows(q_src, q_r0, q_c0, start_m, SQ, sqs, BLOCK_M, D, MODE)  # [BLOCK_M, D]
        # rows past SQ: lse2 = +inf makes p = 0 there
        lse2 = tl.load(LSE2 + rows, mask=rows < SQ, other=float("inf"))
        qkT = tl.dot(k, tl.trans(q), input_precision=PREC)  # [BLOCK_N, BLOCK_M]
        pT = tl.math.exp2(qkT * qk_scale - lse2[None, :])
        if MASKED:
            if CAUSAL:
                # key j is seen by row i iff j - shift <= i (this also drops keys past SK)
                pT = tl.where(cols_shifted[:, None] <= rows[None, :], pT, 0.0)
            elif WINDOW:
                # key j is seen by row i iff -WIN_L <= (j - shift) - i <= WIN_R (keys past SK only
                # reach rows of dK, dV that are not stored)
                off = cols_shifted[:, None] - rows[None, :]
                pT = tl.where((off >= -WIN_L) & (off <= WIN_R), pT, 0.0)
            else:
                # keys past SK (one-pass only: their dQ columns are not dropped with the rows of dK)
                pT = tl.where(cols_shifted[:, None] < SK, pT, 0.0)
        do = _load_rows(do_src, do_r0, do_c0, start_m, SQ, sdos, BLOCK_M, D, MODE)  # [BLOCK_M, D]
        dv = tl.dot(pT.to(do.dtype), do, dv, input_precision=PREC)
        delta = tl.load(DELTA + rows, mask=rows < SQ, other=0.0)
        dpT = tl.dot(v, tl.trans(do), input_precision=PREC)  # [BLOCK_N, BLOCK_M]
        dsT = pT * (dpT - delta[None, :])
        dk = tl.dot(dsT.to(q.dtype), q, dk, input_precision=PREC)
        if DQ_MODE != 0:
            dq = tl.dot(tl.trans(dsT.to(k.dtype)), k, input_precision=PREC)  # [BLOCK_M, D]
            if CAUSAL:  # the key blocks that visit this query block: 0 .. cdiv(end + shift, BLOCK_N) - 1
                last_j = tl.minimum(tl.cdiv(start_m + BLOCK_M + shift, BLOCK_N), tl.num_programs(0)) - 1
            else:
                last_j = tl.num_programs(0) - 1
            _dq_add(dq, DQACC, CNT, start_m, pid_n, last_j, SQ, BLOCK_M, D, DQ_MODE)
    return dk, dv


@triton.jit
def _window_rows(start_n, SQ, SK, WIN_L, WIN_R, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """The query blocks a key block [start_n, start_n + BLOCK_N) meets under a sliding window, the
    transpose of _window_keys: (lo, full_lo, full_hi, hi), rows of [lo, full_lo) and [full_hi, hi)
    masked, rows of [full_lo, full_hi) seeing every real key of the block.

    Key j is seen by rows [j - shift - WIN_R, j - shift + WIN_L]; keys past SK are ignored (the
    rows of dK and dV they give are never stored)."""
    shift = SK - SQ
    last = tl.minimum(start_n + BLOCK_N, SK) - 1
    lo = tl.maximum(start_n - shift - WIN_R, 0) // BLOCK_M * BLOCK_M
    hi = tl.maximum(tl.minimum(last - shift + WIN_L + 1, SQ), lo)
    full_lo = tl.minimum(tl.maximum(tl.cdiv(last - shift - WIN_R, BLOCK_M) * BLOCK_M, lo), hi)
    full_hi = tl.maximum(tl.minimum(start_n - shift + WIN_L + 1, hi) // BLOCK_M * BLOCK_M, full_lo)
    return lo, full_lo, full_hi, hi


@triton.jit
def _bwd_kv_kernel(Q, K, V, DO, DK, DV, DQACC, CNT, LSE2, DELTA,
                   sqb, sqh, sqs, skb, skh, sks, svb, svh, svs, sdob, sdoh, sdos,
                   sdkb, sdkh, sdks, sdvb, sdvh, sdvs,
                   H, HKV, SQ, SK, sm_scale, qk_scale, CU_Q, CU_K, WIN_L, WIN_R,
                   D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
                   MODE: tl.constexpr, PREC: tl.constexpr, DQ_MODE: tl.constexpr, WINDOW: tl.constexpr,
                   VARLEN: tl.constexpr):
    """dK, dV of one key block (and, if DQ_MODE, its share of dQ: the one-pass backward).

    The grid is (key block, batch * key/value head) with the key block fastest-varying, so
    the blocks of one head are dispatched in increasing key-block order. The one-pass dQ
    hand-off relies on it: key block j waits only for key blocks j' < j of its own head,
    which have smaller linear block indices and so were dispatched first (finished, or
    running on another SM); the unfinished block with the smallest index never waits on an
    unfinished one, so no set of resident blocks can wait on each other forever.

    VARLEN (two-pass only) and WINDOW as in _query_program: the batch index picks a sequence,
    whose first rows stand in for the batch offsets.
    """
    pid_n = tl.program_id(0)
    off_bk = tl.program_id(1)  # (batch, key/value head)
    b = (off_bk // HKV).to(tl.int64)
    hk = off_bk % HKV
    G = H // HKV
    start_n = pid_n * BLOCK_N
    if VARLEN:
        q_first, SQ_SEQ, k_first, SK_SEQ = _sequence(CU_Q, CU_K, b)
        TOTAL_Q = SQ
        SQ = SQ_SEQ
        SK = SK_SEQ
        if start_n >= SK:  # the grid covers the longest sequence; this one is shorter
            return
        b_q = q_first.to(tl.int64)
        b_k = k_first.to(tl.int64)
    else:
        b_q = b
        b_k = b

    k_src, k_r0, k_c0 = _head(K, b_k, hk, skb, skh, SK, sks, BLOCK_N, D, MODE)
    v_src, v_r0, v_c0 = _head(V, b_k, hk, svb, svh, SK, svs, BLOCK_N, D, MODE)
    dk_src, dk_r0, dk_c0 = _head(DK, b_k, hk, sdkb, sdkh, SK, sdks, BLOCK_N, D, MODE)
    dv_src, dv_r0, dv_c0 = _head(DV, b_k, hk, sdvb, sdvh, SK, sdvs, BLOCK_N, D, MODE)

    k = _load_rows(k_src, k_r0, k_c0, start_n, SK, sks, BLOCK_N, D, MODE)  # [BLOCK_N, D]
    v = _load_rows(v_src, v_r0, v_c0, start_n, SK, svs, BLOCK_N, D, MODE)
    dk = tl.zeros([BLOCK_N, D], tl.float32)
    dv = tl.zeros([BLOCK_N, D], tl.float32)

    win_lo = 0
    win_hi = 0
    if CAUSAL:
        shift = SK - SQ
        # first query row that sees key start_n, and first row that sees the whole key block
        diag_lo = tl.maximum(start_n - shift, 0) // BLOCK_M * BLOCK_M
        full_lo = tl.cdiv(tl.maximum(start_n + BLOCK_N - 1 - shift, 0), BLOCK_M) * BLOCK_M
        full_lo = tl.maximum(full_lo, diag_lo)
        cols_shifted = start_n + tl.arange(0, BLOCK_N) - shift
    elif WINDOW:
        shift = SK - SQ
        diag_lo, full_lo, full_hi, win_hi = _window_rows(start_n, SQ, SK, WIN_L, WIN_R, BLOCK_M, BLOCK_N)
        cols_shifted = start_n + tl.arange(0, BLOCK_N) - shift
    else:
        shift = 0
        diag_lo = 0
        full_lo = 0
        cols_shifted = start_n + tl.arange(0, BLOCK_N)
    # the query heads of this group, one after the other: a fixed summation order
    for g in range(G):
        h = hk * G + g
        q_src, q_r0, q_c0 = _head(Q, b_q, h, sqb, sqh, SQ, sqs, BLOCK_M, D, MODE)
        do_src, do_r0, do_c0 = _head(DO, b_q, h, sdob, sdoh, SQ, sdos, BLOCK_M, D, MODE)
        if VARLEN:
            lse2_ptr = LSE2 + h * TOTAL_Q + q_first  # lse2 and delta are [H, total_q]
            delta_ptr = DELTA + h * TOTAL_Q + q_first
        else:
            lse2_ptr = LSE2 + (b * H + h) * SQ
            delta_ptr = DELTA + (b * H + h) * SQ
        dqacc_ptr = DQACC + (b * H + h) * SQ * D  # this head's fp32 dQ buffer (one-pass only)
        cnt_ptr = CNT + (b * H + h) * tl.cdiv(SQ, BLOCK_M)  # and its counters, one per query block
        if CAUSAL:
            dk, dv = _bwd_kv_inner(dk, dv, k, v, q_src, q_r0, q_c0, do_src, do_r0, do_c0, lse2_ptr, delta_ptr,
                                   sqs, sdos, SQ, diag_lo, tl.minimum(full_lo, SQ), cols_shifted, qk_scale,
                                   dqacc_ptr, cnt_ptr, pid_n, shift, SK, WIN_L, WIN_R, BLOCK_M, BLOCK_N, D, True,
                                   True, False, MODE, PREC, DQ_MODE)
            dk, dv = _bwd_kv_inner(dk, dv, k, v, q_src, q_r0, q_c0, do_src, do_r0, do_c0, lse2_ptr, delta_ptr,
                                   sqs, sdos, SQ, full_lo, SQ, cols_shifted, qk_scale,
                                   dqacc_ptr, cnt_ptr, pid_n, shift, SK, WIN_L, WIN_R, BLOCK_M, BLOCK_N, D, False,
                                   True, False, MODE, PREC, DQ_MODE)
        elif WINDOW:  # left edge, the rows that see the whole block, right edge
            dk, dv = _bwd_kv_inner(dk, dv, k, v, q_src, q_r0, q_c0, do_src, do_r0, do_c0, lse2_ptr, delta_ptr,
                                   sqs, sdos, SQ, diag_lo, full_lo, cols_shifted, qk_scale,
                                   dqacc_ptr, cnt_ptr, pid_n, shift, SK, WIN_L, WIN_R, BLOCK_M, BLOCK_N, D, True,
                                   False, True, MODE, PREC, DQ_MODE)
            dk, dv = _bwd_kv_inner(dk, dv, k, v, q_src, q_r0, q_c0, do_src, do_r0, do_c0, lse2_ptr, delta_ptr,
                                   sqs, sdos, SQ, full_lo, full_hi, cols_shifted, qk_scale,
                                   dqacc_ptr, cnt_ptr, pid_n, shift, SK, WIN_L, WIN_R, BLOCK_M, BLOCK_N, D, False,
                                   False, True, MODE, PREC, DQ_MODE)
            dk, dv = _bwd_kv_inner(dk, dv, k, v, q_src, q_r0, q_c0, do_src, do_r0, do_c0, lse2_ptr, delta_ptr,
                                   sqs, sdos, SQ, full_hi, win_hi, cols_shifted, qk_scale,
                                   dqacc_ptr, cnt_ptr, pid_n, shift, SK, WIN_L, WIN_R, BLOCK_M, BLOCK_N, D, True,
                                   False, True, MODE, PREC, DQ_MODE)
        elif DQ_MODE == 0:
            dk, dv = _bwd_kv_inner(dk, dv, k, v, q_src, q_r0, q_c0, do_src, do_r0, do_c0, lse2_ptr, delta_ptr,
                                   sqs, sdos, SQ, 0, SQ, cols_shifted, qk_scale,
                                   dqacc_ptr, cnt_ptr, pid_n, shift, SK, WIN_L, WIN_R, BLOCK_M, BLOCK_N, D, False,
                                   False, False, MODE, PREC, DQ_MODE)
        elif start_n + BLOCK_N > SK:
            # one-pass, ragged last key block: its padding keys must not reach dQ
            dk, dv = _bwd_kv_inner(dk, dv, k, v, q_src, q_r0, q_c0, do_src, do_r0, do_c0, lse2_ptr, delta_ptr,
                                   sqs, sdos, SQ, 0, SQ, cols_shifted, qk_scale,
                                   dqacc_ptr, cnt_ptr, pid_n, shift, SK, WIN_L, WIN_R, BLOCK_M, BLOCK_N, D, True,
                                   False, False, MODE, PREC, DQ_MODE)
        else:
            dk, dv = _bwd_kv_inner(dk, dv, k, v, q_src, q_r0, q_c0, do_src, do_r0, do_c0, lse2_ptr, delta_ptr,
                                   sqs, sdos, SQ, 0, SQ, cols_shifted, qk_scale,
                                   dqacc_ptr, cnt_ptr, pid_n, shift, SK, WIN_L, WIN_R, BLOCK_M, BLOCK_N, D, False,
                                   False, False, MODE, PREC, DQ_MODE)
    _store_rows(dv_src, dv_r0, dv_c0, start_n, SK, sdvs, dv.to(v.dtype), BLOCK_N, D, MODE)
    dk *= sm_scale
    _store_rows(dk_src, dk_r0, dk_c0, start_n, SK, sdks, dk.to(k.dtype), BLOCK_N, D, MODE)


@triton.jit
def _bwd_q_inner(dq, q, do, lse2, delta, k_src, k_r0, k_c0, v_src, v_r0, v_c0, sks, svs, SK, lo, hi, rows_shifted,
                 qk_scale, WIN_L, WIN_R, BLOCK_N: tl.constexpr, D: tl.constexpr, MASKED: tl.constexpr,
                 CAUSAL: tl.constexpr, WINDOW: tl.constexpr, MODE: tl.constexpr, PREC: tl.constexpr):
    for start_n in tl.range(lo, hi, BLOCK_N):
        k = _load_rows(k_src, k_r0, k_c0, start_n, SK, sks, BLOCK_N, D, MODE)  # [BLOCK_N, D]
        v = _load_rows(v_src, v_r0, v_c0, start_n, SK, svs, BLOCK_N, D, MODE)
        qk = tl.dot(q, tl.trans(k), input_precision=PREC)  # [BLOCK_M, BLOCK_N]
        p = tl.math.exp2(qk * qk_scale - lse2[:, None])
        if MASKED:
            # keys past SK must go: p there is not small, and ds * k = p * 0 may overflow to inf * 0
            keep = _keep(start_n + tl.arange(0, BLOCK_N), rows_shifted, SK, WIN_L, WIN_R, CAUSAL, WINDOW)
            p = tl.where(keep, p, 0.0)
        dp = tl.dot(do, tl.trans(v), input_precision=PREC)  # [BLOCK_M, BLOCK_N]
        ds = p * (dp - delta[:, None])
        dq = tl.dot(ds.to(k.dtype), k, dq, input_precision=PREC)
    return dq


@triton.jit
def _bwd_q_kernel(Q, K, V, DO, DQ, LSE2, DELTA,
                  sqb, sqh, sqs, skb, skh, sks, svb, svh, svs, sdob, sdoh, sdos, sdqb, sdqh, sdqs,
                  H, G, SQ, SK, sm_scale, qk_scale, CU_Q, CU_K, WIN_L, WIN_R,
                  D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
                  MODE: tl.constexpr, PREC: tl.constexpr, WINDOW: tl.constexpr, VARLEN: tl.constexpr):
    (off_hz, b, h, start_m, rows, rows_shifted, win_lo, key_lo, full_end, diag_end, SQ, SK, stat,
     q_src, q_r0, q_c0, k_src, k_r0, k_c0, v_src, v_r0, v_c0) = _query_program(
        Q, K, V, CU_Q, CU_K, sqb, sqh, sqs, skb, skh, sks, svb, svh, svs, H, G, SQ, SK, WIN_L, WIN_R,
        BLOCK_M, BLOCK_N, D, CAUSAL, WINDOW, VARLEN, MODE)
    if VARLEN:
        if start_m >= SQ:  # the grid covers the longest sequence; this one is shorter
            return
    do_src, do_r0, do_c0 = _head(DO, b, h, sdob, sdoh, SQ, sdos, BLOCK_M, D, MODE)
    dq_src, dq_r0, dq_c0 = _head(DQ, b, h, sdqb, sdqh, SQ, sdqs, BLOCK_M, D, MODE)

    q = _load_rows(q_src, q_r0, q_c0, start_m, SQ, sqs, BLOCK_M, D, MODE)
    do = _load_rows(do_src, do_r0, do_c0, start_m, SQ, sdos, BLOCK_M, D, MODE)
    lse2 = tl.load(LSE2 + stat + rows, mask=rows < SQ, other=float("inf"))
    delta = tl.load(DELTA + stat + rows, mask=rows < SQ, other=0.0)
    dq = tl.zeros([BLOCK_M, D], tl.float32)

    if WINDOW:  # the blocks on the window's left edge
        dq = _bwd_q_inner(dq, q, do, lse2, delta, k_src, k_r0, k_c0, v_src, v_r0, v_c0, sks, svs, SK, win_lo,
                          key_lo, rows_shifted, qk_scale, WIN_L, WIN_R, BLOCK_N, D, True, CAUSAL, WINDOW, MODE, PREC)
    dq = _bwd_q_inner(dq, q, do, lse2, delta, k_src, k_r0, k_c0, v_src, v_r0, v_c0, sks, svs, SK, key_lo, full_end,
                      rows_shifted, qk_scale, WIN_L, WIN_R, BLOCK_N, D, False, CAUSAL, WINDOW, MODE, PREC)
    dq = _bwd_q_inner(dq, q, do, lse2, delta, k_src, k_r0, k_c0, v_src, v_r0, v_c0, sks, svs, SK, full_end,
                      diag_end, rows_shifted, qk_scale, WIN_L, WIN_R, BLOCK_N, D, True, CAUSAL, WINDOW, MODE, PREC)
    dq *= sm_scale
    _store_rows(dq_src, dq_r0, dq_c0, start_m, SQ, sdqs, dq.to(q.dtype), BLOCK_M, D, MODE)


@triton.jit
def _bwd_dq_convert_kernel(DQACC, DQ, sdqb, sdqh, sdqs, H, SQ, SK, sm_scale,
                           D: tl.constexpr, BLOCK_M: tl.constexpr, CAUSAL: tl.constexpr):
    """One-pass backward, last step: dq = sm_scale * the fp32 buffer, in dq's dtype and layout.
    Rows that see no key (causal, Sq > Sk) lie in query blocks no key block visits, so the
    buffer there was never written: they get 0."""
    pid_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    b = (off_hz // H).to(tl.int64)
    h = off_hz % H
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, D)
    in_seq = rows[:, None] < SQ
    acc = tl.load(DQACC + off_hz.to(tl.int64) * SQ * D + rows[:, None] * D + cols[None, :], mask=in_seq, other=0.0)
    if CAUSAL:
        acc = tl.where((rows + SK - SQ >= 0)[:, None], acc, 0.0)
    tl.store(DQ + b * sdqb + h * sdqh + rows[:, None] * sdqs + cols[None, :], (acc * sm_scale).to(DQ.dtype.element_ty),
             mask=in_seq)

# --------------------------------------------------------------------------- launch configs
#
# A config is a dict of block sizes (and, for the forward, PREFETCH and POLY) plus
# num_warps / num_stages. On a GPU each kernel picks the fastest of a short candidate list
# the first time it sees a shape bucket (see kernels/NOTES.md for how the lists were
# chosen); under the interpreter small fixed blocks are used, deliberately unequal so that
# ragged and diagonal logic is exercised.

INTERPRET_CONFIGS = {
    "fwd": dict(BLOCK_M=32, BLOCK_N=16, num_warps=4, num_stages=1, PREFETCH=True, POLY=0),
    "bwd_kv": dict(BLOCK_M=16, BLOCK_N=32, num_warps=4, num_stages=1),
    "bwd_q": dict(BLOCK_M=32, BLOCK_N=16, num_warps=4, num_stages=1),
    "bwd_onepass": dict(BLOCK_M=16, BLOCK_N=32, num_warps=4, num_stages=1),
    "bwd_atomic": dict(BLOCK_M=16, BLOCK_N=32, num_warps=4, num_stages=1),
}


def _c(bm, bn, w, s, **extra):
    return dict(BLOCK_M=bm, BLOCK_N=bn, num_warps=w, num_stages=s, **extra)


def _f(bm, bn, w, s, prefetch=False, poly=0):
    return _c(bm, bn, w, s, PREFETCH=prefetch, POLY=poly)


def _candidates(kind: str, d: int) -> list[dict]:
    """Candidate configs for head dim d on a Hopper-class GPU, best first (kernels/NOTES.md)."""
    if kind == "fwd":
        if d <= 64:
            return [_f(64, 128, 4, 2), _f(64, 64, 4, 3), _f(128, 128, 4, 3),
                    _f(64, 128, 4, 2, True), _f(128, 128, 8, 2, True), _f(64, 128, 4, 2, poly=4)]
        if d <= 128:
            return [_f(128, 64, 4, 2), _f(64, 64, 4, 3), _f(128, 128, 8, 3),
                    _f(128, 128, 8, 2, True), _f(64, 64, 4, 2, True), _f(128, 64, 4, 2, poly=4)]
        return [_f(64, 64, 4, 2), _f(128, 64, 8, 2)]
    if kind == "bwd_kv":
        if d <= 64:
            return [_c(32, 64, 4, 3), _c(32, 128, 4, 2), _c(64, 64, 4, 2)]
        if d <= 128:
            return [_c(64, 64, 4, 2), _c(64, 128, 8, 3), _c(64, 128, 8, 2)]
        return [_c(32, 64, 4, 2), _c(64, 64, 8, 2)]
    if kind == "bwd_q":
        if d <= 64:
            return [_c(128, 64, 4, 3), _c(128, 64, 8, 3), _c(64, 64, 4, 3)]
        if d <= 128:
            return [_c(128, 64, 8, 3), _c(64, 64, 4, 2), _c(64, 32, 4, 3)]
        return [_c(64, 32, 4, 2), _c(64, 64, 8, 2)]
    if kind in ("bwd_onepass", "bwd_atomic"):
        # the dK/dV tiles plus a [BLOCK_M, D] fp32 dQ_partial; 128-key tiles halve the dQ hand-offs
        # per FLOP (kernels/NOTES.md), at the price of 8 warps for the dK, dV accumulators
        if d <= 64:
            return [_c(64, 128, 8, 2), _c(32, 128, 4, 2), _c(64, 64, 4, 2)]
        if d <= 128:
            return [_c(64, 128, 8, 2), _c(32, 128, 8, 2), _c(64, 64, 4, 2)]
        return [_c(32, 64, 4, 2), _c(64, 64, 8, 2)]
    raise ValueError(kind)


# Tests and the benchmark may pin configs: {"fwd": {...}, ...}. Empty means tune.
FORCED_CONFIGS: dict[str, dict] = {}
_TUNED: dict[tuple, dict] = {}


def _launch(kind: str, kernel, grid_fn, args: tuple, const: dict, key: tuple, tiles) -> None:
    """Launch kernel with a pinned, cached or freshly tuned config for this shape bucket."""
    if kind in FORCED_CONFIGS:
        cfg = FORCED_CONFIGS[kind]
    elif _interpreting():
        cfg = INTERPRET_CONFIGS[kind]
    elif os.environ.get("DRILL_FLASH_TUNE", "1") == "0" or kind == "bwd_atomic":
        # (atomic dQ accumulates into its zeroed buffer: the tuner's repeated runs would add up)
        cfg = _candidates(kind, const["D"])[0]
    else:
        cfg = _TUNED.get((kind,) + key)
        if cfg is None:
            cfg = _tune(kind, kernel, grid_fn, args, const, tiles)
            _TUNED[(kind,) + key] = cfg
    if kind in FORCED_CONFIGS or _interpreting():
        _run(kernel, grid_fn, args, const, cfg, tiles)
        return
    # A config chosen for the bucket may not fit this call (fp32 tiles need twice the shared
    # memory) or not compile for its integer specialisation (Triton 3.6's pipeliner fails on some
    # single-query-row launches): fall back in order, last to the same tiles unpipelined.
    fallbacks = [cfg] + _fallbacks(kind, const["D"])
    for i, c in enumerate(fallbacks):
        try:
            _run(kernel, grid_fn, args, const, c, tiles)
            return
        except Exception as exc:  # noqa: BLE001 - only compile failures are retried
            if not _did_not_compile(exc) or i == len(fallbacks) - 1:
                raise


def _fallbacks(kind: str, d: int) -> list[dict]:
    """The candidates, then each without software pipelining (num_stages=1): what still compiles
    when the pipeliner does not."""
    cands = _candidates(kind, d)
    return cands + [dict(c, num_stages=1) for c in cands]


def _did_not_compile(exc: Exception) -> bool:
    """Whether exc is a kernel that could not be built for this launch (too much shared memory or
    registers, or an MLIR pass that failed), as opposed to an error of the call itself."""
    if isinstance(exc, (triton.runtime.errors.OutOfResources, triton.compiler.errors.CompilationError)):
        return True
    return isinstance(exc, RuntimeError) and "PassManager::run failed" in str(exc)


def _host_descriptor(t: torch.Tensor, block: int) -> TensorDescriptor:
    """A descriptor over t's memory as [rows, row stride]: every head's [S, D] matrix is a
    block of it (module docstring, MODE 2; common.host_ok says when)."""
    B, H, S, D = t.shape
    sb, sh, ss, _ = t.stride()
    rows = ((B - 1) * sb + (H - 1) * sh) // ss + S
    return TensorDescriptor(t, [rows, ss], [ss, 1], [block, D])


def _run(kernel, grid_fn, args, const, cfg, tiles=None):
    """Launch with one config. tiles = (host_ok, SQ, SK, [(arg index, 'M' or 'N'), ...]): when the
    tensors allow it and the blocks divide the sequence lengths, those arguments become host
    tensor descriptors (MODE 2): no per-program descriptor set-up."""
    meta = {k: v for k, v in cfg.items() if k not in ("num_warps", "num_stages")}
    if const.get("PREC") != "tf32" and meta.get("POLY"):
        meta["POLY"] = 0  # fp32-accurate matmuls keep every exponential on the hardware unit
    grid = grid_fn(meta)
    if tiles is not None and tiles[0] and tiles[1] % cfg["BLOCK_M"] == 0 and tiles[2] % cfg["BLOCK_N"] == 0:
        _, SQ, SK, spec = tiles
        args = list(args)
        for i, role in spec:
            args[i] = _host_descriptor(args[i], cfg["BLOCK_M"] if role == "M" else cfg["BLOCK_N"])
        const = {**const, "MODE": 2}
    _fast(kernel)(grid, *args, **const, **meta, num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])


_FAST: dict = {}


def _fast(kernel) -> FastLaunch:
    """kernel's launcher that skips Triton's binder on repeated calls (fastlaunch.py): at S = 1k a
    call's host time is as long as its GPU time (kernels/NOTES.md)."""
    if kernel not in _FAST:
        _FAST[kernel] = FastLaunch(kernel)
    return _FAST[kernel]


def _tune(kind, kernel, grid_fn, args, const, tiles) -> dict:
    best, best_ms = None, float("inf")
    for cfg in _fallbacks(kind, const["D"]):
        if best is not None and cfg["num_stages"] == 1:
            break  # the unpipelined configs are only a last resort
        try:
            ms = triton.testing.do_bench(lambda: _run(kernel, grid_fn, args, const, cfg, tiles), warmup=10, rep=50)
        except Exception:  # a config that does not compile or fit (shared memory, registers)
            continue
        if ms < best_ms:
            best, best_ms = cfg, ms
    if best is None:
        raise RuntimeError(f"flash_attention: no {kind} config compiled for {const}")
    return best


def tuned_configs() -> dict:
    """The configs chosen so far, keyed by (kernel, shape bucket...)."""
    return {" ".join(map(str, k)): dict(v) for k, v in _TUNED.items()}


# --------------------------------------------------------------------------- launchers


def _alloc_scratch(size: int, alignment: int, stream):
    return torch.empty(size, dtype=torch.int8, device="cuda" if torch.cuda.is_available() and not _interpreting() else "cpu")


def _tile_modes(*tensors: torch.Tensor) -> tuple[int, bool]:
    """(MODE for per-head tiles, whether host descriptors (MODE 2) may be used).

    Tensor descriptors need sm_90+, 16-byte aligned bases and row strides and a unit last
    stride. DRILL_FLASH_TMA=0 forces pointers, =1 per-program device descriptors only."""
    env = os.environ.get("DRILL_FLASH_TMA", "auto")
    if env == "0":
        return 0, False
    if not _interpreting():
        if not torch.cuda.is_available() or torch.cuda.get_device_capability(tensors[0].device)[0] < 9:
            return 0, False
        for t in tensors:
            es = t.element_size()
            if t.stride(-1) != 1 or t.data_ptr() % 16 or any((s * es) % 16 for s in t.stride()[:-1]):
                return 0, False
    host = env != "1" and all(host_ok(t) for t in tensors)
    return 1, host


def _tf32_allowed() -> bool:
    """PyTorch's switch for fp32 matmuls: the newer fp32_precision if set, else allow_tf32."""
    m = torch.backends.cuda.matmul
    prec = getattr(m, "fp32_precision", None)
    if prec in ("tf32", "ieee"):
        return prec == "tf32"
    try:
        return bool(m.allow_tf32)
    except RuntimeError:  # legacy and new APIs mixed: torch refuses to answer; stay exact
        return False


def _dot_precision(dtype: torch.dtype) -> str:
    return "tf32x3" if dtype == torch.float32 and not _tf32_allowed() else "tf32"


class Varlen(NamedTuple):
    """A packed batch (flash_attention_varlen): int32 cumulative lengths [B + 1] of the query and key
    rows, and the longest sequence of each (the grid's extent). q, k, v go to the kernels as
    [1, heads, total rows, D] views of the packed [total rows, heads, D] tensors."""
    cu_q: torch.Tensor
    cu_k: torch.Tensor
    max_q: int
    max_k: int

    @property
    def batch(self) -> int:
        return self.cu_q.shape[0] - 1


def _strides(t: torch.Tensor, varlen: Varlen | None) -> tuple:
    """The (batch, head, row) strides a kernel takes. Packed tensors pass their row stride as the
    batch stride: the kernel multiplies it by the sequence's first row (_query_program)."""
    s = t.stride()
    return (s[2], s[1], s[2]) if varlen is not None else s[:3]


def _masking_args(window: tuple[int, int] | None, varlen: Varlen | None, dummy: torch.Tensor) -> tuple:
    """CU_Q, CU_K, WIN_L, WIN_R: the kernels' sequence bounds and window, read only under their
    VARLEN and WINDOW constexprs (a dense call passes any tensor and zeros)."""
    cu_q, cu_k = (varlen.cu_q, varlen.cu_k) if varlen is not None else (dummy, dummy)
    return (cu_q, cu_k, *(window or (0, 0)))


def _key_suffix(window, varlen: Varlen | None) -> tuple:
    """What a windowed or packed call adds to its tuner key, so neither shares a dense call's
    config (a narrow window favours other tiles; a packed grid is sized by the longest sequence)."""
    out = ()
    if window is not None:
        out += ("window", bucket(window[0] + window[1] + 1))
    if varlen is not None:
        out += ("varlen", bucket(varlen.max_q), bucket(varlen.max_k))
    return out


def forward(q, k, v, causal: bool, sm_scale: float, window: tuple[int, int] | None = None,
            varlen: Varlen | None = None):
    """(o in q's layout, lse [B, H, Sq] float32, natural log) for q [B, H, Sq, D], k and v
    [B, Hkv, Sk, D] whose last dimension is contiguous.

    window: (left, right) keys beside each row's diagonal, both >= 0 (dispatch.py turns FA2's -1
    into a bound past every key, and a causal window into right = 0 with causal False); None for
    none. varlen: q, k, v are [1, heads, total, D] views of packed tensors (Varlen)."""
    B, H, SQ, D = q.shape
    HKV, SK = k.shape[1], k.shape[2]
    o = empty_in_layout(q)
    lse = torch.empty((B, H, SQ), dtype=torch.float32, device=q.device)
    mode, host = _tile_modes(q, k, v, o)
    host = host and varlen is None  # host descriptors would let a ragged tile read the next sequence
    if mode:
        triton.set_allocator(_alloc_scratch)
    args = (q, k, v, o, lse, *_strides(q, varlen), *_strides(k, varlen), *_strides(v, varlen), *_strides(o, varlen),
            H, H // HKV, SQ, SK, sm_scale * LOG2E, *_masking_args(window, varlen, lse))
    const = dict(D=D, CAUSAL=causal, MODE=mode, PREC=_dot_precision(q.dtype), WINDOW=window is not None,
                 VARLEN=varlen is not None)
    if varlen is None:
        grid_fn = lambda m: (triton.cdiv(SQ, m["BLOCK_M"]), B * H)  # noqa: E731
    else:
        grid_fn = lambda m: (triton.cdiv(varlen.max_q, m["BLOCK_M"]), varlen.batch * H)  # noqa: E731
    key = (D, causal, str(q.dtype), const["PREC"], mode, host, H // HKV, bucket(SQ), bucket(SK))
    key += _key_suffix(window, varlen)
    tiles = (host, SQ, SK, [(0, "M"), (1, "N"), (2, "N"), (3, "M")])
    _launch("fwd", _fwd_kernel, grid_fn, args, const, key, tiles)
    return o, lse


def backward_prep(o, do, lse, dlse):
    """(do with a contiguous last dimension, delta, lse2): delta = rowsum(dO * O) - dlse and the
    base-2 LSE (+inf for rows that saw no key), [B, H, Sq] float32 each. Every backward pass, this
    file's or the Gluon one's, reads these two."""
    B, H, SQ, D = o.shape
    do = last_dim_contiguous(do)
    delta = torch.empty((B, H, SQ), dtype=torch.float32, device=o.device)
    lse2 = torch.empty_like(delta)
    if dlse is not None:
        dlse = dlse.to(torch.float32).contiguous()
    prep_block = 64 if not _interpreting() else 16
    _fast(_bwd_prep_kernel)(
        (triton.cdiv(SQ, prep_block), B * H),
        o, do, lse, dlse if dlse is not None else lse, delta, lse2,
        *o.stride()[:3], *do.stride()[:3], H, SQ, D=D, BLOCK_M=prep_block, HAS_DLSE=dlse is not None)
    return do, delta, lse2


class BackwardPasses:
    """This file's backward kernels for one call, writing dq, dk, dv in place (allocated by the
    caller in the layouts of q, k, v): the dK/dV pass (`kv`), the dQ pass (`q`), or both in one
    kernel (`one_pass`: dQ added in key-block order, or by atomic adds, not deterministic; dense
    calls without a window only). window and varlen as in forward."""

    def __init__(self, q, k, v, do, dq, dk, dv, lse2, delta, causal: bool, sm_scale: float,
                 window: tuple[int, int] | None = None, varlen: Varlen | None = None):
        self.t = (q, k, v, do, dq, dk, dv, lse2, delta)
        self.causal, self.sm_scale = causal, sm_scale
        self.window, self.varlen = window, varlen
        B, H, SQ, D = q.shape
        HKV, SK = k.shape[1], k.shape[2]
        self.dims = (B, H, HKV, SQ, SK, D)
        self.strides = tuple(s for t in (q, k, v, do) for s in _strides(t, varlen))
        self.extra = _masking_args(window, varlen, lse2)
        self._setup = None

    def setup(self):
        """(constexprs, tuning key, host descriptors allowed): checked only when one of this file's
        kernels runs, as the tensor checks cost host time."""
        if self._setup is None:
            q, k, v, do, dq, dk, dv, _, _ = self.t
            B, H, HKV, SQ, SK, D = self.dims
            mode, host = _tile_modes(q, k, v, do, dq, dk, dv)
            host = host and self.varlen is None  # as in forward
            if mode:
                triton.set_allocator(_alloc_scratch)
            const = dict(D=D, CAUSAL=self.causal, MODE=mode, PREC=_dot_precision(q.dtype),
                         WINDOW=self.window is not None, VARLEN=self.varlen is not None)
            key = (D, self.causal, str(q.dtype), const["PREC"], mode, host, H // HKV, bucket(SQ), bucket(SK))
            key += _key_suffix(self.window, self.varlen)
            self._setup = const, key, host
        return self._setup

    def _kv_grid(self, m):
        B, H, HKV, SQ, SK, D = self.dims
        if self.varlen is not None:
            return triton.cdiv(self.varlen.max_k, m["BLOCK_N"]), self.varlen.batch * HKV
        return triton.cdiv(SK, m["BLOCK_N"]), B * HKV  # key block fastest: see _bwd_kv_kernel

    def _q_grid(self, m):
        B, H, HKV, SQ, SK, D = self.dims
        if self.varlen is not None:
            return triton.cdiv(self.varlen.max_q, m["BLOCK_M"]), self.varlen.batch * H
        return triton.cdiv(SQ, m["BLOCK_M"]), B * H

    def _kv_tiles(self, host):
        B, H, HKV, SQ, SK, D = self.dims
        return host, SQ, SK, [(0, "M"), (1, "N"), (2, "N"), (3, "M"), (4, "N"), (5, "N")]

    def kv(self) -> None:
        q, k, v, do, dq, dk, dv, lse2, delta = self.t
        B, H, HKV, SQ, SK, D = self.dims
        const, key, host = self.setup()
        args = (q, k, v, do, dk, dv, lse2, delta, lse2, delta, *self.strides, *_strides(dk, self.varlen),
                *_strides(dv, self.varlen), H, HKV, SQ, SK, self.sm_scale, self.sm_scale * LOG2E, *self.extra)
        _launch("bwd_kv", _bwd_kv_kernel, self._kv_grid, args, {**const, "DQ_MODE": 0}, key, self._kv_tiles(host))

    def q(self) -> None:
        q, k, v, do, dq, dk, dv, lse2, delta = self.t
        B, H, HKV, SQ, SK, D = self.dims
        const, key, host = self.setup()
        args = (q, k, v, do, dq, lse2, delta, *self.strides, *_strides(dq, self.varlen),
                H, H // HKV, SQ, SK, self.sm_scale, self.sm_scale * LOG2E, *self.extra)
        tiles = (host, SQ, SK, [(0, "M"), (1, "N"), (2, "N"), (3, "M"), (4, "M")])
        _launch("bwd_q", _bwd_q_kernel, self._q_grid, args, const, key, tiles)

    def one_pass(self, atomic: bool) -> None:
        if self.window is not None or self.varlen is not None:
            raise ValueError("the one-pass backward takes dense calls without a window; use the split passes")
        q, k, v, do, dq, dk, dv, lse2, delta = self.t
        B, H, HKV, SQ, SK, D = self.dims
        # ordered: key block 0 overwrites each tile, so no zero fill; atomic adds need zeros
        dq_acc = (torch.zeros if atomic else torch.empty)((B * H, SQ, D), dtype=torch.float32, device=q.device)
        counters = torch.zeros(B * H * triton.cdiv(SQ, 16), dtype=torch.int32, device=q.device)  # BLOCK_M >= 16
        args = (q, k, v, do, dk, dv, dq_acc, counters, lse2, delta, *self.strides, *dk.stride()[:3],
                *dv.stride()[:3], H, HKV, SQ, SK, self.sm_scale, self.sm_scale * LOG2E, *self.extra)
        const, key, host = self.setup()
        _launch("bwd_atomic" if atomic else "bwd_onepass", _bwd_kv_kernel, self._kv_grid, args,
                {**const, "DQ_MODE": 2 if atomic else 1}, key, self._kv_tiles(host))
        block = 64 if not _interpreting() else 16
        _fast(_bwd_dq_convert_kernel)((triton.cdiv(SQ, block), B * H), dq_acc, dq, *dq.stride()[:3], H, SQ, SK,
                                      self.sm_scale, D=D, BLOCK_M=block, CAUSAL=self.causal)
