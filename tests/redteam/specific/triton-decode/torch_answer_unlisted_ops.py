# drill: flashattention/triton-decode
"""Attack: no kernel does any work. o is computed with torch in the launcher, as
tests/redteam/specific/triton-decode/torch_answer_decoy_kernel.py does, but only with torch
operations the probe's record of "computing" calls does not see: the scores are an elementwise
product and a sum (mul, sum: not in _COMPUTE), the softmax is torch.nn.functional.softmax (a Python
function: the probe's TorchFunctionMode is entered from torch/overrides.py's handle_torch_function,
and the inner Tensor.softmax from torch/nn/functional.py, so sys._getframe(1) is never this file),
the weighted sum is again mul + sum. A decoy @triton.jit kernel of this file is launched over the
(num_splits, B*Hq) grid.

Slips past test_kernels_launched_over_the_splits (a launch from this file with the right grid;
check_no_torch_compute's record is empty) and, under the interpreter, every other check (values are
torch's, exact in fp32; the speed check is skipped).
"""
import math

import torch
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _decode_split_kernel(X, n):
    pid = tl.program_id(0)


def flash_decode(q, k_cache, v_cache, seq_lens, num_splits=None):
    B, Hq, D = q.shape
    Hkv, S_max = k_cache.shape[1], k_cache.shape[2]
    if num_splits is None:
        num_splits = max(1, min(triton.cdiv(8, B * Hq), triton.cdiv(S_max, 16), 64))
    _decode_split_kernel[(num_splits, B * Hq)](q, 0)
    group = Hq // Hkv
    o = torch.zeros_like(q)
    for b in range(B):
        n = int(seq_lens[b])
        for h in range(Hq):
            k = k_cache[b, h // group, :n]
            v = v_cache[b, h // group, :n]
            s = (k * q[b, h][None, :]).sum(-1) * (1.0 / math.sqrt(D))
            p = F.softmax(s, dim=0)
            o[b, h] = (p[:, None] * v).sum(0)
    return o
