# drill: flashattention/triton-backward
# planted: a Triton kernel is launched (it computes D), but dq, dk and dv come from torch matmuls
# expect-fail: Your @triton.jit kernels
"""Planted mistake: one real kernel for D, the rest of the backward in torch operations."""

import math

import torch
import triton
import triton.language as tl


@triton.jit
def _delta_kernel(O, DO, Delta, S, D: tl.constexpr, BLOCK_M: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, D)
    ok = rows < S
    ptrs = pid_bh * S * D + rows[:, None] * D + cols[None, :]
    o = tl.load(O + ptrs, mask=ok[:, None], other=0.0).to(tl.float32)
    do = tl.load(DO + ptrs, mask=ok[:, None], other=0.0).to(tl.float32)
    tl.store(Delta + pid_bh * S + rows, tl.sum(o * do, 1), mask=ok)


def flash_attention_backward(q, k, v, o, lse, do, causal=False, sm_scale=None):
    B, H, S, D = q.shape
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(D)
    o, do = o.contiguous(), do.contiguous()
    delta = torch.empty((B, H, S), dtype=torch.float32, device=q.device)
    _delta_kernel[(triton.cdiv(S, 16), B * H)](o, do, delta, S, D=D, BLOCK_M=16)
    qf, kf, vf, dof = (t.float() for t in (q, k, v, do))
    s = torch.matmul(qf, kf.transpose(-1, -2)) * sm_scale
    if causal:
        s = s.masked_fill(torch.ones(S, S, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    lse = torch.where(torch.isneginf(lse), torch.full_like(lse, float("inf")), lse.float())
    p = torch.exp(s - lse[..., None])
    dv = torch.matmul(p.transpose(-1, -2), dof)
    ds = p * (torch.matmul(dof, vf.transpose(-1, -2)) - delta[..., None])
    dq = torch.matmul(ds, kf) * sm_scale
    dk = torch.matmul(ds.transpose(-1, -2), qf) * sm_scale
    return dq.to(q.dtype), dk.to(q.dtype), dv.to(q.dtype)
