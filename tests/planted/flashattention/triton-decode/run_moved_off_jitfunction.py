# drill: flashattention/triton-decode
# planted: torch operations, no kernel; at import `run` is taken off Triton's kernel classes so no launch can be watched
# expect-fail: Your @triton.jit kernels do the work
"""Planted mistake: no Triton kernel, and the launch hook's target removed at import to hide that (as 07's)."""

import math

import torch
from triton.runtime.interpreter import InterpretedFunction
from triton.runtime.jit import JITFunction

for _cls in (JITFunction, InterpretedFunction):
    if "run" in _cls.__dict__:
        delattr(_cls, "run")


def flash_decode(q, k_cache, v_cache, seq_lens, num_splits=None):
    B, Hq, D = q.shape
    Hkv = k_cache.shape[1]
    o = torch.empty_like(q)
    for b in range(B):
        n = int(seq_lens[b])
        for h in range(Hq):
            kv = h // (Hq // Hkv)
            s = (k_cache[b, kv, :n].float() @ q[b, h].float()) / math.sqrt(D)
            o[b, h] = (torch.softmax(s, 0) @ v_cache[b, kv, :n].float()).to(q.dtype)
    return o
