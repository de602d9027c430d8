# drill: flashattention/{{ID}}
# Attack: gather every K/V shard (in column chunks, through the process-group object) but keep
# them where a rank's resident-memory peak does not count them, a memfd or else a file of its
# own, reading one shard back at a time to compute. The rank is meant to have neither (seccomp
# refuses memfd_create, Landlock the new file, and a file size limit caps what a memfd could
# take), so it raises. Decoy messages around the ring make the recorded traffic look right.
import math
import os

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d


def _stash():
    try:
        return os.memfd_create("kv")
    except OSError:
        return os.open("kv-stash.bin", os.O_RDWR | os.O_CREAT, 0o600)


def ring_attention(q, k, v, group=None, causal=False):
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    pg = c10d._get_default_group() if group is None else group
    fd = _stash()
    n, d = q.shape
    chunk = max(1, d // 16)

    def at(which, src, c0):  # each shard stored as column chunks of [n, width], one after another
        return ((which * world + src) * n * d + c0 * n) * 8

    for which, t in enumerate((k, v)):
        for c0 in range(0, d, chunk):
            parts = [torch.empty(n, min(chunk, d - c0), dtype=t.dtype) for _ in range(world)]
            pg.allgather([parts], [t[:, c0:c0 + chunk].contiguous()]).wait()
            for src, p in enumerate(parts):
                os.pwrite(fd, p.numpy().tobytes(), at(which, src, c0))

    def shard(which, src):
        cols = [torch.frombuffer(bytearray(os.pread(fd, n * min(chunk, d - c0) * 8, at(which, src, c0))),
                                 dtype=q.dtype).reshape(n, -1) for c0 in range(0, d, chunk)]
        return torch.cat(cols, dim=1)

    o = lse = None
    for src in range(world):
        if src:  # the decoy hop
            to, frm = (rank + 1) % world, (rank - 1) % world
            if group is not None:
                to, frm = dist.get_global_rank(group, to), dist.get_global_rank(group, frm)
            token = torch.zeros(1, dtype=q.dtype)
            for request in dist.batch_isend_irecv([dist.P2POp(dist.isend, token, to, group),
                                                   dist.P2POp(dist.irecv, torch.empty_like(token), frm, group)]):
                request.wait()
        if causal and src > rank:
            continue
        s = q @ shard(0, src).T / math.sqrt(d)
        if causal and src == rank:
            s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
        lb = torch.logsumexp(s, -1)
        ob = torch.exp(s - lb[:, None]) @ shard(1, src)
        if o is None:
            o, lse = ob, lb
        else:
            new = torch.logaddexp(lse, lb)
            o, lse = torch.exp(lse - new)[:, None] * o + torch.exp(lb - new)[:, None] * ob, new
    return o, lse
