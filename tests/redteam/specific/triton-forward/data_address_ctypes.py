# drill: flashattention/triton-forward
"""Attack: the inputs' memory is read through ctypes at torch._C._data_address(t), imported by name
at module level, so no torch call is made; the NumPy answer comes back through torch.tensor (a
copy) and one copy kernel of this file writes o over the right grid.
Slipped past: _data_address is a module function no torch-function mode sees (unlike data_ptr).
Now caught: during the call the probe swaps torch's raw-memory functions (_data_address,
_storage_address, _tensor_impl_raw_handle, to_dlpack) in their modules and in the user's
module's globals, and counts a call from the user's file."""
import ctypes
import math

import numpy as np
import torch
from torch._C import _data_address
import triton
import triton.language as tl


@triton.jit
def _flash_forward_kernel(SRC, DST, S, D: tl.constexpr, BLOCK_M: tl.constexpr):
    bh = tl.program_id(1)
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, D)
    at = bh * S * D + rows[:, None] * D + cols[None, :]
    ok = rows[:, None] < S
    tl.store(DST + at, tl.load(SRC + at, mask=ok, other=0.0), mask=ok)


def _host(t):
    """t's values read through ctypes at the address torch._C._data_address gives (no torch call)."""
    t = t.contiguous()
    buf = (ctypes.c_char * (t.numel() * t.element_size())).from_address(_data_address(t))
    return np.frombuffer(buf, dtype=np.float32).reshape(t.shape).astype(np.float64)


def flash_attention(q, k, v, causal=False, sm_scale=None):
    B, H, S, D = q.shape
    scale = 1.0 / math.sqrt(D) if sm_scale is None else sm_scale
    Q, K, V = _host(q), _host(k), _host(v)
    s = np.einsum("bhid,bhjd->bhij", Q, K) * scale
    if causal:
        s = np.where(np.tril(np.ones((S, S), bool)), s, -np.inf)
    s -= s.max(-1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(-1, keepdims=True)
    out = np.ascontiguousarray(np.einsum("bhij,bhjd->bhid", p, V), dtype=np.float32)
    src = torch.empty((B, H, S, D), dtype=q.dtype, device=q.device)
    src.copy_(torch.tensor(out))  # a copy: shares no NumPy memory
    o = torch.empty((B, H, S, D), dtype=q.dtype, device=q.device)
    BLOCK_M = 16
    _flash_forward_kernel[(triton.cdiv(S, BLOCK_M), B * H)](src, o, S, D=D, BLOCK_M=BLOCK_M)
    return o
