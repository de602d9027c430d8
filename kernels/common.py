"""What every backend shares: argument checks, tensor-layout helpers, a CUDA-graph timer.

No kernel lives here, and nothing here imports a backend or the dispatcher (dispatch.py): each
backend module imports this file and fastlaunch.py, and nothing else of the package.
"""

from __future__ import annotations

import functools
import math
import numbers
from typing import Callable

import torch

from .fastlaunch import interpreting

LOG2E = 1.4426950408889634
HEAD_DIMS = (16, 32, 64, 128, 256)  # powers of two the Triton kernels compile for
# Any other head dim up to the largest (80, 96: Phi and others; 192: DeepSeek-V3's q and k) flash_attention
# runs zero-padded to the next power of two, which leaves every score and output unchanged.
MAX_PADDED_HEAD_DIM = 256


# --------------------------------------------------------------------------- argument checks


def _shape(t) -> str:
    return str(tuple(t.shape)) if isinstance(t, torch.Tensor) else type(t).__name__


def require_tensor(name: str, t, dims: int, layout: str) -> None:
    """ValueError unless t is a torch.Tensor with `dims` dimensions (layout: e.g. "[B, H, S, D]")."""
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor {layout}, got {type(t).__name__}")
    if t.dim() != dims:
        raise ValueError(f"{name} must be {dims}-d {layout}, got shape {_shape(t)}")


def check_attention_arguments(q, k, v, sm_scale: float | None, name: str = "flash_attention",
                              padded: bool = False) -> float:
    """A ValueError naming the argument for shapes, head dims, dtypes or a scale the kernels do
    not take; returns the scale to use (1/sqrt(D) when None). With `padded` (a caller that pads
    head dims) D may be any size from 1 to MAX_PADDED_HEAD_DIM, and v's head dim may differ from q's."""
    require_tensor("q", q, 4, "[B, H, Sq, D]")
    require_tensor("k", k, 4, "[B, Hkv, Sk, D]")
    require_tensor("v", v, 4, "[B, Hkv, Sk, Dv]" if padded else "[B, Hkv, Sk, D]")
    B, H, SQ, D = q.shape
    if (k.shape[:3] != v.shape[:3] or (not padded and v.shape[3] != D) or k.shape[0] != B or k.shape[3] != D
            or k.shape[1] == 0 or H % k.shape[1]):
        raise ValueError(f"{name}: shape mismatch: q {_shape(q)}, k {_shape(k)}, v {_shape(v)} "
                         f"(k [B, Hkv, Sk, D] and v [B, Hkv, Sk, {'Dv' if padded else 'D'}] with Hkv dividing H)")
    allowed = f"1 to {MAX_PADDED_HEAD_DIM}" if padded else ", ".join(map(str, HEAD_DIMS))
    for arg, d in (("q", D), ("v", v.shape[3])):
        if not (d in HEAD_DIMS or (padded and 1 <= d <= MAX_PADDED_HEAD_DIM)):
            raise ValueError(f"{name}: head dim {d} of {arg} not supported ({allowed})")
    if not (q.dtype == k.dtype == v.dtype) or q.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise ValueError(f"{name}: q, k, v must share one dtype, float16, bfloat16 or float32; got "
                         f"{q.dtype}, {k.dtype}, {v.dtype}")
    sm_scale = 1.0 / math.sqrt(D) if sm_scale is None else sm_scale
    if not sm_scale > 0:
        raise ValueError(f"{name}: sm_scale must be positive, got {sm_scale}")
    return float(sm_scale)


def check_window_size(window_size) -> tuple[int, int]:
    """window_size as (left, right) ints, each >= -1 (-1: no bound on that side), or a ValueError."""
    if type(window_size) is tuple and window_size == (-1, -1):  # the default, checked without the loop
        return window_size
    ok = isinstance(window_size, (tuple, list)) and len(window_size) == 2 and all(
        isinstance(w, numbers.Integral) and not isinstance(w, bool) and w >= -1 for w in window_size)
    if not ok:
        raise ValueError(f"window_size must be a pair (left, right) of ints, each >= -1 (-1: unbounded), "
                         f"got {window_size!r}")
    return int(window_size[0]), int(window_size[1])


def check_varlen_arguments(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           sm_scale: float | None) -> tuple[float, torch.Tensor, torch.Tensor]:
    """(scale, cu_seqlens_q, cu_seqlens_k as int32) of a flash_attention_varlen call, or a ValueError
    naming the argument at fault. The lengths are read on the host once (a synchronisation) and the
    pair remembered by address and version counter, as check_cache_reads does."""
    name = "flash_attention_varlen"
    require_tensor("q", q, 3, "[total_q, H, D]")
    require_tensor("k", k, 3, "[total_k, Hkv, D]")
    require_tensor("v", v, 3, "[total_k, Hkv, Dv]")
    if k.shape[:2] != v.shape[:2] or k.shape[2] != q.shape[2] or k.shape[1] == 0 or q.shape[1] % k.shape[1]:
        raise ValueError(f"{name}: shape mismatch: q {_shape(q)}, k {_shape(k)}, v {_shape(v)} (k [total_k, Hkv, D] "
                         f"and v [total_k, Hkv, Dv] with Hkv dividing H)")
    # dtypes, head dims, scale: the dense checks on [1, heads, rows, D] views
    views = [t.transpose(0, 1)[None] for t in (q, k, v)]
    scale = check_attention_arguments(*views, sm_scale, name, padded=True)
    for arg, t in (("q", q), ("k", k), ("v", v)):
        if t.stride(-1) != 1:
            raise ValueError(f"{name}: {arg}'s last dimension must be contiguous (stride 1), got strides {t.stride()}")
    cus = []
    for arg, cu, rows, most, most_name in (("cu_seqlens_q", cu_seqlens_q, q.shape[0], max_seqlen_q, "max_seqlen_q"),
                                           ("cu_seqlens_k", cu_seqlens_k, k.shape[0], max_seqlen_k, "max_seqlen_k")):
        if (not isinstance(cu, torch.Tensor) or cu.dim() != 1 or cu.shape[0] < 2
                or cu.dtype not in (torch.int32, torch.int64)):
            raise ValueError(f"{arg} must be an int32 (or int64) tensor [B + 1] with B >= 1, got "
                             f"{getattr(cu, 'dtype', type(cu).__name__)} {_shape(cu)}")
        if cu.device != q.device:
            raise ValueError(f"{arg} must be on q's device {q.device}, got {cu.device}")
        if isinstance(most, bool) or not isinstance(most, int) or most < 0:
            raise ValueError(f"{most_name} must be an int >= 0, got {most!r}")
        if rows >= 2**31:
            raise ValueError(f"{name}: {rows} packed rows do not fit the kernels' int32 sequence bounds")
        cus.append(cu)
    if cus[0].shape != cus[1].shape:
        raise ValueError(f"cu_seqlens_k must have cu_seqlens_q's shape {_shape(cus[0])} (one entry per sequence "
                         f"and one more), got {_shape(cus[1])}")
    _check_cu_values(cus, (q.shape[0], k.shape[0]), (max_seqlen_q, max_seqlen_k))
    return scale, *(cu.to(torch.int32).contiguous() for cu in cus)


def _check_cu_values(cus, totals, mosts) -> None:
    if cus[0].is_cuda and torch.cuda.is_current_stream_capturing():
        return  # nothing may synchronise while a graph is captured: check the inputs before
    key = ("cu",) + tuple((cu.device, cu.data_ptr(), cu._version, tuple(cu.shape), cu.dtype) for cu in cus)
    key += tuple(totals) + tuple(mosts)
    if key in _CHECKED:
        return
    for arg, cu, total, most, most_name in zip(("cu_seqlens_q", "cu_seqlens_k"), cus, totals, mosts,
                                               ("max_seqlen_q", "max_seqlen_k")):
        vals = cu.to(torch.int64).cpu()
        lens = vals[1:] - vals[:-1]
        if int(vals[0]) != 0:
            raise ValueError(f"{arg} must start at 0, got {int(vals[0])}")
        if bool((lens < 0).any()):
            b = int((lens < 0).nonzero()[0])
            raise ValueError(f"{arg} must be non-decreasing, got {arg}[{b + 1}] = {int(vals[b + 1])} < "
                             f"{arg}[{b}] = {int(vals[b])}")
        if int(vals[-1]) != total:
            raise ValueError(f"{arg}'s last entry must be the number of packed rows {total}, got {int(vals[-1])}")
        if int(lens.max()) > most:
            raise ValueError(f"{most_name} = {most} is less than the longest sequence in {arg}, {int(lens.max())}")
    if len(_CHECKED) > 1024:
        _CHECKED.clear()
    _CHECKED[key] = True


def check_decode_arguments(q, k_cache, v_cache, seq_lens, block_table) -> tuple[int, int, int, int]:
    """(B, Hq, Hkv, D) of a flash_decode call, or a ValueError naming the argument at fault."""
    require_tensor("q", q, 3, "[B, Hq, D]")
    paged = block_table is not None
    layout = "[num_pages, page_size, Hkv, D]" if paged else "[B, Hkv, S_max, D]"
    require_tensor("k_cache", k_cache, 4, layout)
    require_tensor("v_cache", v_cache, 4, layout)
    B, Hq, D = q.shape
    if v_cache.shape != k_cache.shape:
        raise ValueError(f"v_cache must have k_cache's shape {_shape(k_cache)}, got {_shape(v_cache)}")
    if D not in HEAD_DIMS or k_cache.shape[3] != D:
        raise ValueError(f"head dim D must be a power of two from 16 to 256 and the same in q and k_cache: "
                         f"q {_shape(q)}, k_cache {_shape(k_cache)}")
    if not (q.dtype == k_cache.dtype == v_cache.dtype) or q.dtype not in (torch.float16, torch.bfloat16,
                                                                          torch.float32):
        raise ValueError(f"q, k_cache, v_cache must share one dtype, float16, bfloat16 or float32; got "
                         f"{q.dtype}, {k_cache.dtype}, {v_cache.dtype}")
    hkv = k_cache.shape[2] if paged else k_cache.shape[1]
    if hkv == 0 or Hq % hkv:
        raise ValueError(f"q's head count Hq = {Hq} must be a multiple of the cache's Hkv = {hkv}")
    require_tensor("seq_lens", seq_lens, 1, "[B]")
    if seq_lens.shape != (B,) or seq_lens.dtype.is_floating_point or seq_lens.dtype == torch.bool:
        raise ValueError(f"seq_lens must be an integer tensor [B] = [{B}], got {seq_lens.dtype} {_shape(seq_lens)}")
    if not paged and k_cache.shape[0] != B:
        raise ValueError(f"a contiguous k_cache is [B, Hkv, S_max, D] with B = {B}, got {_shape(k_cache)}")
    if paged:
        require_tensor("block_table", block_table, 2, "[B, max_pages]")
        if block_table.shape[0] != B or block_table.dtype.is_floating_point or block_table.dtype == torch.bool:
            raise ValueError(f"block_table must be an integer tensor [B, max_pages] with B = {B}, got "
                             f"{block_table.dtype} {_shape(block_table)}")
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        if t.stride(-1) != 1:
            raise ValueError(f"{name}'s last dimension must be contiguous (stride 1), got strides {t.stride()}")
    return B, Hq, hkv, D


def check_cache_reads(seq_lens: torch.Tensor, block_table: torch.Tensor | None, k_cache: torch.Tensor) -> None:
    """ValueError where the decode kernel would read outside the cache: a seq_lens entry under 1 or
    past S_max (contiguous cache), a sequence needing more pages than its row of block_table holds,
    or a page it reads (the first ceil(seq_len / page_size) entries of its row) outside the pool.

    A few small reductions and one host read (a synchronisation), so a pair of tensors that passed
    is remembered by address and torch's version counter (which every in-place torch operation
    bumps) and not read again until it changes. Skipped while a CUDA graph is being captured,
    where nothing may synchronise: check the inputs before capturing."""
    if seq_lens.is_cuda and torch.cuda.is_current_stream_capturing():
        return
    key = (seq_lens.device, seq_lens.data_ptr(), seq_lens._version, tuple(seq_lens.shape), tuple(k_cache.shape))
    if block_table is not None:
        key += (block_table.device, block_table.data_ptr(), block_table._version, tuple(block_table.shape),
                tuple(block_table.stride()))
    if key in _CHECKED:
        return
    lens = seq_lens.to(torch.int64)
    if block_table is None:
        least, most = (int(x) for x in torch.stack([lens.min(), lens.max()]).tolist())
        if least < 1 or most > k_cache.shape[2]:
            raise ValueError(f"seq_lens must lie in [1, S_max = {k_cache.shape[2]}] (k_cache {_shape(k_cache)}), "
                             f"got values from {least} to {most}")
    else:
        num_pages, page_size, max_pages = k_cache.shape[0], k_cache.shape[1], block_table.shape[1]
        lens = lens.to(block_table.device)
        needed = (lens + page_size - 1) // page_size  # [B]
        used = torch.arange(max_pages, device=block_table.device)[None, :] < needed[:, None]  # [B, max_pages]
        bad_page = used & ((block_table < 0) | (block_table >= num_pages))
        least, most, bad = (int(x) for x in torch.stack([lens.min(), needed.max(), bad_page.sum()]).tolist())
        if least < 1:
            raise ValueError(f"seq_lens must be >= 1 (the new token's own key), got a minimum of {least}")
        if most > max_pages:
            raise ValueError(f"seq_lens needs up to {most} pages of {page_size} keys, but block_table "
                             f"{_shape(block_table)} holds {max_pages} per sequence")
        if bad:
            b, p = (int(x) for x in bad_page.nonzero()[0].tolist())
            raise ValueError(f"block_table[{b}, {p}] = {int(block_table[b, p])} is outside the page pool "
                             f"[0, {num_pages}) of k_cache {_shape(k_cache)}, but sequence {b} reads that page "
                             f"(seq_lens[{b}] = {int(lens[b])})")
    if len(_CHECKED) > 1024:
        _CHECKED.clear()
    _CHECKED[key] = True


_CHECKED: dict[tuple, bool] = {}


# --------------------------------------------------------------------------- layouts


def host_ok(t: torch.Tensor) -> bool:
    """Whether t's heads [B, H, S, D] are blocks of one [rows, row stride] matrix: each head starts
    on a row boundary plus a column offset, and its D columns end inside the row (what a host tensor
    descriptor over the whole tensor can read)."""
    B, H, S, D = t.shape
    sb, sh, ss, _ = t.stride()
    if ss < D:
        return False
    return (B == 1 or sb % ss == 0) and (H == 1 or sh % ss == 0 or (H - 1) * sh + D <= ss)


def last_dim_contiguous(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


def empty_in_layout(t: torch.Tensor) -> torch.Tensor:
    """An uninitialised tensor shaped like t, [B, S, H, D] in memory if t's heads are inner to
    its sequence (a transposed view), else contiguous [B, H, S, D]."""
    B, H, S, D = t.shape
    if H > 1 and S > 1 and t.stride(1) < t.stride(2):
        return torch.empty((B, S, H, D), dtype=t.dtype, device=t.device).transpose(1, 2)
    return torch.empty((B, H, S, D), dtype=t.dtype, device=t.device)


def pow2(n: int) -> int:
    """The smallest power of two >= n, in plain Python: triton.next_power_of_2 is a jit-aware
    function that costs ~10 µs of host time a call."""
    return 1 << max(0, int(n) - 1).bit_length()


def bucket(n: int) -> int:
    """The shape bucket a tuner keys on: the power of two at or above n, at least 16."""
    return pow2(max(int(n), 16))


@functools.lru_cache(maxsize=None)
def sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def is_hopper(t: torch.Tensor) -> bool:
    return bool(t.is_cuda and not interpreting() and torch.cuda.get_device_capability(t.device)[0] == 9)


# --------------------------------------------------------------------------- timing


def median_ms(fn: Callable, warmup: int = 25, rep: int = 100) -> float:
    """triton.testing.do_bench's median in ms (L2 flushed before each run)."""
    import triton

    return float(triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median"))


def graph_ms(fn: Callable, rep: int = 100) -> float:
    """Median ms of fn replayed from a CUDA graph captured once (do_bench: L2 flushed before each
    replay): the GPU's time alone, without Python or launch overhead between runs."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return median_ms(graph.replay, rep=rep)
