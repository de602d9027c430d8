# drill: flashattention/triton-forward
"""Attack: the kernel computes nothing. o is computed in the launcher with torch, using only
operations the probe's record of computing torch calls misses: scores by broadcast mul + sum (mul,
sum are not in _COMPUTE), masked_fill for causal, torch.nn.functional.softmax (a Python function: the
TorchFunctionMode is entered from torch/overrides.py's handle_torch_function and the inner
Tensor.softmax from torch/nn/functional.py, so sys._getframe(1) is never this file), and the weighted
sum by mul + sum. A decoy @triton.jit kernel of this file is launched over the expected grid
(cdiv(S, BLOCK_M), B*H) with BLOCK_M passed as a constant.

Slips past test_launch_grid (a launch of this file's kernel with the right grid; check_no_torch_compute
sees an empty record) and every value check (torch's answer in fp32). The GPU accuracy/speed checks
are skipped under the interpreter.
"""
import math

import torch
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _flash_forward_kernel(X, BLOCK_M: tl.constexpr):
    pid = tl.program_id(0)


def flash_attention(q, k, v, causal=False, sm_scale=None):
    B, H, S, D = q.shape
    sm_scale = 1.0 / math.sqrt(D) if sm_scale is None else sm_scale
    BLOCK_M = 16
    _flash_forward_kernel[(triton.cdiv(S, BLOCK_M), B * H)](q, BLOCK_M=BLOCK_M)
    s = (q[:, :, :, None, :] * k[:, :, None, :, :]).sum(-1) * sm_scale      # [B, H, S, S]
    if causal:
        s = s.masked_fill(torch.ones(S, S, dtype=torch.bool).triu(1), float("-inf"))
    p = F.softmax(s, dim=-1)
    o = torch.empty_like(q)
    o.copy_((p[..., None] * v[:, :, None, :, :]).sum(-2))
    return o
