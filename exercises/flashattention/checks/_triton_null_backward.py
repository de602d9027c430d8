# drill: flashattention/triton-backward
"""A backward that computes nothing: the grader times it to learn what a call's round trip costs
(the transfer, and the forward the probe runs to make o and lse).

Loaded as the submission of a second, clean subject (never the user's), so the user's
code cannot make the calibration slower to make its own kernels look faster.
"""

import torch


def flash_attention_backward(q, k, v, o, lse, do, causal=False, sm_scale=None):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
