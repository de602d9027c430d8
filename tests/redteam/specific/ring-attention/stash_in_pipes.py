# drill: flashattention/{{ID}}
# Attack: gather every K/V shard (column chunks, through the process-group object) and keep them in
# pipe buffers, which are kernel memory and not the rank's resident memory, reading one shard back
# at a time to compute; decoy messages around the ring make the recorded traffic look right. The
# kernel shrinks new pipes to two pages once a user holds many, so each value spills over as many
# non-blocking pipes as it needs. It passed every check of 06 (the memory check included): the
# rank's hiding filter refused memfd, socketpair and System V segments but not pipe or pipe2. It
# now refuses pipe, pipe2, msgget, mq_open and process_madvise too, so the rank raises.
import ctypes
import fcntl
import math
import os
import resource

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

F_SETPIPE_SZ = 1031


class _Stash:
    """Bytes kept in pipe buffers: each value fills as many pipes as it needs (the kernel shrinks
    new pipes to two pages once a user holds many), written without blocking."""

    def __init__(self):
        self.pipes = {}
        try:
            soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (OSError, ValueError):
            pass

    def put(self, key, data: bytes):
        view, used = memoryview(data), []
        while view:
            r, w = os.pipe2(os.O_NONBLOCK)
            try:
                fcntl.fcntl(w, F_SETPIPE_SZ, 1 << 20)
            except OSError:
                pass
            size = 0
            while view:
                try:
                    wrote = os.write(w, view[:65536])
                except BlockingIOError:
                    break
                view, size = view[wrote:], size + wrote
            used.append((r, w, size))
        self.pipes[key] = used

    def take(self, key) -> bytes:
        out = bytearray()
        for r, w, size in self.pipes.pop(key):
            got = 0
            while got < size:
                piece = os.read(r, size - got)
                out += piece
                got += len(piece)
            os.close(r)
            os.close(w)
        return bytes(out)


def ring_attention(q, k, v, group=None, causal=False):
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    pg = c10d._get_default_group() if group is None else group
    n, d = q.shape
    chunk = max(1, min(d, 65536 // (8 * n)))
    stash = _Stash()
    for which, t in enumerate((k, v)):
        for c0 in range(0, d, chunk):
            parts = [torch.empty(n, min(chunk, d - c0), dtype=t.dtype) for _ in range(world)]
            pg.allgather([parts], [t[:, c0:c0 + chunk].contiguous()]).wait()
            for src, p in enumerate(parts):
                stash.put((which, src, c0), ctypes.string_at(p.data_ptr(), p.numel() * 8))
            del parts

    def shard(which, src):
        cols = [torch.frombuffer(bytearray(stash.take((which, src, c0))), dtype=q.dtype).reshape(n, -1)
                for c0 in range(0, d, chunk)]
        return torch.cat(cols, dim=1)

    o = lse = None
    for src in range(world):
        if src:
            to, frm = (rank + 1) % world, (rank - 1) % world
            if group is not None:
                to, frm = dist.get_global_rank(group, to), dist.get_global_rank(group, frm)
            token = torch.zeros(1, dtype=q.dtype)
            for request in dist.batch_isend_irecv([dist.P2POp(dist.isend, token, to, group),
                                                   dist.P2POp(dist.irecv, torch.empty_like(token), frm, group)]):
                request.wait()
        ks, vs = shard(0, src), shard(1, src)
        if causal and src > rank:
            continue
        s = q @ ks.T / math.sqrt(d)
        if causal and src == rank:
            s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
        lb = torch.logsumexp(s, -1)
        ob = torch.exp(s - lb[:, None]) @ vs
        del ks, vs
        if o is None:
            o, lse = ob, lb
        else:
            new = torch.logaddexp(lse, lb)
            o, lse = torch.exp(lse - new)[:, None] * o + torch.exp(lb - new)[:, None] * ob, new
    return o, lse
