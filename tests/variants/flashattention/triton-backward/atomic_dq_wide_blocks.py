# drill: flashattention/triton-backward
# variant: one kernel over key blocks with atomic fp32 dQ, 64×64 blocks on every device (the interpreter too), causal query loop started at the key block's diagonal, dQ cast with .to at the end
"""FlashAttention backward, one pass over key blocks (FA2's Triton layout without a dQ kernel).

A learner who keeps the GPU block sizes under the interpreter: 64 query rows by 64 key rows.
`_delta` writes D = rowsum(dO ∘ O); `_dkdv_atomic_dq` owns one key block, keeps its dK and
dV in registers, walks the query blocks that can see it and adds each one's dQ share into a
zeroed fp32 buffer with tl.atomic_add.
"""

import math

import torch
import triton
import triton.language as tl


@triton.jit
def _delta(O, DO, DELTA, so_b, so_h, so_s, sdo_b, sdo_h, sdo_s, H, S,
           D: tl.constexpr, BLOCK_M: tl.constexpr):
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, D)
    live = rows < S
    o = tl.load(O + b * so_b + h * so_h + rows[:, None] * so_s + cols[None, :], mask=live[:, None], other=0.0)
    do = tl.load(DO + b * sdo_b + h * sdo_h + rows[:, None] * sdo_s + cols[None, :], mask=live[:, None], other=0.0)
    tl.store(DELTA + bh * S + rows, tl.sum(o.to(tl.float32) * do.to(tl.float32), axis=1), mask=live)


@triton.jit
def _dkdv_atomic_dq(Q, K, V, DO, LSE, DELTA, DQ, DK, DV,
                    sq_b, sq_h, sq_s, sk_b, sk_h, sk_s, sv_b, sv_h, sv_s, sdo_b, sdo_h, sdo_s,
                    sl_b, sl_h, H, S, sm_scale,
                    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    start_n = tl.program_id(0) * BLOCK_N
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    cols = tl.arange(0, D)
    keys = start_n + tl.arange(0, BLOCK_N)
    key_live = keys < S
    k = tl.load(K + b * sk_b + h * sk_h + keys[:, None] * sk_s + cols[None, :], mask=key_live[:, None], other=0.0)
    v = tl.load(V + b * sv_b + h * sv_h + keys[:, None] * sv_s + cols[None, :], mask=key_live[:, None], other=0.0)
    dk = tl.zeros([BLOCK_N, D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, D], dtype=tl.float32)

    # Causal: query blocks wholly above this key block see none of it.
    lo = (start_n // BLOCK_M) * BLOCK_M if CAUSAL else 0
    for start_m in range(lo, S, BLOCK_M):
        rows = start_m + tl.arange(0, BLOCK_M)
        row_live = rows < S
        q = tl.load(Q + b * sq_b + h * sq_h + rows[:, None] * sq_s + cols[None, :], mask=row_live[:, None], other=0.0)
        do = tl.load(DO + b * sdo_b + h * sdo_h + rows[:, None] * sdo_s + cols[None, :],
                     mask=row_live[:, None], other=0.0)
        lse = tl.load(LSE + b * sl_b + h * sl_h + rows, mask=row_live, other=float("inf"))
        lse = tl.where(lse == float("-inf"), float("inf"), lse)  # a row that saw no key: p = 0
        delta = tl.load(DELTA + bh * S + rows, mask=row_live, other=0.0)

        s = tl.dot(q, tl.trans(k)) * sm_scale
        visible = row_live[:, None] & key_live[None, :]
        if CAUSAL:
            visible = visible & (rows[:, None] >= keys[None, :])
        p = tl.where(visible, tl.exp(s - lse[:, None]), 0.0)

        dv += tl.dot(tl.trans(p).to(do.dtype), do)
        dp = tl.dot(do, tl.trans(v))
        ds = p * (dp - delta[:, None])
        dk += tl.dot(tl.trans(ds).to(q.dtype), q)
        dq_share = tl.dot(ds.to(k.dtype), k) * sm_scale
        tl.atomic_add(DQ + bh * S * D + rows[:, None] * D + cols[None, :], dq_share, mask=row_live[:, None])

    out = bh * S * D + keys[:, None] * D + cols[None, :]
    tl.store(DK + out, (dk * sm_scale).to(DK.dtype.element_ty), mask=key_live[:, None])
    tl.store(DV + out, dv.to(DV.dtype.element_ty), mask=key_live[:, None])


def flash_attention_backward(q, k, v, o, lse, do, causal=False, sm_scale=None):
    B, H, S, D = q.shape
    assert lse.shape == (B, H, S) and D in (16, 32, 64, 128)
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(D)
    q, k, v, o, do = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v, o, do))
    lse = lse.float()
    lse = lse if lse.stride(-1) == 1 else lse.contiguous()
    BLOCK_M = BLOCK_N = 64  # the same tiles the GPU uses

    delta = torch.empty((B, H, S), dtype=torch.float32, device=q.device)
    dq_acc = torch.zeros((B, H, S, D), dtype=torch.float32, device=q.device)  # atomics add into it
    dk = torch.empty((B, H, S, D), dtype=q.dtype, device=q.device)
    dv = torch.empty((B, H, S, D), dtype=q.dtype, device=q.device)

    _delta[(triton.cdiv(S, BLOCK_M), B * H)](
        o, do, delta, o.stride(0), o.stride(1), o.stride(2), do.stride(0), do.stride(1), do.stride(2),
        H, S, D=D, BLOCK_M=BLOCK_M)
    _dkdv_atomic_dq[(triton.cdiv(S, BLOCK_N), B * H)](
        q, k, v, do, lse, delta, dq_acc, dk, dv,
        q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2), do.stride(0), do.stride(1), do.stride(2),
        lse.stride(0), lse.stride(1), H, S, float(sm_scale),
        D=D, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, CAUSAL=bool(causal), num_warps=4 if D <= 64 else 8)
    return dq_acc.to(q.dtype), dk, dv
