# drill: flashattention/triton-decode
"""Attack: no split kernel and no merge kernel do any work. o is computed with plain torch ops
(a softmax over each sequence's first seq_lens[b] keys, GQA by repeat_interleave), and a decoy
@triton.jit kernel from this file, whose body does nothing, is launched over the grid
(num_splits, B * Hq) that test_kernels_launched_over_the_splits looks for.

Fakes: both Triton kernels (the whole exercise). Slipped past, before the checks were changed,:
  * every value check: torch's softmax is the right value;
  * test_kernels_launched_over_the_splits: the launch record only asks that SOME kernel from
    the user's file ran with a grid holding num_splits whose product is num_splits * B * Hq; it
    cannot tell that the kernel wrote nothing the output depends on (the same known limit as
    07's sdpa_answer.py, but 10 has no attack file pinning it);
  * under the interpreter (no GPU) the speed check is skipped, so nothing else looks.
"""
import math

import torch
import triton
import triton.language as tl


@triton.jit
def _decode_split_kernel(X, n):
    pid = tl.program_id(0)  # does nothing the output depends on


def flash_decode(q, k_cache, v_cache, seq_lens, num_splits=None):
    B, Hq, D = q.shape
    Hkv, S_max = k_cache.shape[1], k_cache.shape[2]
    if num_splits is None:
        num_splits = max(1, min(triton.cdiv(8, B * Hq), triton.cdiv(S_max, 16), 64))
    _decode_split_kernel[(num_splits, B * Hq)](q, 0)          # the decoy launch, right grid
    group = Hq // Hkv
    out = []
    for b in range(B):
        n = int(seq_lens[b])
        k = k_cache[b, :, :n].float().repeat_interleave(group, 0)   # [Hq, n, D]
        v = v_cache[b, :, :n].float().repeat_interleave(group, 0)
        s = (k @ q[b].float()[:, :, None])[..., 0] / math.sqrt(D)   # [Hq, n]
        out.append(torch.softmax(s, -1)[:, None, :] @ v)             # [Hq, 1, D]
    return torch.stack([x[:, 0] for x in out]).to(q.dtype)        # [B, Hq, D]
