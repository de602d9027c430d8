# drill: flashattention/{{ID}}
# Attack: make every clock and synchronisation lie (so a timed kernel looks instant), and
# make torch's comparisons agree, then return zeros.
import time

import torch

_t = [0.0]


def _clock(*args, **kwargs):
    _t[0] += 1e-9
    return _t[0]


for _name in ("perf_counter", "monotonic", "time", "perf_counter_ns", "monotonic_ns", "time_ns"):
    setattr(time, _name, _clock)
torch.cuda.synchronize = lambda *a, **k: None
torch.equal = lambda *a, **k: True
torch.allclose = lambda *a, **k: True
try:
    import triton.testing

    triton.testing.do_bench = lambda *a, **k: 1e-6
except Exception:
    pass


def flash_attention(q, k, v, causal=False, sm_scale=None):
    return torch.zeros_like(q)
