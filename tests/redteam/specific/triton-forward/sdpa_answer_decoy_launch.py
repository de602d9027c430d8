# drill: flashattention/{{ID}}
# Attack: PyTorch's attention gives the values, and a kernel of this file that only copies them
# into o is launched over the right grid, so the launch record shows the user's kernel doing
# the work. Caught by the record of torch operations the file calls (scaled_dot_product_attention).
import torch
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _flash_forward_kernel(SRC, DST, n, BLOCK_M: tl.constexpr):
    offs = (tl.program_id(1) * tl.num_programs(0) + tl.program_id(0)) * BLOCK_M + tl.arange(0, BLOCK_M)
    tl.store(DST + offs, tl.load(SRC + offs, mask=offs < n), mask=offs < n)


def flash_attention(q, k, v, causal=False, sm_scale=None):
    B, H, S, D = q.shape
    answer = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=sm_scale).contiguous()
    o = torch.empty_like(answer)
    BLOCK_M = 16
    rows = B * H * S * D
    per_program = triton.cdiv(rows, triton.cdiv(S, BLOCK_M) * B * H)
    # one program per (query block, b·h), each copying a share of the answer
    grid = (triton.cdiv(S, BLOCK_M), B * H)
    copy_block = triton.next_power_of_2(per_program)
    _flash_forward_kernel[grid](answer, o, rows, BLOCK_M=copy_block)
    return o
