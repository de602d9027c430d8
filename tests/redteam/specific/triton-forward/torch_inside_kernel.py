# drill: flashattention/triton-forward
"""Attack: under Triton's interpreter a kernel body runs as plain Python, so this one reaches
q, k, v and o through a module global and computes o with torch (@, softmax, copy_) from inside
the launched kernel. Slipped past, before the probe was changed, every check: the probe took a
torch call with Triton's interpreter frames above it for Triton's own. A frame of the user's file
met before any of Triton's now makes the call the user's, and the launcher record fails it."""

import math

import torch
import triton
import triton.language as tl

_JOB = {}


@triton.jit
def _flash_forward_kernel(Q, O, S, D: tl.constexpr, BLOCK_M: tl.constexpr):
    if tl.program_id(0) == 0 and tl.program_id(1) == 0:
        job = _JOB
        q, k, v, o, causal, scale = job["args"]
        s = (q @ k.transpose(-1, -2)) * scale
        if causal:
            n = q.shape[2]
            s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
        o.copy_(torch.softmax(s, dim=-1) @ v)


def flash_attention(q, k, v, causal=False, sm_scale=None):
    B, H, S, D = q.shape
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(D)
    o = torch.empty((B, H, S, D), dtype=q.dtype, device=q.device)
    _JOB["args"] = (q, k, v, o, causal, sm_scale)
    _flash_forward_kernel[(triton.cdiv(S, 32), B * H)](q, o, S, D=D, BLOCK_M=32)
    return o
