# drill: flashattention/triton-backward
"""Attack: serial_wider_grid_idle_programs.py escalated. The serial kernel (one program per
(batch, head) walks every key block and every query block of its head) runs over a (B*H, 2)
grid; each program with program_id(1) == 1 calls one decoy tl.dot on a 16 x 16 block of zeros
and returns. Right values, small blocks, no stored scores. It passed test_launches: the launch
had 2*B*H programs and every one of them called tl.dot, so counting "programs that reached
tl.dot" instead of the grid would not have caught it either. Caught by test_launches now: the
probe adds up each program's dot work (M*N*K of its tl.dot calls); one program does its whole
head's share (the decoys add 16^3 each), where a tiled backward's largest program does well
under that.
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
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // H
    h = pid_bh % H
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # [BLOCK_M]
    offs_d = tl.arange(0, D)
    row_ok = offs_m < S
    o = tl.load(O + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_os + offs_d[None, :],
                mask=row_ok[:, None], other=0.0).to(tl.float32)  # [BLOCK_M, D]
    do = tl.load(DO + b * stride_dob + h * stride_doh + offs_m[:, None] * stride_dos + offs_d[None, :],
                 mask=row_ok[:, None], other=0.0).to(tl.float32)
    # Delta is a fresh contiguous [B*H, S] fp32 buffer made by the launcher.
    tl.store(Delta + pid_bh * S + offs_m, tl.sum(o * do, 1), mask=row_ok)


@triton.jit
def _serial_head(Q, K, V, DO, LSE, Delta, DQ, DK, DV,
                 stride_qb, stride_qh, stride_qs, stride_kb, stride_kh, stride_ks,
                 stride_vb, stride_vh, stride_vs, stride_dob, stride_doh, stride_dos,
                 stride_lb, stride_lh, H, S, sm_scale,
                 D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    # ONE program per (batch, head) walks every key block and, inside, every query block: small
    # blocks, but no parallelism along the sequence; dq is read, added to and written back.
    if tl.program_id(1) != 0:
        # The second column of the grid: one decoy tl.dot on a tiny block, so that "programs
        # that called tl.dot" counts these too, then nothing.
        tiny = tl.zeros([16, 16], dtype=tl.float32)
        tl.dot(tiny, tiny)
        return
    bh = tl.program_id(0)
    b = bh // H
    h = bh % H
    cols = tl.arange(0, D)
    for start_n in range(0, S, BLOCK_N):
        keys = start_n + tl.arange(0, BLOCK_N)
        kok = keys < S
        k = tl.load(K + b * stride_kb + h * stride_kh + keys[:, None] * stride_ks + cols[None, :], mask=kok[:, None], other=0.0)
        v = tl.load(V + b * stride_vb + h * stride_vh + keys[:, None] * stride_vs + cols[None, :], mask=kok[:, None], other=0.0)
        dk = tl.zeros([BLOCK_N, D], dtype=tl.float32)
        dv = tl.zeros([BLOCK_N, D], dtype=tl.float32)
        for start_m in range(0, S, BLOCK_M):
            rows = start_m + tl.arange(0, BLOCK_M)
            ok = rows < S
            q = tl.load(Q + b * stride_qb + h * stride_qh + rows[:, None] * stride_qs + cols[None, :], mask=ok[:, None], other=0.0)
            do = tl.load(DO + b * stride_dob + h * stride_doh + rows[:, None] * stride_dos + cols[None, :], mask=ok[:, None], other=0.0)
            lse = tl.load(LSE + b * stride_lb + h * stride_lh + rows, mask=ok, other=float("inf"))
            lse = tl.where(lse == float("-inf"), float("inf"), lse)
            delta = tl.load(Delta + bh * S + rows, mask=ok, other=0.0)
            keep = kok[None, :] & ok[:, None]
            if CAUSAL:
                keep = keep & (keys[None, :] <= rows[:, None])
            p = tl.where(keep, tl.exp(tl.dot(q, tl.trans(k)) * sm_scale - lse[:, None]), 0.0)
            dv += tl.dot(tl.trans(p), do)
            ds = p * (tl.dot(do, tl.trans(v)) - delta[:, None])
            dk += tl.dot(tl.trans(ds), q)
            at = bh * S * D + rows[:, None] * D + cols[None, :]
            acc = tl.load(DQ + at, mask=ok[:, None], other=0.0)
            tl.store(DQ + at, acc + tl.dot(ds, k) * sm_scale, mask=ok[:, None])
        out = bh * S * D + keys[:, None] * D + cols[None, :]
        tl.store(DK + out, dk * sm_scale, mask=kok[:, None])
        tl.store(DV + out, dv, mask=kok[:, None])


def flash_attention_backward(q, k, v, o, lse, do, causal=False, sm_scale=None):
    B, H, S, D = q.shape
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(D)
    q, k, v, o, do = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v, o, do))
    lse = lse.float()
    lse = lse if lse.stride(-1) == 1 else lse.contiguous()
    dq = torch.zeros((B, H, S, D), dtype=q.dtype, device=q.device)  # the accumulator (fp32 here)
    dk = torch.empty((B, H, S, D), dtype=q.dtype, device=q.device)
    dv = torch.empty((B, H, S, D), dtype=q.dtype, device=q.device)
    delta = torch.empty((B, H, S), dtype=torch.float32, device=q.device)
    _bwd_preprocess[(triton.cdiv(S, 16), B * H)](  # the decoy: a real, tiled launch
        o, do, delta, o.stride(0), o.stride(1), o.stride(2), do.stride(0), do.stride(1), do.stride(2),
        H, S, D=D, BLOCK_M=16)
    _serial_head[(B * H, 2)](  # twice the programs, half of them decoys
        
        q, k, v, do, lse, delta, dq, dk, dv,
        q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2), do.stride(0), do.stride(1), do.stride(2),
        lse.stride(0), lse.stride(1), H, S, float(sm_scale), D=D, BLOCK_M=16, BLOCK_N=16, CAUSAL=bool(causal))
    return dq, dk, dv
