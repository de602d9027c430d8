"""FlashAttention backward for Hopper in Gluon: TMA producer warps and asynchronous wgmma.

kernels/NOTES.md found that the backward's 7-matmul split already
runs the tensor cores near their rate in plain Triton, and that a deterministic 5-matmul pass
loses more to its ordered dQ hand-off than it saves. These kernels keep the split's two passes
and write each the way flash_hopper.py writes the forward (FlashAttention-3, Shah et al. 2024:
warp specialisation and asynchronous wgmma):

- dK, dV (_bwd_kv_kernel). A program owns BLOCK_N keys of one key/value head: K and V stay in
  shared memory, dK and dV accumulate in the registers of PARTS consumer warpgroups of 64 key
  rows. A producer warp streams each query block's Q and dO through a ring of STAGES slots, for
  every query head of the group in turn (GQA: dK, dV summed over the group in a fixed order).
  Per query block a consumer issues Sᵀ = K Qᵀ and dPᵀ = V dOᵀ together, computes Pᵀ while dPᵀ
  is on the tensor cores, issues dV += Pᵀ dO, computes dSᵀ = Pᵀ ∘ (dPᵀ − Δ) while dV runs, and
  issues dK += dSᵀ Q. REVERSE configs take the query blocks from the last one down, so the causal
  programs of a head, which start at their own diagonal otherwise, read the same blocks in step
  (kernels/NOTES.md: +3-7 % causal, -4-5 % unmasked at D = 128; the plan picks per shape).
- dQ (_bwd_q_kernel). A program owns BLOCK_M query rows (Q, dO in shared memory, dQ in registers
  of PARTS warpgroups of 64 rows); the producer streams K_j, V_j; per key block a consumer issues
  S = Q Kᵀ and dP = dO Vᵀ together, computes P while dP runs, then dQ += dS K_j.

Two consumer warpgroups interleave, so one's elementwise work lines up with the other's matmuls.
No atomics: every sum runs in a fixed order, so the gradients are bitwise reproducible. Scope as
flash_hopper's forward (bf16/fp16, D = 64 or 128, sequence lengths multiples of 128, causal only
with Sq = Sk) and dO readable by a descriptor; `applicable` says when. The log-sum-exp (base 2)
and Δ come from flash.py's preparation kernel, in [B·H, Sq].
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_wait)

from .common import LOG2E
from .fastlaunch import FastLaunch
from .gluon_common import TILE, _cta_barrier, _descriptor, _origin, _tma_load, _tma_store
from .gluon_common import applicable as _forward_scope


def _cfg(block_m, block_n, stages, reverse=False):
    # two consumer warpgroups; REVERSE (dK/dV): query blocks last to first (kernels/NOTES.md)
    return dict(BLOCK_M=block_m, BLOCK_N=block_n, STAGES=stages, PARTS=2, REVERSE=reverse)


# Per head dim, best first. dK/dV: BLOCK_M query rows streamed per step against BLOCK_N keys per
# program, 64 key rows per warpgroup (wgmma's M; 32-row query blocks lost 10-15 %, kernels/NOTES.md).
CANDIDATES = {
    64: [_cfg(64, 128, 3), _cfg(64, 128, 4), _cfg(64, 128, 3, reverse=True)],
    128: [_cfg(64, 128, 2), _cfg(64, 128, 3), _cfg(64, 128, 2, reverse=True)],
}
# dQ: BLOCK_M query rows per program in PARTS warpgroups of 64, BLOCK_N keys streamed per step
Q_CANDIDATES = {
    64: [_cfg(128, 128, 3), _cfg(128, 64, 4)],
    128: [_cfg(128, 64, 3), _cfg(128, 128, 2), _cfg(128, 64, 4)],
}


# --------------------------------------------------------------------------- dK, dV


@gluon.jit
def _query_blocks(start_n, n_m, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr):
    """The query blocks that see keys [start_n, start_n + BLOCK_N): first, and first unmasked."""
    if CAUSAL:  # Sq = Sk: query row r sees key c when c <= r
        return start_n // BLOCK_M, gl.minimum((start_n + BLOCK_N) // BLOCK_M, n_m)
    else:
        return 0, 0


@gluon.jit
def _kv_producer(q_desc, do_desc, k_desc, v_desc, q_smem, do_smem, k_smem, v_smem, lse_smem, delta_smem, kv_bar,
                 ready, empty, LSE2, DELTA, b, hk, start_n, G, H, SQ, n_m, sqb, sqh, sqs, sdob, sdoh, sdos, skb,
                 skh, sks, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, PARTS: gl.constexpr,
                 CAUSAL: gl.constexpr, REVERSE: gl.constexpr):
    """One warp: this program's K and V once, then every (query head of the group, query block)
    Q and dO into slot it % STAGES, in the order the consumers take them, with the block's rows
    of LSE and Δ: the consumers' matmuls start from those, so they wait on shared memory, not on
    a load from L2 at the top of every step (the producer runs STAGES slots ahead)."""
    rows_layout: gl.constexpr = gl.BlockedLayout([BLOCK_M // 32], [32], [1], [0])
    BNP: gl.constexpr = BLOCK_N // PARTS
    kv_row, kv_col = _origin(b, hk, skb, skh, sks)
    mbarrier.expect(kv_bar, 2 * PARTS * k_desc.block_type.nbytes)
    for part in gl.static_range(PARTS):
        _tma_load(k_desc, [kv_row + start_n + part * BNP, kv_col], kv_bar, k_smem.index(part))
        _tma_load(v_desc, [kv_row + start_n + part * BNP, kv_col], kv_bar, v_smem.index(part))
    first, _ = _query_blocks(start_n, n_m, BLOCK_M, BLOCK_N, CAUSAL)
    it = 0
    for g in range(G):
        h = hk * G + g
        q_row, q_col = _origin(b, h, sqb, sqh, sqs)
        do_row, do_col = _origin(b, h, sdob, sdoh, sdos)
        row_base = (b * H + h) * SQ
        for t in range(first, n_m):
            i = n_m - 1 - (t - first) if REVERSE else t
            slot = it % STAGES
            rows = row_base + i * BLOCK_M + gl.arange(0, BLOCK_M, layout=rows_layout)
            lse = gl.load(LSE2 + rows)
            delta = gl.load(DELTA + rows)
            mbarrier.wait(empty.index(slot), ((it // STAGES) & 1) ^ 1)  # fresh barriers pass once
            lse_smem.index(slot).store(lse)
            delta_smem.index(slot).store(delta)
            _cta_barrier()  # every lane's rows are written before one lane's arrival releases them
            mbarrier.expect(ready.index(slot), q_desc.block_type.nbytes + do_desc.block_type.nbytes)
            _tma_load(q_desc, [q_row + i * BLOCK_M, q_col], ready.index(slot), q_smem.index(slot))
            _tma_load(do_desc, [do_row + i * BLOCK_M, do_col], ready.index(slot), do_smem.index(slot))
            it += 1


@gluon.jit
def _barriers(STAGES: gl.constexpr, PARTS: gl.constexpr):
    """The mbarriers of a kernel here: one for the tiles loaded once per program, and the ring's
    `ready` (the producer's loads landed) and `empty` (every consumer released the slot)."""
    once = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(once, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=PARTS)
    return once, ready, empty


@gluon.jit
def _fresh(x):
    """x with a register of its own for every element. A tile broadcast from a vector repeats values
    within a thread; as a wgmma accumulator the repeats became register copies issued between two
    matmuls, and ptxas then waited for the first before issuing the second."""
    return gl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [x], dtype=gl.float32, is_pure=False, pack=1)


@gluon.jit
def _kv_step(it, i, dk, dv, k_tile, v_tile, q_smem, do_smem, lse_smem, delta_smem, ready, empty, kcols, s_zero,
             qk_scale, inv_scale, MASK: gl.constexpr, s_layout: gl.constexpr, op_layout: gl.constexpr,
             BLOCK_M: gl.constexpr, STAGES: gl.constexpr):
    """Query block i (ring position it) against this partition's keys: four matmuls, two of them
    overlapped with the elementwise work."""
    slot = it % STAGES
    mbarrier.wait(ready.index(slot), (it // STAGES) & 1)
    q_tile = q_smem.index(slot)
    do_tile = do_smem.index(slot)
    # The accumulators start at -LSE / scale and -Δ, so the matmuls subtract them: no LSE or Δ
    # registers stay live across the waits (at D = 128 they made the consumers spill).
    col_layout: gl.constexpr = gl.SliceLayout(0, s_layout)
    lse = lse_smem.index(slot).load(col_layout)
    st_init = _fresh(s_zero - gl.expand_dims(lse * inv_scale, 0))  # lse is base 2
    dpt_init = _fresh(s_zero - gl.expand_dims(delta_smem.index(slot).load(col_layout), 0))
    st_tok = warpgroup_mma(k_tile, q_tile.permute((1, 0)), st_init, is_async=True)
    dpt_tok = warpgroup_mma(v_tile, do_tile.permute((1, 0)), dpt_init, is_async=True)
    st = warpgroup_mma_wait(1, deps=[st_tok])  # Sᵀ - LSE / scale done; dPᵀ - Δ may still run
    pt = gl.exp2(st * qk_scale)
    if MASK:
        qrows = i * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, s_layout))
        pt = gl.where(gl.expand_dims(kcols, 1) <= gl.expand_dims(qrows, 0), pt, 0.0)
    pt_op = gl.convert_layout(pt.to(q_tile.dtype), op_layout)
    dv_tok = warpgroup_mma(pt_op, do_tile, dv, is_async=True)
    dst = pt * warpgroup_mma_wait(1, deps=[dpt_tok])  # dPᵀ - Δ done; dV may still run
    dst_op = gl.convert_layout(dst.to(q_tile.dtype), op_layout)
    dk_tok = warpgroup_mma(dst_op, q_tile, dk, is_async=True)
    dk, dv, _, _ = warpgroup_mma_wait(0, deps=[dk_tok, dv_tok, pt_op, dst_op])
    mbarrier.arrive(empty.index(slot), count=1)
    return dk, dv


@gluon.jit
def _kv_consumer(k_smem, v_smem, q_smem, do_smem, lse_smem, delta_smem, kv_bar, ready, empty, dk_desc, dv_desc,
                 b, hk, start_n, G, H, SQ, n_m, sdkb, sdkh, sdks, qk_scale, sm_scale,
                 PART: gl.constexpr, PARTS: gl.constexpr, D: gl.constexpr, BLOCK_M: gl.constexpr,
                 BLOCK_N: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr, REVERSE: gl.constexpr):
    """One warpgroup: keys [PART·BNP, (PART+1)·BNP) of the program's block; dK, dV of those rows."""
    BNP: gl.constexpr = BLOCK_N // PARTS
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_M, 16])
    a_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, D, 16])
    op_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=a_layout, k_width=2)
    k_tile = k_smem.index(PART)
    v_tile = v_smem.index(PART)
    s_zero = gl.zeros([BNP, BLOCK_M], gl.float32, s_layout)
    dk = gl.zeros([BNP, D], gl.float32, a_layout)
    dv = gl.zeros([BNP, D], gl.float32, a_layout)
    kcols = start_n + PART * BNP + gl.arange(0, BNP, layout=gl.SliceLayout(1, s_layout))
    first, unmasked = _query_blocks(start_n, n_m, BLOCK_M, BLOCK_N, CAUSAL)
    inv_scale = 1.0 / qk_scale
    mbarrier.wait(kv_bar, 0)
    it = 0
    for g in range(G):  # the query heads of the group, one after the other: a fixed summation order
        if REVERSE:  # from the last query block down: a head's programs all start on the same block
            for t in range(gl.maximum(first, unmasked), n_m):
                dk, dv = _kv_step(it, n_m - 1 - t + gl.maximum(first, unmasked), dk, dv, k_tile, v_tile, q_smem,
                                  do_smem, lse_smem, delta_smem, ready, empty, kcols, s_zero, qk_scale, inv_scale, False,
                                  s_layout, op_layout, BLOCK_M, STAGES)
                it += 1
            for t in range(first, unmasked):  # causal: the blocks on the diagonal
                dk, dv = _kv_step(it, unmasked - 1 - t + first, dk, dv, k_tile, v_tile, q_smem, do_smem, lse_smem,
                                  delta_smem, ready, empty, kcols, s_zero, qk_scale, inv_scale, True, s_layout, op_layout,
                                  BLOCK_M, STAGES)
                it += 1
        else:
            for i in range(first, unmasked):  # causal: the blocks on the diagonal
                dk, dv = _kv_step(it, i, dk, dv, k_tile, v_tile, q_smem, do_smem, lse_smem, delta_smem, ready, empty,
                                  kcols, s_zero, qk_scale, inv_scale, True, s_layout, op_layout, BLOCK_M, STAGES)
                it += 1
            for i in range(gl.maximum(first, unmasked), n_m):
                dk, dv = _kv_step(it, i, dk, dv, k_tile, v_tile, q_smem, do_smem, lse_smem, delta_smem, ready, empty,
                                  kcols, s_zero, qk_scale, inv_scale, False, s_layout, op_layout, BLOCK_M, STAGES)
                it += 1
    # every matmul reading K and V is done: dK and dV leave through their buffers
    dtype: gl.constexpr = k_smem.dtype
    k_tile.store((dk * sm_scale).to(dtype))
    v_tile.store(dv.to(dtype))
    fence_async_shared()
    row, col = _origin(b, hk, sdkb, sdkh, sdks)  # dk and dv are laid out alike
    _tma_store(dk_desc, [row + start_n + PART * BNP, col], k_tile)
    _tma_store(dv_desc, [row + start_n + PART * BNP, col], v_tile)
    tma.store_wait(0)


@gluon.jit
def _bwd_kv_kernel(q_desc, do_desc, k_desc, v_desc, dk_desc, dv_desc, LSE2, DELTA, H, HKV, SQ, SK,
                   sqb, sqh, sqs, sdob, sdoh, sdos, skb, skh, sks, sdkb, sdkh, sdks, qk_scale, sm_scale,
                   D: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                   PARTS: gl.constexpr, CAUSAL: gl.constexpr, REVERSE: gl.constexpr, num_warps: gl.constexpr):
    """Program (key block, batch·key/value head), key block fastest: the programs running at once
    read the same head's Q and dO from L2."""
    n_kb = SK // BLOCK_N
    pid = gl.program_id(0)
    start_n = pid % n_kb * BLOCK_N
    b = pid // n_kb // HKV
    hk = pid // n_kb % HKV
    G = H // HKV
    n_m = SQ // BLOCK_M
    dtype: gl.constexpr = q_desc.dtype
    BNP: gl.constexpr = BLOCK_N // PARTS
    k_smem = gl.allocate_shared_memory(dtype, [PARTS, BNP, D], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [PARTS, BNP, D], v_desc.layout)
    q_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, D], q_desc.layout)
    do_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, D], do_desc.layout)
    rows_smem: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, order=[0])  # per slot: one row
    gl.static_assert(STAGES <= 4)  # one row of LSE and of Δ per ring slot; shapes are powers of two
    lse_smem = gl.allocate_shared_memory(gl.float32, [4, BLOCK_M], rows_smem)
    delta_smem = gl.allocate_shared_memory(gl.float32, [4, BLOCK_M], rows_smem)
    kv_bar, ready, empty = _barriers(STAGES, PARTS)
    gl.warp_specialize([
        (_kv_consumer, (k_smem, v_smem, q_smem, do_smem, lse_smem, delta_smem, kv_bar, ready, empty, dk_desc, dv_desc,
                        b, hk, start_n, G, H, SQ, n_m, sdkb, sdkh, sdks, qk_scale, sm_scale, 0, 2, D, BLOCK_M,
                        BLOCK_N, STAGES, CAUSAL, REVERSE)),
        (_kv_consumer, (k_smem, v_smem, q_smem, do_smem, lse_smem, delta_smem, kv_bar, ready, empty, dk_desc, dv_desc,
                        b, hk, start_n, G, H, SQ, n_m, sdkb, sdkh, sdks, qk_scale, sm_scale, 1, 2, D, BLOCK_M,
                        BLOCK_N, STAGES, CAUSAL, REVERSE)),
        (_kv_producer, (q_desc, do_desc, k_desc, v_desc, q_smem, do_smem, k_smem, v_smem, lse_smem, delta_smem, kv_bar,
                        ready, empty, LSE2, DELTA, b, hk, start_n, G, H, SQ, n_m, sqb, sqh, sqs, sdob, sdoh, sdos, skb,
                        skh, sks, BLOCK_M, BLOCK_N, STAGES, PARTS, CAUSAL, REVERSE)),
    ], [4, 1], [240, 24])  # consumer 2, producer: registers each (the first takes the rest)


# --------------------------------------------------------------------------- dQ


@gluon.jit
def _q_producer(q_desc, do_desc, k_desc, v_desc, q_smem, do_smem, k_smem, v_smem, q_bar, ready, empty,
                b, h, G, start_m, n_blocks, sqb, sqh, sqs, sdob, sdoh, sdos, skb, skh, sks,
                BLOCK_N: gl.constexpr, STAGES: gl.constexpr, PARTS: gl.constexpr):
    """One warp: this program's Q and dO rows once, then K_j and V_j into slot j % STAGES."""
    BM: gl.constexpr = q_desc.block_type.shape[0]
    q_row, q_col = _origin(b, h, sqb, sqh, sqs)
    do_row, do_col = _origin(b, h, sdob, sdoh, sdos)
    mbarrier.expect(q_bar, 2 * PARTS * q_desc.block_type.nbytes)
    for part in gl.static_range(PARTS):
        _tma_load(q_desc, [q_row + start_m + part * BM, q_col], q_bar, q_smem.index(part))
        _tma_load(do_desc, [do_row + start_m + part * BM, do_col], q_bar, do_smem.index(part))
    kv_row, kv_col = _origin(b, h // G, skb, skh, sks)
    for j in range(n_blocks):
        slot = j % STAGES
        mbarrier.wait(empty.index(slot), ((j // STAGES) & 1) ^ 1)  # fresh barriers pass once
        mbarrier.expect(ready.index(slot), 2 * k_desc.block_type.nbytes)
        _tma_load(k_desc, [kv_row + j * BLOCK_N, kv_col], ready.index(slot), k_smem.index(slot))
        _tma_load(v_desc, [kv_row + j * BLOCK_N, kv_col], ready.index(slot), v_smem.index(slot))


@gluon.jit
def _q_step(j, dq, q_tile, do_tile, k_smem, v_smem, ready, empty, lse, delta, rows, s_zero, qk_scale,
            MASK: gl.constexpr, s_layout: gl.constexpr, op_layout: gl.constexpr, BLOCK_N: gl.constexpr,
            STAGES: gl.constexpr):
    """Key block j against this partition's query rows: S and dP together, then dQ += dS K_j."""
    slot = j % STAGES
    mbarrier.wait(ready.index(slot), (j // STAGES) & 1)
    k_tile = k_smem.index(slot)
    s_tok = warpgroup_mma(q_tile, k_tile.permute((1, 0)), s_zero, use_acc=False, is_async=True)
    dp_tok = warpgroup_mma(do_tile, v_smem.index(slot).permute((1, 0)), s_zero, use_acc=False, is_async=True)
    s = warpgroup_mma_wait(1, deps=[s_tok])  # S done; dP may still run
    p = gl.exp2(s * qk_scale - gl.expand_dims(lse, 1))  # lse is base 2
    if MASK:  # causal: key c is visible to query row r when c <= r (Sq = Sk)
        cols = j * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        p = gl.where(gl.expand_dims(cols, 0) <= gl.expand_dims(rows, 1), p, 0.0)
    ds = p * (warpgroup_mma_wait(0, deps=[dp_tok]) - gl.expand_dims(delta, 1))
    ds_op = gl.convert_layout(ds.to(q_tile.dtype), op_layout)
    dq_tok = warpgroup_mma(ds_op, k_tile, dq, is_async=True)
    dq, _ = warpgroup_mma_wait(0, deps=[dq_tok, ds_op])
    mbarrier.arrive(empty.index(slot), count=1)  # K_j and V_j are no longer read here
    return dq


@gluon.jit
def _q_consumer(q_smem, do_smem, k_smem, v_smem, q_bar, ready, empty, dq_desc, LSE2, DELTA,
                b, h, H, SQ, start_m, n_blocks, sqb, sqh, sqs, qk_scale, sm_scale,
                PART: gl.constexpr, PARTS: gl.constexpr, D: gl.constexpr, BLOCK_M: gl.constexpr,
                BLOCK_N: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr):
    """One warpgroup: query rows [PART·BM, (PART+1)·BM) of the program's block; their dQ."""
    BM: gl.constexpr = BLOCK_M // PARTS
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    a_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, D, 16])
    op_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=a_layout, k_width=2)
    q_tile = q_smem.index(PART)
    do_tile = do_smem.index(PART)
    row0 = start_m + PART * BM
    rows = row0 + gl.arange(0, BM, layout=gl.SliceLayout(1, s_layout))
    lse = gl.load(LSE2 + (b * H + h) * SQ + rows)
    delta = gl.load(DELTA + (b * H + h) * SQ + rows)
    s_zero = gl.zeros([BM, BLOCK_N], gl.float32, s_layout)
    dq = gl.zeros([BM, D], gl.float32, a_layout)
    n_full = row0 // BLOCK_N if CAUSAL else n_blocks  # key blocks every row here sees in full
    mbarrier.wait(q_bar, 0)
    for j in range(0, n_full):
        dq = _q_step(j, dq, q_tile, do_tile, k_smem, v_smem, ready, empty, lse, delta, rows, s_zero, qk_scale,
                     False, s_layout, op_layout, BLOCK_N, STAGES)
    for j in range(n_full, n_blocks):  # causal: the blocks on the diagonal
        dq = _q_step(j, dq, q_tile, do_tile, k_smem, v_smem, ready, empty, lse, delta, rows, s_zero, qk_scale,
                     True, s_layout, op_layout, BLOCK_N, STAGES)
    # every matmul reading Q is done: dQ leaves through its buffer (dq is laid out as q)
    q_tile.store((dq * sm_scale).to(q_smem.dtype))
    fence_async_shared()
    row, col = _origin(b, h, sqb, sqh, sqs)
    _tma_store(dq_desc, [row + row0, col], q_tile)
    tma.store_wait(0)


@gluon.jit
def _bwd_q_kernel(q_desc, do_desc, k_desc, v_desc, dq_desc, LSE2, DELTA, H, G, SQ, SK,
                  sqb, sqh, sqs, sdob, sdoh, sdos, skb, skh, sks, qk_scale, sm_scale,
                  D: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                  PARTS: gl.constexpr, CAUSAL: gl.constexpr, num_warps: gl.constexpr):
    """Program (query block, batch·head), query block fastest; causal ones longest first."""
    n_m = SQ // BLOCK_M
    pid = gl.program_id(0)
    off_hz = pid // n_m
    if CAUSAL:
        start_m = (n_m - 1 - pid % n_m) * BLOCK_M
        n_blocks = gl.cdiv(start_m + BLOCK_M, BLOCK_N)
    else:
        start_m = pid % n_m * BLOCK_M
        n_blocks = SK // BLOCK_N
    b = off_hz // H
    h = off_hz % H
    dtype: gl.constexpr = q_desc.dtype
    BM: gl.constexpr = BLOCK_M // PARTS
    q_smem = gl.allocate_shared_memory(dtype, [PARTS, BM, D], q_desc.layout)
    do_smem = gl.allocate_shared_memory(dtype, [PARTS, BM, D], do_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, D], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, D], v_desc.layout)
    q_bar, ready, empty = _barriers(STAGES, PARTS)
    gl.warp_specialize([
        (_q_consumer, (q_smem, do_smem, k_smem, v_smem, q_bar, ready, empty, dq_desc, LSE2, DELTA, b, h, H, SQ,
                       start_m, n_blocks, sqb, sqh, sqs, qk_scale, sm_scale, 0, 2, D, BLOCK_M, BLOCK_N, STAGES,
                       CAUSAL)),
        (_q_consumer, (q_smem, do_smem, k_smem, v_smem, q_bar, ready, empty, dq_desc, LSE2, DELTA, b, h, H, SQ,
                       start_m, n_blocks, sqb, sqh, sqs, qk_scale, sm_scale, 1, 2, D, BLOCK_M, BLOCK_N, STAGES,
                       CAUSAL)),
        (_q_producer, (q_desc, do_desc, k_desc, v_desc, q_smem, do_smem, k_smem, v_smem, q_bar, ready, empty,
                       b, h, G, start_m, n_blocks, sqb, sqh, sqs, sdob, sdoh, sdos, skb, skh, sks, BLOCK_N,
                       STAGES, PARTS)),
    ], [4, 1], [232, 24])  # as _bwd_kv_kernel's


# --------------------------------------------------------------------------- host


def applicable(q, k, v, do, causal: bool) -> bool:
    """Whether this kernel covers the call: flash_hopper's forward scope, and dO laid out so a
    descriptor can read it (contiguous, or a [B, S, H, D] view)."""
    if not _forward_scope(q, k, v, causal):
        return False
    if do.shape != q.shape or do.dtype != q.dtype or not (do.is_contiguous() or do.transpose(1, 2).is_contiguous()):
        return False
    return do.data_ptr() % 16 == 0 and do.untyped_storage().nbytes() < 2**31


# Skip Triton's binder on repeated calls: at S = 1k a backward's host time matched its GPU time (kernels/NOTES.md).
_launch_kv, _launch_q = FastLaunch(_bwd_kv_kernel), FastLaunch(_bwd_q_kernel)


def backward_kv(q, k, v, do, dk, dv, lse2, delta, causal: bool, sm_scale: float, cfg: dict | None = None):
    """dk and dv (written in place, laid out as k and v) from flash.py's base-2 LSE and Δ."""
    B, H, SQ, D = q.shape
    HKV, SK = k.shape[1], k.shape[2]
    cfg = cfg or CANDIDATES[D][0]
    bm, bn, parts = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["PARTS"]
    if SQ % TILE or SK % TILE or dk.stride() != dv.stride():
        raise ValueError(f"backward_kv: Sq = {SQ} and Sk = {SK} must be multiples of {TILE}, dk and dv laid out "
                         f"alike (strides {dk.stride()} and {dv.stride()})")
    _launch_kv(
        (SK // bn * B * HKV,), _descriptor(q, bm), _descriptor(do, bm), _descriptor(k, bn // parts),
        _descriptor(v, bn // parts), _descriptor(dk, bn // parts), _descriptor(dv, bn // parts), lse2, delta, H, HKV,
        SQ, SK,
        *q.stride()[:3], *do.stride()[:3], *k.stride()[:3], *dk.stride()[:3], sm_scale * LOG2E, sm_scale,
        D=D, BLOCK_M=bm, BLOCK_N=bn, STAGES=cfg["STAGES"], PARTS=parts, CAUSAL=bool(causal),
        REVERSE=cfg.get("REVERSE", False), num_warps=4)


def backward_q(q, k, v, do, dq, lse2, delta, causal: bool, sm_scale: float, cfg: dict | None = None):
    """dq (written in place, laid out as q) from flash.py's base-2 LSE and Δ."""
    B, H, SQ, D = q.shape
    HKV, SK = k.shape[1], k.shape[2]
    cfg = cfg or Q_CANDIDATES[D][0]
    bm, bn, parts = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["PARTS"]
    if SQ % TILE or SK % TILE or dq.stride() != q.stride():
        raise ValueError(f"backward_q: Sq = {SQ} and Sk = {SK} must be multiples of {TILE}, dq laid out as q "
                         f"(strides {dq.stride()} and {q.stride()})")
    _launch_q(
        (SQ // bm * B * H,), _descriptor(q, bm // parts), _descriptor(do, bm // parts), _descriptor(k, bn),
        _descriptor(v, bn), _descriptor(dq, bm // parts), lse2, delta, H, H // HKV, SQ, SK, *q.stride()[:3],
        *do.stride()[:3], *k.stride()[:3], sm_scale * LOG2E, sm_scale,
        D=D, BLOCK_M=bm, BLOCK_N=bn, STAGES=cfg["STAGES"], PARTS=parts, CAUSAL=bool(causal), num_warps=4)
