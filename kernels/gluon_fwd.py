"""FlashAttention forward for Hopper in Gluon: a TMA producer warp and wgmma issued asynchronously.

kernels/NOTES.md found what holds the plain-Triton forward near 0.85× cuDNN at D = 128:
the softmax of a score tile does not overlap the tensor cores' work, and plain Triton 3.6 can
neither split the warps into roles nor keep a matmul in flight across the softmax. Gluon,
Triton's lower-level language, can; this kernel does what FlashAttention-3 does (Shah et al.
2024, §3.1–3.2):

- Warp specialisation. One producer warp only issues TMA copies: each tile's Q, then its K and
  V blocks into a ring of STAGES shared-memory slots, refilling a slot once every consumer
  released it. The consumer warps never wait on a load they issued.
- Softmax overlapped with the matmuls. In iteration j the consumers issue S_j = Q K_jᵀ and
  O += P_{j-1} V_{j-1} as asynchronous wgmma, wait for S_j only, and compute the softmax of S_j
  while the tensor cores are still on P_{j-1} V_{j-1}; then they wait for O, rescale it by
  the change of the running max, and release slot j-1.
- Ping-pong (PARTS = 2). Two consumer warpgroups of 64 rows take turns to issue their matmuls
  through a pair of mbarriers, so one's softmax lines up with the other's matmuls.
- Three consumer warpgroups (PARTS = 3, 192-row tiles, FA3's choice at D = 64): each K/V block
  read from shared memory serves 192 query rows; no turns. 192 divides few sequence lengths, so
  one block of each head overlaps its neighbour (_first_row).
- TRIM (causal). That overlap goes to the shortest tile, and each consumer partition stops at its
  own diagonal instead of the tile's (kernels/NOTES.md: +9 % for the 192-row tiles at 4k).
- Persistent programs (PERSISTENT). One or two programs per SM loop over the tiles, so the
  producer loads the next tile while the consumers finish the current one; with two Q buffers
  (Q_BUFFERS) the next tile's Q too (kernels/NOTES.md: +2 % on average, up to +10 %). Causal tiles come
  from lists the host balanced (_schedule), so every program gets the same work. One-tile causal
  programs run longest first over groups of heads (_grouped), so the grid ends on short ones.

- FP8 (forward_fp8, on inputs fp8.prepare quantised): the same kernel on e4m3 Q, K and V, V
  transposed so both wgmma read K-major operands, the block scales folded into the score factor
  and into P.

Scope (gluon_common.applicable): bf16/fp16, D = 64 or 128, q, k, v in the [B, H, S, D] layout or
as [B, S, H, D] views (any layout whose heads are blocks of one [rows, sequence stride] matrix,
as triton_fa2.py's MODE 2; k and v alike), k and v may have fewer heads (GQA), Sq and Sk
multiples of 128, causal only with Sq = Sk. Everything else, the interpreter and other GPUs run
triton_fa2.py. The log-sum-exp is written in triton_fa2.py's format (natural log), so either
backward works unchanged on this forward's output. dispatch.py's forward plan "auto" times this
kernel's CANDIDATES against the Triton kernel and keeps the faster per shape (kernels/NOTES.md
has what each part bought on an H200).
"""

from __future__ import annotations

import functools
import heapq

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_wait)

from .common import LOG2E, sm_count
from .fastlaunch import FastLaunch
from .gluon_common import _descriptor, _origin, _tma_load, _tma_store


def _cfg(block_m, block_n, stages, warps, maxnreg=None, parts=1, persistent=False):
    return dict(BLOCK_M=block_m, BLOCK_N=block_n, STAGES=stages, num_warps=warps, maxnreg=maxnreg, PARTS=parts,
                PERSISTENT=persistent)


# Per head dim, best first. num_warps are the consumers' (the producer warp comes on top); 8 warps
# are two warpgroups sharing the BLOCK_M rows, 4 one warpgroup; PARTS=2 two consumer partitions of
# 4 warps in ping-pong, PARTS=3 three of 64 rows without turns (the 192-row tiles: at D = 64 they
# beat every 128-row config by 10-17 % without a mask, kernels/NOTES.md; their persistent version, with
# TRIM, was the best at 4k, kernels/NOTES.md). maxnreg=128 caps a program at 32k registers, so that two
# programs share an SM (and the scheduler overlaps one's softmax with the other's matmuls) where
# their shared memory also fits twice. PERSISTENT: one program per SM (two with maxnreg=128) loops
# over the tiles, so the producer loads the next tile's Q, K and V while the consumers finish the
# current one.
# Programs with one tile write O through Q's buffer (OWN_O), which makes room for a third K/V
# stage at D = 128 with 128 × 128 tiles (224 of the 227 KB a program may have).
CANDIDATES = {
    64: [_cfg(128, 64, 3, 4, 128), _cfg(128, 64, 3, 4, 128, persistent=True), _cfg(128, 128, 3, 4, parts=2),
         _cfg(64, 128, 2, 4, 128), _cfg(128, 128, 3, 4, parts=2, persistent=True), _cfg(192, 128, 3, 4, parts=3),
         _cfg(192, 128, 3, 4, parts=3, persistent=True)],
    128: [_cfg(128, 128, 2, 4, parts=2), _cfg(128, 128, 3, 4, parts=2), _cfg(128, 64, 3, 4, parts=2, persistent=True),
          _cfg(128, 128, 2, 4, parts=2, persistent=True), _cfg(64, 64, 2, 4, 128), _cfg(128, 128, 2, 8)],
}


@gluon.jit
def _tile_count(num_tiles, SCHED, SCHEDULED: gl.constexpr):
    """How many tiles this program runs (see _tile for which)."""
    P = gl.num_programs(0)
    pid = gl.program_id(0)
    if SCHEDULED:
        return gl.load(SCHED + pid)
    else:
        return num_tiles // P + (pid < num_tiles % P).to(gl.int32)


@gluon.jit
def _grouped(t, n, heads, group):
    """The t-th causal program's block rank (0: the block with the most work) and head, when each
    head has n blocks and programs go longest first over groups of `group` heads: every head's
    rank-0 block of a group, then every head's rank-1 block, and so on (kernels/NOTES.md).
    Head by head (group = 1) the last heads' longest blocks start in the last wave and run on
    alone; a group whose work fills the GPU twice over ends on short blocks instead, and a few
    heads at a time still share L2 (all heads at once lost to L2 misses, kernels/NOTES.md). When group
    does not divide heads the smaller group goes first, so the grid ends on a full one."""
    rem = heads % group
    if t < rem * n:
        return t // rem, t % rem
    else:
        u = t - rem * n
        g = u // (group * n)
        r = u - g * group * n
        return r // group, rem + g * group + r % group


@gluon.jit
def _tile(k, n_m, heads, group, SCHED, CAUSAL: gl.constexpr, SCHEDULED: gl.constexpr):
    """The k-th tile of this program: its query block and (batch·head).

    SCHEDULED (persistent programs, causal): the k-th entry of this program's list in SCHED, which
    the host balanced (_schedule). Otherwise program p takes every P-th tile from p on, in the
    order a (n_m, B·H) grid runs them: query blocks fastest, so the tiles running at once share a
    head's K and V in L2 (without a mask, groups of heads gained nothing in either layout,
    kernels/NOTES.md); causal ones longest first over groups of heads (_grouped)."""
    P = gl.num_programs(0)
    pid = gl.program_id(0)
    if SCHEDULED:
        t = gl.load(SCHED + (k + 1) * P + pid)
        return t % n_m, t // n_m
    else:
        t = k * P + pid
        if CAUSAL:
            rank, head = _grouped(t, n_m, heads, group)
            return n_m - 1 - rank, head
        else:
            return t % n_m, t // n_m


@gluon.jit
def _first_row(start_m, n_m, SQ, BLOCK_M: gl.constexpr, TRIM: gl.constexpr):
    """The first query row of block start_m within its head. When BLOCK_M does not divide SQ (the
    192-row tiles), one block overlaps its neighbour: the rows both compute come out bitwise the
    same (the same keys in the same order; a key block masked out for a row adds exact zeros), so
    writing them twice is harmless. TRIM: the blocks are laid from the head's last row down and
    block 0 overlaps block 1, so a causal grid recomputes rows of its shortest tile, not of its
    longest (6 % of the work at 4k, kernels/NOTES.md). Otherwise the last block overlaps."""
    if TRIM:
        return gl.maximum(SQ - (n_m - start_m) * BLOCK_M, 0)
    else:
        return gl.minimum(start_m * BLOCK_M, SQ - BLOCK_M)


@gluon.jit
def _key_blocks(m0, SK, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr):
    """Key blocks the tile starting at query row m0 reads."""
    if CAUSAL:
        return gl.cdiv(m0 + BLOCK_M, BLOCK_N)
    else:
        return SK // BLOCK_N


@gluon.jit
def _producer(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, q_empty, k_ready, v_ready, kv_empty,
              H, G, SQ, SK, sqb, sqh, sqs, skb, skh, sks, svb, svh, svs, n_m, num_tiles, group, SCHED,
              BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, PARTS: gl.constexpr,
              CAUSAL: gl.constexpr, SCHEDULED: gl.constexpr, TRIM: gl.constexpr, FP8: gl.constexpr):
    """One warp: per tile, the consumers' Q rows once they released the previous tile's, then K_j
    and V_j into slot c % STAGES (c counts blocks over all tiles) as soon as the slot is free.
    FP8: V comes transposed, [B, Hkv, D, Sk] (sv*: its strides), so block j is D rows × BLOCK_N columns."""
    BM: gl.constexpr = q_desc.block_type.shape[0]
    QBUF: gl.constexpr = q_smem.shape[0] // PARTS  # Q buffers: tile i loads into i % QBUF
    c = 0
    for i in range(_tile_count(num_tiles, SCHED, SCHEDULED)):
        start_m, off_hz = _tile(i, n_m, num_tiles // n_m, group, SCHED, CAUSAL, SCHEDULED)
        m0 = _first_row(start_m, n_m, SQ, BLOCK_M, TRIM)
        q_row, q_col = _origin(off_hz // H, off_hz % H, sqb, sqh, sqs)
        q_row += m0
        kv_row, kv_col = _origin(off_hz // H, off_hz % H // G, skb, skh, sks)
        if FP8:
            v_row, v_col = _origin(off_hz // H, off_hz % H // G, svb, svh, svs)
        # a fresh barrier counts as released once, so the first waits pass at once
        qb = i % QBUF
        mbarrier.wait(q_empty.index(qb), ((i // QBUF) & 1) ^ 1)
        mbarrier.expect(q_bar.index(qb), PARTS * q_desc.block_type.nbytes)
        for part in gl.static_range(PARTS):
            _tma_load(q_desc, [q_row + part * BM, q_col], q_bar.index(qb), q_smem.index(qb * PARTS + part))
        for j in range(_key_blocks(m0, SK, BLOCK_M, BLOCK_N, CAUSAL)):
            slot = c % STAGES
            mbarrier.wait(kv_empty.index(slot), ((c // STAGES) & 1) ^ 1)
            mbarrier.expect(k_ready.index(slot), k_desc.block_type.nbytes)
            _tma_load(k_desc, [kv_row + j * BLOCK_N, kv_col], k_ready.index(slot), k_smem.index(slot))
            mbarrier.expect(v_ready.index(slot), v_desc.block_type.nbytes)
            if FP8:
                _tma_load(v_desc, [v_row, v_col + j * BLOCK_N], v_ready.index(slot), v_smem.index(slot))
            else:
                _tma_load(v_desc, [kv_row + j * BLOCK_N, kv_col], v_ready.index(slot), v_smem.index(slot))
            c += 1


@gluon.jit
def _softmax_step(s, m_i, l_i, qk_scale, vc, j, row0, MASK: gl.constexpr, s_layout: gl.constexpr,
                  BM: gl.constexpr, BLOCK_N: gl.constexpr, FP8: gl.constexpr):
    """Online softmax of one score tile (base 2): P, the new running max and sum, and the factor
    that rescales what was accumulated under the old max. FP8: P comes out times 2^vc (V's block
    scale against its head's largest, times 256; flash_fp8's module docstring), the sum without it."""
    if MASK:  # causal: key column c is visible to query row r when c <= r (Sq = Sk)
        rows = row0 + gl.arange(0, BM, layout=gl.SliceLayout(1, s_layout))
        cols = j * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        s = gl.where(gl.expand_dims(cols, 0) <= gl.expand_dims(rows, 1), s, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s, 1) * qk_scale)  # finite: every row sees key 0 in block 0
    alpha = gl.exp2(m_i - m_new)
    if FP8:
        p = gl.exp2(s * qk_scale - gl.expand_dims(m_new - vc, 1))
        l_i = l_i * alpha + gl.sum(p, 1) * gl.exp2(-vc)
    else:
        p = gl.exp2(s * qk_scale - gl.expand_dims(m_new, 1))
        l_i = l_i * alpha + gl.sum(p, 1)
    return p, m_new, l_i, alpha


@gluon.jit
def _operand(p, p_layout: gl.constexpr, dtype: gl.constexpr, FP8: gl.constexpr):
    """P (fp32, in the score tile's layout) rounded to dtype, as _pv takes it. bf16: the P·V
    operand itself (both layouts hold the same columns in each thread). FP8: a thread of the score
    tile holds columns 8i + 2t and 8i + 2t + 1 (t = lane % 4) while the e4m3 operand wants 4
    adjacent k per thread; instead of moving bytes between threads, P's columns are renumbered
    within each 32 (bits b q1 q0 → q1 q0 b), which makes the conversion a relabelling of
    registers, and V's keys are stored in the same order (fp8.quantize). Each pair of values then
    rounds into one 16-bit word: P is carried to the next block's P·V as those words, since
    e4m3 values carried one by one cost a byte unpack and repack per value."""
    if FP8:
        BM: gl.constexpr = p.shape[0]
        N: gl.constexpr = p.shape[1]
        p = gl.reshape(gl.permute(gl.reshape(p, [BM, N // 32, 2, 2, 4, 2]), [0, 1, 2, 4, 3, 5]), [BM, N])
        even, odd = gl.split(gl.reshape(gl.convert_layout(p, p_layout), [BM, N // 4, 2, 2]))
        x0, x2 = gl.split(even)
        x1, x3 = gl.split(odd)
        op = gl.inline_asm_elementwise(
            "{ .reg .b16 lo, hi; cvt.rn.satfinite.e4m3x2.f32 lo, $2, $1; cvt.rn.satfinite.e4m3x2.f32 hi, $4, $3; "
            "mov.b32 $0, {lo, hi}; }", "=r,r,r,r,r", [x0, x1, x2, x3], dtype=gl.int32, is_pure=True, pack=1)
    else:
        op = gl.convert_layout(p.to(dtype), p_layout)
    return op


@gluon.jit
def _pv(p_op, v_smem, slot, acc, p_layout: gl.constexpr, FP8: gl.constexpr):
    """Issue acc += P·V_slot (P as _operand made it). FP8 wgmma reads both operands K-major: V is
    held transposed."""
    if FP8:
        BM: gl.constexpr = p_op.shape[0]
        N: gl.constexpr = p_op.shape[1] * 4
        b0 = p_op.to(gl.int8).to(gl.float8e4nv, bitcast=True)
        b1 = (p_op >> 8).to(gl.int8).to(gl.float8e4nv, bitcast=True)
        b2 = (p_op >> 16).to(gl.int8).to(gl.float8e4nv, bitcast=True)
        b3 = (p_op >> 24).to(gl.int8).to(gl.float8e4nv, bitcast=True)
        p4 = gl.permute(gl.join(gl.join(b0, b1), gl.join(b2, b3)), [0, 1, 3, 2])
        p8 = gl.convert_layout(gl.reshape(p4, [BM, N]), p_layout)
        return warpgroup_mma(p8, v_smem.index(slot).permute((1, 0)), acc, is_async=True)
    else:
        return warpgroup_mma(p_op, v_smem.index(slot), acc, is_async=True)


@gluon.jit
def _block_scales(qk_tile, KS, VC, j, FP8: gl.constexpr):
    """Block j's factor for the scores and (FP8) log2 of V's factor for P."""
    if FP8:
        return qk_tile * gl.load(KS + j), gl.load(VC + j)
    else:
        return qk_tile, 0.0


@gluon.jit
def _block(j, c, turn, acc, m_i, l_i, p_op, q_tile, k_smem, v_smem, k_ready, v_ready, kv_empty, my_turn, other_turn,
           s_zero, qk_tile, KS, VC, row0, MASK: gl.constexpr, PINGPONG: gl.constexpr, FIRST: gl.constexpr,
           s_layout: gl.constexpr, o_layout: gl.constexpr, p_layout: gl.constexpr,
           BM: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, FP8: gl.constexpr):
    """Key block j (ring position c) scores and the previous block's P·V, both in flight; the
    softmax of S_j runs while the tensor cores finish P_{j-1} V_{j-1}. With PINGPONG the two
    consumer warpgroups take turns (turn counts them) to issue their matmuls, so one's softmax
    lines up with the other's matmuls (FA3 §3.1)."""
    slot = c % STAGES
    prev = (c - 1) % STAGES
    qk, vc = _block_scales(qk_tile, KS, VC, j, FP8)  # loads issued ahead of the waits
    mbarrier.wait(k_ready.index(slot), (c // STAGES) & 1)
    mbarrier.wait(v_ready.index(prev), ((c - 1) // STAGES) & 1)
    if PINGPONG:  # the first warpgroup's first wait passes on the fresh barrier
        mbarrier.wait(my_turn, (turn & 1) ^ FIRST)
    s_tok = warpgroup_mma(q_tile, k_smem.index(slot).permute((1, 0)), s_zero, use_acc=False, is_async=True)
    o_tok = _pv(p_op, v_smem, prev, acc, p_layout, FP8)
    if PINGPONG:
        mbarrier.arrive(other_turn, count=1)
    s = warpgroup_mma_wait(1, deps=[s_tok])  # S_j is done; P_{j-1} V_{j-1} may still run
    p, m_i, l_i, alpha = _softmax_step(s, m_i, l_i, qk, vc, j, row0, MASK, s_layout, BM, BLOCK_N, FP8)
    acc = warpgroup_mma_wait(0, deps=[o_tok])
    mbarrier.arrive(kv_empty.index(prev), count=1)  # K_{j-1} and V_{j-1} are no longer read here
    acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)
    return acc, m_i, l_i, _operand(p, p_layout, q_tile.dtype, FP8)


@gluon.jit
def _consumer(q_smem, o_smem, o_desc, k_smem, v_smem, q_bar, q_empty, k_ready, v_ready, kv_empty, turns, LSE,
              QS, KS, VC, VOUT, NQB, NKB, H, G, SQ, SK, sqb, sqh, sqs, n_m, num_tiles, group, SCHED, qk_scale,
              PART: gl.constexpr, PARTS: gl.constexpr, WARPS: gl.constexpr, D: gl.constexpr,
              BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
              SCHEDULED: gl.constexpr, TRIM: gl.constexpr, FP8: gl.constexpr):
    """One consumer partition: rows [PART·BM, (PART+1)·BM) of each tile's BLOCK_M query rows.
    FP8: QS holds one scale per BM query rows, KS one per key block, VC (per key block) log2 of what
    P is multiplied by before its rounding, VOUT (per head) what O is multiplied by at the end:
    V's block scale is folded into P (flash_fp8's module docstring)."""
    BM: gl.constexpr = BLOCK_M // PARTS
    KW: gl.constexpr = 32 if FP8 else 16  # the wgmma's reduction step: 32 bytes of operand
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[WARPS, 1],
                                                       instr_shape=[16, BLOCK_N, KW])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[WARPS, 1],
                                                       instr_shape=[16, D, KW])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=4 if FP8 else 2)
    o_rows: gl.constexpr = gl.SliceLayout(1, o_layout)
    PINGPONG: gl.constexpr = PARTS == 2
    FIRST: gl.constexpr = PART == 0
    QBUF: gl.constexpr = q_smem.shape[0] // PARTS
    o_tile = o_smem.index(PART)
    my_turn = turns.index(PART)
    other_turn = turns.index((PART + 1) % 2)
    dtype: gl.constexpr = q_smem.dtype
    s_zero = gl.zeros([BM, BLOCK_N], gl.float32, s_layout)

    c = 0  # key blocks consumed over all tiles: ring slot and phase
    turn = 0  # ping-pong turns taken over all tiles
    for i in range(_tile_count(num_tiles, SCHED, SCHEDULED)):
        start_m, off_hz = _tile(i, n_m, num_tiles // n_m, group, SCHED, CAUSAL, SCHEDULED)
        m0 = _first_row(start_m, n_m, SQ, BLOCK_M, TRIM)
        n_blocks = _key_blocks(m0, SK, BLOCK_M, BLOCK_N, CAUSAL)  # what the producer loads for the tile
        row0 = m0 + PART * BM  # first query row of this partition, within the head
        # TRIM: a causal partition stops at its own diagonal; the tile's later blocks are wholly
        # masked for its rows (exact no-ops), and the first partition always has one (kernels/NOTES.md)
        mine = _key_blocks(row0, SK, BM, BLOCK_N, CAUSAL) if TRIM else n_blocks
        n_full = row0 // BLOCK_N if CAUSAL else n_blocks  # blocks every row here sees in full
        m_i = gl.full([BM], float("-inf"), gl.float32, gl.SliceLayout(1, s_layout))
        l_i = gl.zeros([BM], gl.float32, gl.SliceLayout(1, s_layout))
        acc = gl.zeros([BM, D], gl.float32, o_layout)
        kv_head = off_hz // H * (H // G) + off_hz % H // G
        if FP8:
            qk_tile = qk_scale * gl.load(QS + off_hz * NQB + row0 // BM)
        else:
            qk_tile = qk_scale
        ks = KS + kv_head * NKB
        vcs = VC + kv_head * NKB
        qk, vc = _block_scales(qk_tile, ks, vcs, 0, FP8)

        q_tile = q_smem.index(i % QBUF * PARTS + PART)
        mbarrier.wait(q_bar.index(i % QBUF), (i // QBUF) & 1)
        # block 0: its scores alone; its P·V is issued with block 1's scores
        mbarrier.wait(k_ready.index(c % STAGES), (c // STAGES) & 1)
        s_tok = warpgroup_mma(q_tile, k_smem.index(c % STAGES).permute((1, 0)), s_zero, use_acc=False,
                              is_async=True)
        s = warpgroup_mma_wait(0, deps=[s_tok])
        p, m_i, l_i, alpha = _softmax_step(s, m_i, l_i, qk, vc, 0, row0, CAUSAL, s_layout, BM, BLOCK_N, FP8)
        p_op = _operand(p, p_layout, dtype, FP8)
        # blocks every row sees in full, then (causal) the blocks on the diagonal, masked
        for j in range(1, gl.maximum(n_full, 1)):
            acc, m_i, l_i, p_op = _block(j, c + j, turn + j - 1, acc, m_i, l_i, p_op, q_tile, k_smem, v_smem,
                                         k_ready, v_ready, kv_empty, my_turn, other_turn, s_zero, qk_tile, ks, vcs,
                                         row0, False, PINGPONG, FIRST, s_layout, o_layout, p_layout, BM, BLOCK_N,
                                         STAGES, FP8)
        for j in range(gl.maximum(n_full, 1), mine):
            acc, m_i, l_i, p_op = _block(j, c + j, turn + j - 1, acc, m_i, l_i, p_op, q_tile, k_smem, v_smem,
                                         k_ready, v_ready, kv_empty, my_turn, other_turn, s_zero, qk_tile, ks, vcs,
                                         row0, True, PINGPONG, FIRST, s_layout, o_layout, p_layout, BM, BLOCK_N,
                                         STAGES, FP8)
        if PINGPONG:  # the turns of the blocks skipped, so the other warpgroup's stay in step
            for j in range(mine, n_blocks):
                mbarrier.wait(my_turn, ((turn + j - 1) & 1) ^ FIRST)
                mbarrier.arrive(other_turn, count=1)
        last = c + mine - 1
        mbarrier.wait(v_ready.index(last % STAGES), (last // STAGES) & 1)
        o_tok = _pv(p_op, v_smem, last % STAGES, acc, p_layout, FP8)
        acc = warpgroup_mma_wait(0, deps=[o_tok])
        mbarrier.arrive(kv_empty.index(last % STAGES), count=1)
        for r in range(c + mine, c + n_blocks):  # skipped: release each slot once loaded, not before
            # (an arrival ahead of the load would count toward the slot's previous use)
            mbarrier.wait(k_ready.index(r % STAGES), (r // STAGES) & 1)
            mbarrier.wait(v_ready.index(r % STAGES), (r // STAGES) & 1)
            mbarrier.arrive(kv_empty.index(r % STAGES), count=1)
        mbarrier.arrive(q_empty.index(i % QBUF), count=1)  # every S of this tile is done: its Q buffer is free
        c += n_blocks
        turn += n_blocks - 1

        if FP8:  # acc holds the sum of P·V over VOUT (what P and V were scaled by)
            o = acc / gl.expand_dims(gl.convert_layout(l_i / gl.load(VOUT + kv_head), o_rows), 1)
        else:
            o = acc / gl.expand_dims(gl.convert_layout(l_i, o_rows), 1)
        rows = row0 + gl.arange(0, BM, layout=gl.SliceLayout(1, s_layout))
        gl.store(LSE + off_hz * SQ + rows, (m_i + gl.log2(l_i)) * 0.6931471805599453)
        tma.store_wait(0)  # the previous tile's O has left o_tile
        o_tile.store(o.to(o_smem.dtype))
        fence_async_shared()
        o_row, o_col = _origin(off_hz // H, off_hz % H, sqb, sqh, sqs)  # o is laid out as q
        _tma_store(o_desc, [o_row + row0, o_col], o_tile)
    tma.store_wait(0)


@gluon.jit
def _fwd_kernel(q_desc, k_desc, v_desc, o_desc, LSE, QS, KS, VC, VOUT, NQB, NKB, H, G, SQ, SK, sqb, sqh, sqs,
                skb, skh, sks, svb, svh, svs, qk_scale, num_tiles, group, SCHED,
                D: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                CAUSAL: gl.constexpr, PARTS: gl.constexpr, SCHEDULED: gl.constexpr, OWN_O: gl.constexpr,
                TRIM: gl.constexpr, FP8: gl.constexpr, Q_BUFFERS: gl.constexpr, num_warps: gl.constexpr):
    """Each program runs its share of the num_tiles tiles (_tile); one each when the grid has
    num_tiles programs. FP8: e4m3 Q, K and V (transposed) with their scales (_consumer); otherwise
    QS .. NKB and the sv* strides are not read."""
    n_m = gl.cdiv(SQ, BLOCK_M)
    dtype: gl.constexpr = q_desc.dtype
    QBUF: gl.constexpr = Q_BUFFERS if OWN_O else 1  # one-tile programs have no next Q to load early
    q_smem = gl.allocate_shared_memory(dtype, [QBUF * PARTS] + q_desc.block_type.shape, q_desc.layout)
    if OWN_O:  # a program with several tiles: the next Q may land while this tile's O leaves
        o_smem = gl.allocate_shared_memory(o_desc.dtype, [PARTS] + o_desc.block_type.shape, o_desc.layout)
    else:  # one tile: O goes out through Q's buffer once every S is done, and the space saved buys a stage
        o_smem = q_smem
    k_smem = gl.allocate_shared_memory(dtype, [STAGES] + k_desc.block_type.shape, k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES] + v_desc.block_type.shape, v_desc.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [QBUF, 1], mbarrier.MBarrierLayout())
    q_empty = gl.allocate_shared_memory(gl.int64, [QBUF, 1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    kv_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    turns = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(QBUF):
        mbarrier.init(q_bar.index(i), count=1)
        mbarrier.init(q_empty.index(i), count=PARTS)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(kv_empty.index(i), count=PARTS)  # every consumer releases each slot
    for i in gl.static_range(2):
        mbarrier.init(turns.index(i), count=1)

    if PARTS == 2:  # two consumer warpgroups in ping-pong, 4 warps each, then the producer warp
        gl.warp_specialize([
            (_consumer, (q_smem, o_smem, o_desc, k_smem, v_smem, q_bar, q_empty, k_ready, v_ready, kv_empty, turns,
                         LSE, QS, KS, VC, VOUT, NQB, NKB, H, G, SQ, SK, sqb, sqh, sqs, n_m, num_tiles, group, SCHED,
                         qk_scale, 0, 2, 4, D, BLOCK_M, BLOCK_N, STAGES, CAUSAL, SCHEDULED, TRIM, FP8)),
            (_consumer, (q_smem, o_smem, o_desc, k_smem, v_smem, q_bar, q_empty, k_ready, v_ready, kv_empty, turns,
                         LSE, QS, KS, VC, VOUT, NQB, NKB, H, G, SQ, SK, sqb, sqh, sqs, n_m, num_tiles, group, SCHED,
                         qk_scale, 1, 2, 4, D, BLOCK_M, BLOCK_N, STAGES, CAUSAL, SCHEDULED, TRIM, FP8)),
            (_producer, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, q_empty, k_ready, v_ready, kv_empty,
                         H, G, SQ, SK, sqb, sqh, sqs, skb, skh, sks, svb, svh, svs, n_m, num_tiles, group, SCHED,
                         BLOCK_M, BLOCK_N, STAGES, PARTS, CAUSAL, SCHEDULED, TRIM, FP8)),
        ], [4, 1], [216, 24])  # 216: room for the default partition to take up to 256
    elif PARTS == 3:  # three consumer warpgroups of 64 rows each, no turns (FA3's choice at D = 64)
        gl.warp_specialize([
            (_consumer, (q_smem, o_smem, o_desc, k_smem, v_smem, q_bar, q_empty, k_ready, v_ready, kv_empty, turns,
                         LSE, QS, KS, VC, VOUT, NQB, NKB, H, G, SQ, SK, sqb, sqh, sqs, n_m, num_tiles, group, SCHED,
                         qk_scale, 0, 3, 4, D, BLOCK_M, BLOCK_N, STAGES, CAUSAL, SCHEDULED, TRIM, FP8)),
            (_consumer, (q_smem, o_smem, o_desc, k_smem, v_smem, q_bar, q_empty, k_ready, v_ready, kv_empty, turns,
                         LSE, QS, KS, VC, VOUT, NQB, NKB, H, G, SQ, SK, sqb, sqh, sqs, n_m, num_tiles, group, SCHED,
                         qk_scale, 1, 3, 4, D, BLOCK_M, BLOCK_N, STAGES, CAUSAL, SCHEDULED, TRIM, FP8)),
            (_consumer, (q_smem, o_smem, o_desc, k_smem, v_smem, q_bar, q_empty, k_ready, v_ready, kv_empty, turns,
                         LSE, QS, KS, VC, VOUT, NQB, NKB, H, G, SQ, SK, sqb, sqh, sqs, n_m, num_tiles, group, SCHED,
                         qk_scale, 2, 3, 4, D, BLOCK_M, BLOCK_N, STAGES, CAUSAL, SCHEDULED, TRIM, FP8)),
            (_producer, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, q_empty, k_ready, v_ready, kv_empty,
                         H, G, SQ, SK, sqb, sqh, sqs, skb, skh, sks, svb, svh, svs, n_m, num_tiles, group, SCHED,
                         BLOCK_M, BLOCK_N, STAGES, PARTS, CAUSAL, SCHEDULED, TRIM, FP8)),
        ], [4, 4, 1], [160, 160, 24])  # 160: the least spill (40 bytes) of 144-176 with Triton 3.6's ptxas
    else:  # one consumer partition of num_warps warps sharing the BLOCK_M rows
        gl.warp_specialize([
            (_consumer, (q_smem, o_smem, o_desc, k_smem, v_smem, q_bar, q_empty, k_ready, v_ready, kv_empty, turns,
                         LSE, QS, KS, VC, VOUT, NQB, NKB, H, G, SQ, SK, sqb, sqh, sqs, n_m, num_tiles, group, SCHED,
                         qk_scale, 0, 1, num_warps, D, BLOCK_M, BLOCK_N, STAGES, CAUSAL, SCHEDULED, TRIM,
                         FP8)),
            (_producer, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, q_empty, k_ready, v_ready, kv_empty,
                         H, G, SQ, SK, sqb, sqh, sqs, skb, skh, sks, svb, svh, svs, n_m, num_tiles, group, SCHED,
                         BLOCK_M, BLOCK_N, STAGES, PARTS, CAUSAL, SCHEDULED, TRIM, FP8)),
        ], [1], [24])


# --------------------------------------------------------------------------- host


GROUP_HEADS = True  # causal programs longest first over groups of heads (_grouped); the benchmark compares
TRIM = True  # causal: overlap at the short end, each partition stops at its diagonal (_first_row, kernels/NOTES.md)
Q_BUFFERS = 2  # programs with several tiles: the next tile's Q loads while this one runs (kernels/NOTES.md)
L2_SHARE = 24 * 2**20  # bytes one group of heads may stream through L2 at once (an H200 has 50 MB)


def causal_group(n: int, heads: int, slots: int, head_bytes: int) -> int:
    """How many heads _grouped interleaves. A head's causal programs have n, n − 1, ..., 1 blocks of
    work; a group of g heads holds g·n(n + 1)/2, which spread over the `slots` programs the GPU runs
    at once should be at least n (the longest program), so g ≥ 2·slots / (n + 1). At most as many
    heads as fit L2_SHARE with head_bytes each (what a head's programs read in common)."""
    if not GROUP_HEADS:
        return 1
    return max(1, min(heads, -(-2 * slots // (n + 1)), L2_SHARE // head_bytes))


BALANCED = True  # causal persistent lists: balanced by _schedule; False deals pairs as before (the benchmark)


@functools.lru_cache(maxsize=64)
def _schedule(n_m: int, heads: int, programs: int, group: int, sq: int, bm: int, bn: int, trim: bool,
              balanced: bool, device: torch.device) -> torch.Tensor:
    """Each persistent program's causal tiles, as _tile reads them: int32 [programs] counts, then
    entry k of program p at programs·(k + 1) + p, a tile being head·n_m + query block.

    Tiles go longest first over groups of heads (so a few heads share L2 at a time, as _grouped),
    each to the program with the least work so far, counted in key blocks plus one for the tile's
    prologue (list scheduling). Dealing them round-robin, even in pairs of one long and one short
    tile, left 3-9 % of the GPU idle at the end (simulated: kernels/NOTES.md); lists end
    within 2 % of even when a group holds twice the longest tile's work per program
    (causal_group with twice the programs, as _launch calls it).
    balanced=False (BALANCED, for the benchmark to compare) deals the previous kernel's pairs
    instead: pair u, a head's blocks i and n_m − 1 − i, to program u % programs (n_m even)."""
    first = [max(sq - (n_m - s) * bm, 0) if trim else min(s * bm, sq - bm) for s in range(n_m)]  # _first_row
    cost = [-(-(m0 + bm) // bn) + 1 for m0 in first]
    lists: list[list[int]] = [[] for _ in range(programs)]
    if balanced or n_m % 2:
        rem = heads % group  # the smaller group first, as _grouped
        bounds = ([0] if rem else []) + list(range(rem, heads + 1, group))
        load = [(0, p) for p in range(programs)]
        for lo, hi in zip(bounds, bounds[1:]):
            for s in sorted(range(n_m), key=lambda s: -cost[s]):
                for h in range(lo, hi):
                    work, p = heapq.heappop(load)
                    lists[p].append(h * n_m + s)
                    heapq.heappush(load, (work + cost[s], p))
    else:
        half = n_m // 2
        for u in range(heads * half):
            i = u % half
            lists[u % programs] += [u // half * n_m + n_m - 1 - i, u // half * n_m + i]
    table = [[len(t) for t in lists]] + [[t[k] if k < len(t) else 0 for t in lists]
                                         for k in range(max(map(len, lists)))]
    return torch.tensor(table, dtype=torch.int32).flatten().to(device)


_launch_fwd = FastLaunch(_fwd_kernel)  # skips Triton's binder on repeated calls (host time, kernels/NOTES.md)


def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, sm_scale: float,
            cfg: dict | None = None):
    """o [B, H, Sq, D] in q's layout and lse [B, H, Sq] (natural log), as flash.py's forward
    returns them."""
    o = torch.empty_like(q)  # q's strides: q is [B, H, S, D] or a [B, S, H, D] view (shapes_supported)
    return _launch(q, k, v, o, causal, sm_scale, cfg or CANDIDATES[q.shape[-1]][0], None)


def forward_fp8(q8, k8, vt8, scales: tuple, causal: bool, sm_scale: float, cfg: dict, out_dtype: torch.dtype):
    """The FP8 forward (fp8.prepare quantises its inputs): q8 [B, H, Sq, D] and k8 [B, Hkv,
    Sk, D] contiguous e4m3, vt8 V transposed [B, Hkv, D, Sk]; scales (QS [B, H, Sq / rows], KS [B,
    Hkv, Sk / BLOCK_N], VC as KS, VOUT [B, Hkv]) as _consumer reads them, rows being BLOCK_M / PARTS.
    Shapes as `shapes_supported`. Returns (o in out_dtype, lse)."""
    B, H, SQ, D = q8.shape
    o = torch.empty((B, H, SQ, D), dtype=out_dtype, device=q8.device)
    return _launch(q8, k8, vt8, o, causal, sm_scale, cfg, scales)


def _launch(q, k, v, o, causal, sm_scale, cfg, scales):
    B, H, SQ, D = q.shape
    HKV, SK = k.shape[1], k.shape[2]
    bm, bn = cfg["BLOCK_M"], cfg["BLOCK_N"]
    lse = torch.empty((B, H, SQ), dtype=torch.float32, device=q.device)
    extra = {"maxnreg": cfg["maxnreg"]} if cfg.get("maxnreg") else {}
    rows = bm // cfg["PARTS"]  # each consumer partition reads and writes its own rows
    if SQ < bm:
        raise ValueError(f"{bm}-row tiles need at least {bm} query rows, got {SQ}")
    n_m = -(-SQ // bm)  # the last block overlaps the one before when bm does not divide SQ (_first_row)
    num_tiles = n_m * B * H
    slots = (2 if cfg.get("maxnreg") == 128 else 1) * sm_count(q.device.index)  # programs resident at once
    programs = min(num_tiles, slots) if cfg.get("PERSISTENT") else num_tiles
    head_bytes = 2 * SK * D * k.element_size() * HKV // H  # K and V per query head
    scheduled = bool(causal) and programs < num_tiles  # persistent causal programs take the host's lists
    if scheduled:
        group = causal_group(n_m, B * H, 2 * slots, head_bytes)  # (_schedule)
        sched = _schedule(n_m, B * H, programs, group, SQ, bm, bn, TRIM, BALANCED, q.device)
    else:
        group, sched = causal_group(n_m, B * H, slots, head_bytes), lse  # sched is not read
    fp8 = scales is not None
    if fp8:  # V transposed: D rows by BLOCK_N keys per block
        qs, ks, vc, vout = scales
        v_desc, sv, nqb, nkb = _descriptor(v, D, bn), v.stride()[:3], qs.shape[-1], ks.shape[-1]
    else:  # the scale arguments are not read
        qs = ks = vc = vout = lse
        v_desc, sv, nqb, nkb = _descriptor(v, bn), k.stride()[:3], 0, 0
    _launch_fwd(
        (programs,), _descriptor(q, rows), _descriptor(k, bn), v_desc, _descriptor(o, rows), lse, qs, ks, vc, vout,
        nqb, nkb, H, H // HKV, SQ, SK, *q.stride()[:3], *k.stride()[:3], *sv, sm_scale * LOG2E, num_tiles, group,
        sched, D=D, BLOCK_M=bm, BLOCK_N=bn, STAGES=cfg["STAGES"], CAUSAL=bool(causal), PARTS=cfg["PARTS"],
        SCHEDULED=scheduled,
        OWN_O=fp8 or programs < num_tiles, TRIM=TRIM, FP8=fp8, Q_BUFFERS=Q_BUFFERS, num_warps=cfg["num_warps"],
        **extra)
    return o, lse
