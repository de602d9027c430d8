"""Ring attention over torch.distributed: exact attention on a sequence split across ranks.

Every rank of a process group holds one part of the sequence of q, k and v, shape
[B, H, S/W, D] (or [S/W, D]). Queries stay put; K and V travel around the ring:

    step t = 0 .. W-1:  hold the K/V of rank src = (rank - t) mod W
        post   isend(kv -> rank + 1), irecv(next kv <- rank - 1)   # before computing: overlap
        attend q to the held K/V block -> (o_t, lse_t)              # FlashAttention on a GPU
        merge  L = logaddexp(L, lse_t); O = e^(L_old - L) O + e^(lse_t - L) o_t
        wait   for the transfer; the received buffer becomes the held one

The merge is the online-softmax rescale applied to whole blocks: every weight is <= 1,
so scores of any size are safe. Accumulators are float32 (float64 for float64 inputs).

Layouts (which rows a rank holds; the caller shards with `shard()`):
  contiguous  rank r holds rows [r*S/W, (r+1)*S/W). With causal=True, K/V from a later
              rank is skipped, so rank r computes r full blocks and one triangle: the last
              rank does about twice the average work and everyone waits for it.
  zigzag      the sequence is cut into 2W chunks; rank r holds chunks r and 2W-1-r (one
              early, one late), so every rank does the same causal work: at every step
              exactly half a block (its own K/V: a causal block; an earlier rank's: all its
              queries against that rank's early chunk; a later rank's: its late chunk's
              queries against both chunks). Without a mask the layouts do the same work.

Block attention is a function the caller hands in, (q, k, v, causal, scale) -> (o, lse):
dispatch.ring_attention passes the package's flash_attention for CUDA tensors (fp16, bf16, fp32;
D in 16..256) and `torch_block` below otherwise (CPU, gloo). Point-to-point transfers use
dist.batch_isend_irecv, which NCCL and gloo both support.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.distributed as dist

LAYOUTS = ("contiguous", "zigzag")


# --------------------------------------------------------------------------- sharding


def _chunks(rank: int, world: int, layout: str) -> tuple[int, ...]:
    """Which of the sequence's chunks rank `rank` holds, in order (W chunks, or 2W for zigzag)."""
    if layout == "contiguous":
        return (rank,)
    if layout == "zigzag":
        return (rank, 2 * world - 1 - rank)
    raise ValueError(f"layout must be one of {LAYOUTS}, not {layout!r}")


def shard(x: torch.Tensor, rank: int, world: int, layout: str = "contiguous", dim: int = -2) -> torch.Tensor:
    """Rank `rank`'s rows of a full tensor (sequence along `dim`), contiguous in memory."""
    parts = world * (2 if layout == "zigzag" else 1)
    if x.shape[dim] % parts:
        raise ValueError(f"sequence length {x.shape[dim]} is not a multiple of {parts} ({layout}, W = {world})")
    pieces = x.chunk(parts, dim=dim)
    return torch.cat([pieces[c] for c in _chunks(rank, world, layout)], dim=dim).contiguous()


def unshard(shards: list[torch.Tensor], layout: str = "contiguous", dim: int = -2) -> torch.Tensor:
    """The full tensor from every rank's shard (the inverse of `shard`)."""
    world = len(shards)
    if layout == "contiguous":
        return torch.cat(shards, dim=dim)
    pieces = [None] * (2 * world)
    for rank, part in enumerate(shards):
        for chunk, piece in zip(_chunks(rank, world, layout), part.chunk(2, dim=dim)):
            pieces[chunk] = piece
    return torch.cat(pieces, dim=dim)


# --------------------------------------------------------------------------- one block


def torch_block(q, k, v, causal: bool, scale: float):
    """Reference block attention -> (o, lse) in q's dtype promoted to >= float32; bottom-right causal."""
    dtype = torch.promote_types(q.dtype, torch.float32)
    q, k, v = (t.to(dtype) for t in (q, k, v))
    s = (q @ k.transpose(-1, -2)) * scale  # [..., Sq, Sk]
    if causal:
        sq, sk = s.shape[-2], s.shape[-1]
        i = torch.arange(sq, device=s.device)[:, None]
        j = torch.arange(sk, device=s.device)[None, :]
        s = s.masked_fill(j > i + (sk - sq), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - torch.where(torch.isinf(lse), 0.0, lse)[..., None])  # rows with no key: p = 0
    return p @ v, lse


def _merge_into(o_acc, lse_acc, o, lse, rows: slice) -> None:
    """Fold a block's (o, lse) into the accumulators' `rows` in place, stably."""
    old = lse_acc[..., rows]
    new = torch.logaddexp(old, lse.to(old.dtype))
    safe = torch.where(torch.isinf(new), 0.0, new)  # both -inf: weights exp(-inf) = 0, never NaN
    a = torch.exp(old - safe).unsqueeze(-1)
    b = torch.exp(lse.to(old.dtype) - safe).unsqueeze(-1)
    o_acc[..., rows, :] = a * o_acc[..., rows, :] + b * o.to(o_acc.dtype)
    lse_acc[..., rows] = new


def _plan(src: int, rank: int, n: int, causal: bool, layout: str):
    """What to compute with the K/V of rank `src`: (query rows, key rows, causal block) or None to skip."""
    everything = slice(0, n)
    if not causal:
        return everything, everything, False
    if src == rank:
        # Own K/V: with both layouts local order follows global order, so the local triangle is right.
        return everything, everything, True
    if layout == "contiguous":
        return (everything, everything, False) if src < rank else None
    half = n // 2
    if src < rank:  # its early chunk precedes both of ours; its late chunk follows both
        return everything, slice(0, half), False
    return slice(half, n), everything, False  # only our late chunk comes after both of its chunks


# --------------------------------------------------------------------------- the ring


def _peer(group, r: int) -> int:
    return r if group is None else dist.get_global_rank(group, r)


def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, group, causal: bool, layout: str, scale: float,
            block: Callable) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's rows of softmax(q kᵀ·scale [+ causal mask]) v over the whole sequence, as
    dispatch.ring_attention documents it; q, k, v [B, H, n, D] with n even for zigzag, and
    block(q, k, v, causal, scale) -> (o, lse) the attention of one block."""
    n = q.shape[-2]
    rank = dist.get_rank(group)
    world = dist.get_world_size(group)
    send_to, recv_from = _peer(group, (rank + 1) % world), _peer(group, (rank - 1) % world)

    acc_dtype = torch.promote_types(q.dtype, torch.float32)
    o_acc = torch.zeros(q.shape, dtype=acc_dtype, device=q.device)
    lse_acc = torch.full(q.shape[:-1], float("-inf"), dtype=acc_dtype, device=q.device)
    kv = torch.stack([k, v])  # [2, B, H, n, D]: one message per hop, never the caller's memory
    for step in range(world):
        src = (rank - step) % world
        pending = []
        if step < world - 1:
            incoming = torch.empty_like(kv)
            pending = dist.batch_isend_irecv([
                dist.P2POp(dist.isend, kv, send_to, group),
                dist.P2POp(dist.irecv, incoming, recv_from, group),
            ])
        todo = _plan(src, rank, n, causal, layout)
        if todo is not None:
            rows, cols, block_causal = todo
            # contiguous(): a no-op for whole shards; half shards become evenly strided for the kernel
            qb, kb, vb = (t[..., r, :].contiguous() for t, r in ((q, rows), (kv[0], cols), (kv[1], cols)))
            o, lse = block(qb, kb, vb, block_causal, scale)
            _merge_into(o_acc, lse_acc, o, lse, rows)
        for request in pending:
            request.wait()
        if pending:
            kv = incoming
    return o_acc.to(q.dtype), lse_acc
