# drill: flashattention/triton-decode
# planted: right values from a plain torch loop: no Triton kernel is launched
# expect-fail: Your @triton.jit kernels do the work
"""Decode attention from torch operations: the numbers are right, the exercise is skipped."""

import math

import torch


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
