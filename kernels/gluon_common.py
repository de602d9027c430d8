"""What the two Gluon kernels for Hopper (gluon_fwd.py, gluon_bwd.py) share: their scope, TMA
descriptors over a whole tensor, and the row and column where a head starts in one.

Both kernels read a [B, H, S, D] tensor, or a [B, S, H, D] view of one, as a single
[rows, sequence stride] matrix through one host tensor descriptor (triton_fa2.py's MODE 2): head
(b, h) starts at element b·stride_b + h·stride_h, i.e. at row offset // stride_s and column
offset % stride_s. Their scope is the same too: bf16 or fp16, D = 64 or 128, Sq and Sk multiples
of TILE, causal only with Sq = Sk, every head a block of that matrix, 16-byte aligned, storage
under 2 GiB (int32 offsets).
"""

from __future__ import annotations

import functools

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import tma
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from .common import host_ok, is_hopper

# TMA copies and the CTA barrier under their Triton 3.6 names, or the names later Tritons gave them
# (3.9 removed the old)
_tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
_tma_store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global
_cta_barrier = getattr(gl, "barrier", None) or gl.thread_barrier

TILE = 128  # Sq and Sk are multiples of it: every BLOCK_N divides it, every BLOCK_M but 192 (gluon_fwd._first_row)
HEAD_DIMS = (64, 128)


@gluon.jit
def _origin(b, h, sb, sh, ss):
    """Head (b, h) in a tensor seen as one [rows, ss] matrix (ss: the sequence stride): its first
    row and its column. [B, H, S, D] gives rows (b·H + h)·S, column 0; [B, S, H, D] rows b·S,
    column h·D."""
    off = b * sb + h * sh
    return off // ss, off % ss


# --------------------------------------------------------------------------- scope


def layout_key(*tensors: torch.Tensor) -> tuple:
    """All that `applicable` reads of the tensors: shape, strides, dtype, device, 16-byte
    alignment and whether the storage is under 2 GiB (int32 offsets)."""
    return tuple((t.shape, t.stride(), t.dtype, t.device, t.data_ptr() & 15, t.untyped_storage().nbytes() < 2**31)
                 for t in tensors)


_APPLICABLE: dict[tuple, bool] = {}


def applicable(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> bool:
    """Whether the Gluon kernels cover the call (module docstring: scope) on this device;
    remembered per layout_key, since the checks cost ~10 µs of host time a call."""
    key = (layout_key(q, k, v), causal)
    ok = _APPLICABLE.get(key)
    if ok is None:
        if len(_APPLICABLE) > 4096:
            _APPLICABLE.clear()
        ok = _APPLICABLE[key] = is_hopper(q) and shapes_supported(q, k, v, causal)
    return ok


def shapes_supported(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> bool:
    """The device-independent half of `applicable`: dtypes, sizes and memory layouts."""
    if q.dtype not in (torch.float16, torch.bfloat16) or not (q.dtype == k.dtype == v.dtype):
        return False
    B, H, SQ, D = q.shape
    SK = k.shape[2]
    if D not in HEAD_DIMS or SQ % TILE or SK % TILE or (causal and SQ != SK) or k.stride() != v.stride():
        return False
    # o is written in q's layout, so q must be one an output can have: [B, H, S, D] or a
    # [B, S, H, D] view (a slice of packed qkv is neither; triton_fa2.py reads those in place)
    if not (q.is_contiguous() or q.transpose(1, 2).is_contiguous()):
        return False
    for t in (q, k, v):  # TMA: 16-byte aligned base and strides; int32 offsets in the kernel
        if t.stride(-1) != 1 or t.data_ptr() % 16 or any(s * t.element_size() % 16 for s in t.stride()[:-1]):
            return False
        if not host_ok(t) or t.untyped_storage().nbytes() >= 2**31:
            return False
    return True


# --------------------------------------------------------------------------- descriptors


_GL_DTYPES = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16, torch.float8_e4m3fn: gl.float8e4nv}


@functools.lru_cache(maxsize=None)
def _smem_layout(rows: int, cols: int, dtype: torch.dtype):
    # cached: building it takes longer than the rest of a descriptor (host time per call matters
    # at S = 1k, where a forward is ~0.2 ms of GPU work)
    return gl.NVMMASharedLayout.get_default_for([rows, cols], _GL_DTYPES[dtype])


def _descriptor(t: torch.Tensor, rows: int, cols: int | None = None) -> TensorDescriptor:
    """t [B, H, S, X]'s memory as one [rows, S stride] matrix (see _origin), read or written `rows`
    rows and `cols` (default X) columns at a time."""
    B, H, S, X = t.shape
    sb, sh, ss, _ = t.stride()
    n = ((B - 1) * sb + (H - 1) * sh) // ss + S
    cols = cols or X
    return TensorDescriptor(t, [n, ss], [ss, 1], [rows, cols], _smem_layout(rows, cols, t.dtype))
