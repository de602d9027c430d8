# drill: flashattention/lse-merge
# variant: a PyTorch user's merge: the arrays viewed as float64 tensors (torch.from_numpy), L from torch.logaddexp / torch.logsumexp over the stacked parts, weights exp(L_k - L) zeroed by torch.where where the merged L is -inf, results handed back with .numpy()
"""LSE merge written with torch ops on the CPU."""

import numpy as np
import torch


def _weights(Ls, L):
    """exp(L_k - L) for every part, 0 on rows no part reaches (L = -inf there)."""
    seen = torch.isfinite(L)
    safe = torch.where(seen, L, torch.zeros_like(L))
    return torch.where(seen, torch.exp(Ls - safe), torch.zeros_like(Ls))


def merge_partials(O1, L1, O2, L2):
    return merge_many([(O1, L1), (O2, L2)])


def merge_many(parts):
    O = torch.stack([torch.from_numpy(np.ascontiguousarray(Ok)) for Ok, _ in parts])  # [P, n, d]
    Ls = torch.stack([torch.from_numpy(np.ascontiguousarray(Lk)) for _, Lk in parts])  # [P, n]
    L = Ls[0] if len(parts) == 1 else torch.logsumexp(Ls, dim=0)
    w = _weights(Ls, L)  # [P, n]
    merged = (w.unsqueeze(-1) * O).sum(dim=0)
    return merged.numpy(), L.clone().numpy()
