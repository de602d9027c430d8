# drill: flashattention/{{ID}}
# Attack: no kernel at all; hand back PyTorch's own attention. The values are right, so only
# the launch check can catch it (a file that also launches a decoy kernel of its own with
# the right grid is not caught: the launch record is an observation from inside).
import torch
import torch.nn.functional as F


def flash_attention(q, k, v, causal=False, sm_scale=None):
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=sm_scale)
