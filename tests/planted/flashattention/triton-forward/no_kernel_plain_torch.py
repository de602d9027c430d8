# drill: flashattention/triton-forward
# planted: right values, but computed with torch operations: no Triton kernel is launched
# expect-fail: Your @triton.jit kernel
"""Attention from three torch operations: the numbers are right, the exercise is skipped."""

import math

import torch


def flash_attention(q, k, v, causal=False, sm_scale=None):
    S, D = q.shape[2], q.shape[3]
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(D)
    s = (q.float() @ k.float().transpose(-1, -2)) * sm_scale
    if causal:
        s = s.masked_fill(torch.ones(S, S, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return (torch.softmax(s, dim=-1) @ v.float()).to(q.dtype)
