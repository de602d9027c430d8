"""Reference split-KV decode attention (FlashDecoding) in Triton: contiguous or paged cache, GQA.

One new token per sequence meets a long KV cache. There is one query row per head, so
tiling the queries gives no parallel work; split the keys instead:

    split kernel, one program per (split, sequence, KV head):
        the program loads the `group` query heads that share its KV head as one tile
        q [GROUP_PAD, D] (GQA: each K/V byte is read once, not once per query head),
        streams its chunk of keys in blocks of BLOCK_N with the online softmax (exp2),
        and writes each head's partial output (fp32) and base-2 logsumexp.
    merge, one program per (sequence, query head):
        o = Σ_s 2^(lse_s - lse) · o_s   with lse = log2 Σ_s 2^(lse_s)   (exercise 04's merge)
    The merge runs either as its own kernel or, fused, in the split kernel: each program bumps
    an arrival counter for its (sequence, KV head), and the last to arrive merges the group.
    Fusing saves a launch, which is most of the cost at batch 1 and short contexts; the
    tuner times both and keeps whichever is faster (and right).

Shapes:
    q                 [B, Hq, D]
    k_cache, v_cache  [B, Hkv, S_max, D]                        (block_table=None)
                      [num_pages, page_size, Hkv, D] page pools  (with block_table [B, max_pages])
    seq_lens          int [B], 1 <= seq_lens[b]; cache rows past it are never read (may be NaN)
    o                 [B, Hq, D], the dtype of q
    lse               [B, Hq] float32, natural log (only with return_lse): the merge has it anyway,
                      and a caller combining this attention with another (a prefix cache, say) needs it
Query head h reads KV head h // (Hq // Hkv).

Each sequence's keys are cut into num_splits chunks of ceil(seq_len / num_splits) keys,
rounded up to whole blocks; num_splits=None picks a count from the batch, the heads and
the number of SMs so that the split kernel fills the GPU (decode is bound by HBM
bandwidth: every K/V byte is read once and used for two multiply-adds per query head).
Everything runs under TRITON_INTERPRET=1 (plain pointer arithmetic, no block pointers).
On a GPU, repeated calls skip Triton's Python launcher (kernels/fastlaunch.py): at batch 1
its ~30 µs a launch was more than the kernels' own time.
"""

from __future__ import annotations

import math
import time

import torch
import triton
import triton.language as tl

from .common import LOG2E, graph_ms, pow2

LN2 = tl.constexpr(0.6931471805599453)  # base-2 lse times ln 2: the natural log callers expect
from .fastlaunch import FastLaunch
from .fastlaunch import interpreting as _interpreting


# --------------------------------------------------------------------------- kernels


@triton.jit
def _split_kernel(Q, K, V, SEQ_LENS, TABLE, PART_O, PART_L, O, LSE, LOCKS,
                  sqb, sqh, skb, skh, sks, svb, svh, svs, stb, sob, soh,
                  qk_scale, num_splits, HKV,
                  GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, D: tl.constexpr, BLOCK_N: tl.constexpr,
                  PAGED: tl.constexpr, PAGE: tl.constexpr, IEEE: tl.constexpr,
                  FUSED: tl.constexpr, SPLITS_PAD: tl.constexpr, STORE_LSE: tl.constexpr):
    split = tl.program_id(0)
    pid = tl.program_id(1)  # b * HKV + kv head
    b = pid // HKV
    kvh = pid % HKV
    seq_len = tl.load(SEQ_LENS + b)
    # This split's keys: chunks of whole blocks, so only the sequence's last block is ragged.
    chunk = tl.cdiv(tl.cdiv(seq_len, num_splits), BLOCK_N) * BLOCK_N
    lo = split * chunk
    hi = tl.minimum(lo + chunk, seq_len)

    rows = tl.arange(0, GROUP_PAD)  # query heads kvh*GROUP + rows that share this KV head
    cols = tl.arange(0, D)
    heads = kvh * GROUP + rows
    q = tl.load(Q + b * sqb + heads[:, None] * sqh + cols[None, :], mask=rows[:, None] < GROUP, other=0.0)

    m_i = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    l_i = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, D], tl.float32)
    for start in range(lo, hi, BLOCK_N):
        t = start + tl.arange(0, BLOCK_N)  # key positions in the sequence
        live = t < hi
        if PAGED:  # logical key t is in physical page TABLE[b, t // PAGE], slot t % PAGE
            page = tl.load(TABLE + b * stb + t // PAGE, mask=live, other=0)
            k_row = page.to(tl.int64) * skb + (t % PAGE) * sks
            v_row = page.to(tl.int64) * svb + (t % PAGE) * svs
        else:
            k_row = b.to(tl.int64) * skb + t * sks
            v_row = b.to(tl.int64) * svb + t * svs
        # Rows past seq_len are never loaded: they may hold NaN.
        k = tl.load(K + k_row[:, None] + kvh * skh + cols[None, :], mask=live[:, None], other=0.0)
        v = tl.load(V + v_row[:, None] + kvh * svh + cols[None, :], mask=live[:, None], other=0.0)
        if IEEE:
            s = tl.dot(q, tl.trans(k), input_precision="ieee")
        else:
            s = tl.dot(q, tl.trans(k))
        s = tl.where(live[None, :], s * qk_scale, float("-inf"))  # [GROUP_PAD, BLOCK_N], base 2
        m_new = tl.maximum(m_i, tl.max(s, 1))  # finite: every block holds a live key
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        if IEEE:
            pv = tl.dot(p, v, input_precision="ieee")
        else:
            pv = tl.dot(p.to(v.dtype), v)
        acc = acc * alpha[:, None] + pv
        m_i = m_new

    seen = l_i > 0  # an empty split (lo >= hi) keeps l = 0
    l_safe = tl.where(seen, l_i, 1.0)
    o = acc / l_safe[:, None]
    lse = tl.where(seen, m_i + tl.log2(l_safe), float("-inf"))
    # PART_O [B, Hq, num_splits, D] fp32, PART_L [B, Hq, num_splits]
    row = (b * HKV * GROUP + heads) * num_splits + split
    tl.store(PART_O + row[:, None] * D + cols[None, :], o, mask=rows[:, None] < GROUP)
    tl.store(PART_L + row, lse, mask=rows < GROUP)
    if FUSED:
        # The last split of this (sequence, KV head) to finish merges all of them: one launch
        # instead of two. The atomic is acq_rel, so every split's partials are visible to it.
        done = tl.atomic_add(LOCKS + pid, 1)
        if done == num_splits - 1:
            tl.store(LOCKS + pid, 0)  # ready for the next call
            _merge_group(PART_O, PART_L, O, LSE, b, kvh, num_splits, sob, soh, HKV, GROUP, D, SPLITS_PAD,
                         STORE_LSE)


@triton.jit
def _merge_group(PART_O, PART_L, O, LSE, b, kvh, num_splits, sob, soh, HKV,
                 GROUP: tl.constexpr, D: tl.constexpr, SPLITS_PAD: tl.constexpr, STORE_LSE: tl.constexpr):
    """o (and with STORE_LSE the natural-log lse) for the GROUP query heads of one KV head from
    their num_splits partials (base-2 lse)."""
    cols = tl.arange(0, D)
    idx = tl.arange(0, SPLITS_PAD)
    have = idx < num_splits
    for r in tl.static_range(GROUP):
        h = kvh * GROUP + r
        base = (b * HKV * GROUP + h) * num_splits
        # .cg: read through L2, where the other programs' partials are, never a stale L1 line
        lse = tl.load(PART_L + base + idx, mask=have, other=float("-inf"), cache_modifier=".cg")
        part = tl.load(PART_O + (base + idx)[:, None] * D + cols[None, :], mask=have[:, None], other=0.0,
                       cache_modifier=".cg")
        m = tl.max(lse, 0)  # finite: seq_len >= 1, so some split saw a key
        w = tl.exp2(lse - m)  # empty splits weigh 0
        total = tl.sum(w, 0)
        o = tl.sum(w[:, None] * part, 0) / total
        tl.store(O + b * sob + h * soh + cols, o.to(O.dtype.element_ty))
        if STORE_LSE:
            tl.store(LSE + b * HKV * GROUP + h, (m + tl.log2(total)) * LN2)


@triton.jit
def _merge_kernel(PART_O, PART_L, O, LSE, num_splits, sob, soh, HQ,
                  D: tl.constexpr, SPLIT_TILE: tl.constexpr, STORE_LSE: tl.constexpr):
    pid = tl.program_id(0)  # b * HQ + h
    b = pid // HQ
    h = pid % HQ
    cols = tl.arange(0, D)
    tile = tl.arange(0, SPLIT_TILE)
    base = pid * num_splits
    # pass 1: the largest partial lse (base 2)
    m = tl.full([SPLIT_TILE], float("-inf"), tl.float32)
    for s0 in range(0, num_splits, SPLIT_TILE):
        lse = tl.load(PART_L + base + s0 + tile, mask=s0 + tile < num_splits, other=float("-inf"))
        m = tl.maximum(m, lse)
    m_all = tl.max(m, 0)
    m_all = tl.where(m_all == float("-inf"), 0.0, m_all)
    # pass 2: weights 2^(lse_s - max) <= 1; empty splits weigh 0
    total = tl.zeros([SPLIT_TILE], tl.float32)
    acc = tl.zeros([D], tl.float32)
    for s0 in range(0, num_splits, SPLIT_TILE):
        idx = s0 + tile
        lse = tl.load(PART_L + base + idx, mask=idx < num_splits, other=float("-inf"))
        w = tl.exp2(lse - m_all)
        part = tl.load(PART_O + (base + idx)[:, None] * D + cols[None, :], mask=(idx < num_splits)[:, None],
                       other=0.0)
        acc += tl.sum(w[:, None] * part, 0)
        total += w
    denom = tl.sum(total, 0)
    o = acc / tl.where(denom > 0, denom, 1.0)
    tl.store(O + b * sob + h * soh + cols, o.to(O.dtype.element_ty))
    if STORE_LSE:
        tl.store(LSE + pid, (m_all + tl.log2(denom)) * LN2)


# --------------------------------------------------------------------------- configs


# (BLOCK_N, num_warps, num_stages): the ones the tuner chose on an H200 at D = 128 (BENCHMARKS.md).
CANDIDATES = [(64, 4, 3), (128, 4, 3), (64, 4, 4), (32, 4, 4)]
FUSED_MERGE = True  # interpreter and pinned runs: merge in the split kernel's last program
INTERPRET_CONFIG = (16, 4, 1)
# Tests and the benchmark may pin a config (BLOCK_N, num_warps, num_stages); None means tune.
FORCED_CONFIG: tuple | None = None
_TUNED: dict[tuple, tuple] = {}  # shape key + (being captured,) -> (config, splits, fused)
LAST: dict = {}  # the config and split count of the latest call, for the benchmark's table


_SMS: dict = {}


def _sm_count(device) -> int:
    if _interpreting() or device.type != "cuda":
        return 4
    if device not in _SMS:
        _SMS[device] = torch.cuda.get_device_properties(device).multi_processor_count
    return _SMS[device]


def pick_num_splits(batch: int, hkv: int, max_len: int, sms: int, block_n: int = 64) -> int:
    """Enough (sequence, KV head, split) programs to give every SM a few, but no split
    shorter than two blocks: below that the merge and the per-program set-up dominate."""
    programs = batch * hkv
    want = math.ceil(3 * sms / programs)
    most = max(1, math.ceil(max_len / (2 * block_n)))
    return max(1, min(want, most, 256))


# --------------------------------------------------------------------------- launcher


# Positional arguments in signature order, constexprs included (see fastlaunch.py): a decode
# call's host time is mostly Triton's launcher otherwise.
_launch_split_kernel = FastLaunch(_split_kernel)
_launch_merge_kernel = FastLaunch(_merge_kernel)
_LOCKS: dict = {}
MAX_FUSED_SPLITS = 64  # the fused merge holds [splits, D] fp32 partials in registers


_PARTIALS: dict = {}
PARTIALS_KEPT_BYTES = 8 << 20  # small decodes keep their scratch: at batch 1 its allocation is host time


def _partials(device, B: int, Hq: int, splits: int, D: int, captured: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(part_o [B, Hq, splits, D], part_l [B, Hq, splits]) fp32 scratch for the split kernel. Up to
    PARTIALS_KEPT_BYTES it is kept per (device, stream, shape) and reused: calls on one stream run in
    order, so a call never overwrites partials the previous one still reads, and each stream has
    its own. Two allocations cost ~7 µs of a ~45 µs batch-1 call. A call being captured into a CUDA
    graph allocates its own (the graph's pool keeps them for its replays)."""
    n = B * Hq * splits
    if device.type != "cuda" or n * (D + 1) * 4 > PARTIALS_KEPT_BYTES or captured:
        return (torch.empty((B, Hq, splits, D), dtype=torch.float32, device=device),
                torch.empty((B, Hq, splits), dtype=torch.float32, device=device))
    key = (device, torch._C._cuda_getCurrentRawStream(device.index), B, Hq, splits, D)
    kept = _PARTIALS.get(key)
    if kept is None:
        if len(_PARTIALS) > 64:
            _PARTIALS.clear()
        part = torch.empty(n * (D + 1), dtype=torch.float32, device=device)
        kept = _PARTIALS[key] = (part[: n * D].view(B, Hq, splits, D), part[n * D:].view(B, Hq, splits))
    return kept


def _locks(device, n: int, captured: bool) -> torch.Tensor:
    """Per-(sequence, KV head) arrival counters, zero between calls (the last program resets its
    own). Calls on one stream run in order and may share a buffer; calls on two streams may overlap,
    so each stream has its own. A call being captured into a CUDA graph gets a fresh zeroed one: a
    replay may run beside eager calls on any stream."""
    if device.type != "cuda" or captured:
        return torch.zeros(n, dtype=torch.int32, device=device)
    key = (device, torch._C._cuda_getCurrentRawStream(device.index))
    size, buf = _LOCKS.get(key, (0, None))
    if size < n:
        size = max(n, 1024)
        buf = torch.zeros(size, dtype=torch.int32, device=device)
        _LOCKS[key] = (size, buf)
    return buf


def _launch_split(cfg, grid_args, part_o, part_l, o, lse, num_splits, fused, captured):
    (q, k, v, seq_lens, table, strides, scale, hkv, group, group_pad, D, paged, page, ieee) = grid_args
    block_n, warps, stages = cfg
    B = q.shape[0]
    locks = _locks(q.device, B * hkv, captured) if fused else seq_lens  # LOCKS is never touched unfused
    _launch_split_kernel(
        (num_splits, B * hkv), q, k, v, seq_lens, table, part_o, part_l, o, o if lse is None else lse, locks,
        *strides, o.stride(0), o.stride(1), scale, num_splits, hkv,
        group, group_pad, D, block_n, paged, page, ieee, fused, pow2(num_splits) if fused else 1, lse is not None,
        num_warps=warps, num_stages=stages)


def forward(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, seq_lens: torch.Tensor,
            block_table: torch.Tensor | None = None, num_splits: int | None = None, scale: float | None = None,
            return_lse: bool = False):
    """Decode attention of q [B, Hq, D] over a contiguous or paged KV cache, scores scaled by `scale`
    (None: 1/sqrt(D)): returns o [B, Hq, D], or (o, lse [B, Hq] float32) with return_lse. The
    arguments are as dispatch.flash_decode checked them (shapes, dtypes, pages in the pool, scale)."""
    B, Hq, D = q.shape
    hkv = k_cache.shape[2] if block_table is not None else k_cache.shape[1]
    if _interpreting() and q.dtype == torch.bfloat16:  # the interpreter has no bf16 arithmetic
        out = forward(q.float(), k_cache.float(), v_cache.float(), seq_lens, block_table, num_splits, scale,
                      return_lse)
        return (out[0].to(torch.bfloat16), out[1]) if return_lse else out.to(torch.bfloat16)
    group = Hq // hkv
    group_pad = max(16, pow2(group))  # tl.dot wants at least 16 rows
    paged = block_table is not None
    seq_lens = seq_lens.to(device=q.device, dtype=torch.int32)
    (sqb, sqh, _), (k0, k1, k2, _), (v0, v1, v2, _) = q.stride(), k_cache.stride(), v_cache.stride()
    if paged:
        page = k_cache.shape[1]
        table = block_table.to(device=q.device, dtype=torch.int32)
        # pools [num_pages, page_size, Hkv, D]: page, head and slot strides
        strides = (sqb, sqh, k0, k2, k1, v0, v2, v1, table.stride(0))
        max_len = table.shape[1] * page
    else:
        page, table = 1, seq_lens  # TABLE is never read
        strides = (sqb, sqh, k0, k1, k2, v0, v1, v2, 0)
        max_len = k_cache.shape[2]
    qk_scale = LOG2E * (1 / math.sqrt(D) if scale is None else scale)  # base-2 scores
    ieee = q.dtype == torch.float32
    grid_args = (q, k_cache, v_cache, seq_lens, table, strides, qk_scale, hkv, group, group_pad, D, paged, page, ieee)
    sms = _sm_count(q.device)
    o = torch.empty((B, Hq, D), dtype=q.dtype, device=q.device)
    lse = torch.empty((B, Hq), dtype=torch.float32, device=q.device) if return_lse else None
    # A call being captured into a CUDA graph is replayed without the host: it takes the pick by GPU
    # time. An eager call also pays its launches, which at batch 1 cost more than the kernels.
    captured = q.is_cuda and torch.cuda.is_current_stream_capturing()

    def run(cfg, splits, fused=False):
        fused = fused and splits <= MAX_FUSED_SPLITS
        part_o, part_l = _partials(q.device, B, Hq, splits, D, captured)
        _launch_split(cfg, grid_args, part_o, part_l, o, lse, splits, fused, captured)
        if not fused:
            _launch_merge_kernel((B * Hq,), part_o, part_l, o, o if lse is None else lse, splits, o.stride(0),
                                 o.stride(1), Hq, D, min(32, pow2(splits)), lse is not None, num_warps=4)

    if FORCED_CONFIG is not None or _interpreting():
        cfg = FORCED_CONFIG or INTERPRET_CONFIG
        splits = num_splits or pick_num_splits(B, hkv, max_len, sms, cfg[0])
        LAST.update(config=cfg, num_splits=splits, fused=FUSED_MERGE)
        run(cfg, splits, FUSED_MERGE)
        return (o, lse) if return_lse else o
    key = (D, group_pad, q.dtype, paged, B * hkv, pow2(max_len), num_splits, captured)
    choice = _TUNED.get(key)
    if choice is None:
        if captured:  # nothing may be timed during a capture; an eager call of this shape tunes both
            choice = (CANDIDATES[0], num_splits or pick_num_splits(B, hkv, max_len, sms, CANDIDATES[0][0]), False)
        else:
            picks = _tune(run, o, B, hkv, max_len, sms, num_splits)
            _TUNED[key[:-1] + (True,)] = picks["graph"]
            choice = picks["eager"]
        _TUNED[key] = choice
    LAST.update(config=choice[0], num_splits=choice[1], fused=choice[2], captured=captured)
    run(*choice)
    return (o, lse) if return_lse else o


def split_counts(batch: int, hkv: int, max_len: int, sms: int, block_n: int) -> list[int]:
    """Split counts the tuner times: the heuristic, half and twice it, and the counts nearest to
    one, two or four programs per SM from above and from below (a partial last wave leaves SMs
    idle at the end; a wave just short of full leaves a few idle throughout)."""
    most = max(1, min(256, math.ceil(max_len / block_n)))
    base = pick_num_splits(batch, hkv, max_len, sms, block_n)
    programs = batch * hkv
    waves = {f(k * sms / programs) for k in (1, 2, 4) for f in (math.ceil, math.floor)}
    return sorted({c for c in {base, max(1, base // 2), 2 * base} | waves if 1 <= c <= most})


def _eager_us(fn, calls: int = 30) -> float:
    """Microseconds per call of `fn` called back to back and left to run: the larger of its host
    time and its GPU time, what a loop of eager decode steps waits for."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


def _tune(run, o, B, hkv, max_len, sms, num_splits) -> dict:
    """Time each candidate (and, when num_splits is None, the split counts of split_counts), fused
    merge or not; a candidate whose output differs from the plain two-kernel path is dropped, so a
    fast wrong variant can never be chosen. Two picks: "graph", by the GPU's time alone (CUDA-graph
    replays; eager do_bench lets host time leak in where it exceeds the L2 flush, which made the
    one-launch fused merge look faster on the GPU than it runs, kernels/NOTES.md), for calls being
    captured; and "eager", by the time per call of back-to-back eager calls (_eager_us, best of three
    rounds), where a saved launch counts."""
    run(CANDIDATES[0], num_splits or pick_num_splits(B, hkv, max_len, sms, CANDIDATES[0][0]), False)
    want = o.float().clone()
    tol = 1e-2 * max(1.0, float(want.abs().max()))
    best, best_ms = None, float("inf")
    eager: dict = {}
    for cfg in CANDIDATES:
        counts = [num_splits] if num_splits else split_counts(B, hkv, max_len, sms, cfg[0])
        for splits in counts:
            for fused in (True, False) if splits <= MAX_FUSED_SPLITS else (False,):
                try:
                    o.fill_(float("nan"))
                    run(cfg, splits, fused)
                    if not torch.allclose(o.float(), want, atol=tol, rtol=0):
                        continue
                    ms = graph_ms(lambda: run(cfg, splits, fused), rep=40)
                except Exception:  # a config that does not compile or fit
                    continue
                eager[(cfg, splits, fused)] = float("inf")
                if ms < best_ms:
                    best, best_ms = (cfg, splits, fused), ms
    if best is None:
        raise RuntimeError("flash_decode: no config compiled")
    for _ in range(3):  # interleaved rounds: a pause of the host's cannot decide alone
        for c in eager:
            eager[c] = min(eager[c], _eager_us(lambda c=c: run(*c)))
    return {"graph": best, "eager": min(eager, key=eager.get)}


def tuned_configs() -> dict:
    """The (BLOCK_N, num_warps, num_stages) and split count chosen so far, per shape key."""
    return {" ".join(map(str, k)): {"config": v[0], "num_splits": v[1], "fused": v[2]} for k, v in _TUNED.items()}
