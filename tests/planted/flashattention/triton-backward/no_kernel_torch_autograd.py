# drill: flashattention/triton-backward
# planted: right values from torch autograd through plain attention: no Triton kernel is launched
# expect-fail: Your @triton.jit kernels
"""Planted mistake: the gradients come from torch.autograd, the exercise is skipped."""

import math

import torch


def flash_attention_backward(q, k, v, o, lse, do, causal=False, sm_scale=None):
    S, D = q.shape[2], q.shape[3]
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(D)
    with torch.enable_grad():
        qq, kk, vv = (t.detach().float().requires_grad_() for t in (q, k, v))
        s = (qq @ kk.transpose(-1, -2)) * sm_scale
        if causal:
            s = s.masked_fill(torch.ones(S, S, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
        out = torch.softmax(s, dim=-1) @ vv
        dead = torch.isneginf(lse)[..., None]  # rows that saw no key add nothing
        grads = torch.autograd.grad(out, (qq, kk, vv), do.float().masked_fill(dead, 0.0))
    return tuple(g.to(q.dtype) for g in grads)
