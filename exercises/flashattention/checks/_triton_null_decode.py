# drill: flashattention/triton-decode
"""A decode kernel that computes nothing: the grader times it to learn what a call's round trip costs.

Loaded as the submission of a second, clean subject (never the user's), so the user's
code cannot make the calibration slower to make its own kernel look faster.
"""

import torch


def flash_decode(q, k_cache, v_cache, seq_lens, num_splits=None):
    return torch.empty_like(q)
