# drill: flashattention/{{ID}}
# Attack: compute the right answer, write it into q and return q itself, saving an
# allocation (the caller's q is gone).
import math

import torch


def flash_attention(q, k, v, causal=False, sm_scale=None):
    scale = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
    s = (q.double() @ k.double().transpose(-1, -2)) * scale
    if causal:
        S = q.shape[2]
        s = s.masked_fill(~torch.ones(S, S, dtype=torch.bool).tril(), float("-inf"))
    q.copy_((torch.softmax(s, -1) @ v.double()).to(q.dtype))
    return q
