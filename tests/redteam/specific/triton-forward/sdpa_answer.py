# drill: flashattention/{{ID}}
# Attack: no kernel at all; hand back PyTorch's own attention. The values are right, so only
# the launch check can catch it (with a decoy launch too: sdpa_answer_decoy_launch.py).
import torch
import torch.nn.functional as F


def flash_attention(q, k, v, causal=False, sm_scale=None):
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=sm_scale)
