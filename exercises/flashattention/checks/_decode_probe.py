"""Subject-side helper for the triton-decode speed check (runs in the untrusted subject).

The grader copies this file beside subject.py. One request is one timed call: the K/V cache
is drawn here from its seed once per shape (it would cost more to send than to read), q is
drawn fresh from the seed in each request, and the user's flash_decode runs on them. The
grader draws the same tensors from the same seeds to check every output, and picks the
seeds at random, so no call can be answered before its request arrives.

Standard library and torch only: nothing of drill is importable here; the reply is packed by
_triton_probe.py, which the grader copies beside this file. The trusted side
imports the drawing functions from this file too, so both sides draw alike.
"""

from __future__ import annotations

import math

import torch

_CACHE: dict = {}


def draw_cache(spec: dict, device: str):
    """k, v [B, Hkv, S, D] from spec["kv_seed"], in spec["dtype"]."""
    gen = torch.Generator(device=device).manual_seed(int(spec["kv_seed"]))
    shape = (int(spec["B"]), int(spec["Hkv"]), int(spec["S"]), int(spec["D"]))
    dtype = getattr(torch, str(spec["dtype"]))
    return tuple(torch.randn(shape, generator=gen, device=device, dtype=torch.float32).to(dtype) for _ in range(2))


def draw_q(spec: dict, seed: int, device: str) -> torch.Tensor:
    gen = torch.Generator(device=device).manual_seed(int(seed))
    shape = (int(spec["B"]), int(spec["Hq"]), int(spec["D"]))
    return torch.randn(shape, generator=gen, device=device, dtype=torch.float32).to(getattr(torch, str(spec["dtype"])))


def seeded(fn, args, kwargs, spec: dict, user_file: str):
    """One call of fn(q, k_cache, v_cache, seq_lens) on drawn inputs; the output back as int16 bits."""
    device = str(spec["device"])
    key = tuple(sorted((k, v) for k, v in spec.items() if k != "q_seed"))
    if key not in _CACHE:
        _CACHE.clear()  # one shape at a time: the caches are large
        _CACHE[key] = draw_cache(spec, device) + (
            torch.full((int(spec["B"]),), int(spec["S"]), dtype=torch.int32, device=device),)
    k, v, seq_lens = _CACHE[key]
    q = draw_q(spec, spec["q_seed"], device)
    from _triton_probe import packed  # copied beside subject.py with this file (test_10's HELPERS)

    return packed(fn(q, k, v, seq_lens))


# Largest float tensor argument of a launch copied back after it ran (elements): the partials of
# the checks' calls are a few thousand; nothing larger is sent.
_ARG_LIMIT = 1 << 20


def watched(fn, args, kwargs, spec: dict, user_file: str):
    """One checked call: _triton_probe.call (inputs rebuilt with guards, allocations poisoned, torch
    compute and launches recorded), and beside it the float tensor arguments of every launch from
    the user's file, copied as they are just after that launch ran (the split kernel's PART_O and
    PART_L among them; q, k and v too, which match no partial), in the order of those launches.
    Advice like the rest of the probe: it can fail a check, never pass one."""
    import _triton_probe as base  # copied beside subject.py with this file (test_10's HELPERS)

    after: list = []
    shift = spec.get("shift") or {}
    shifted: list = []  # the index in `after` of the launch whose partials were shifted

    class Copying(base.Launches):
        def _wrap(self, original):
            recorded = super()._wrap(original)
            user, seen = self.user_file, self.seen

            def run(this, *a, **kw):
                out = recorded(this, *a, **kw)
                code = getattr(getattr(this, "fn", None), "__code__", None)
                if (not kw.get("warmup", False) and code is not None and code.co_filename == user
                        and len(after) < 16):
                    copies = []
                    for position, arg in enumerate(a):
                        if type(arg) is torch.Tensor and arg.is_floating_point() and arg.numel() <= _ARG_LIMIT:
                            copies.append([position, base._as_array(arg.float()).copy()])  # not a view: shifted below
                    after.append(copies)
                    grid = seen[-1].get("grid") if seen else None
                    if shift and not shifted and grid and len(grid) >= 2 and math.prod(grid) % int(shift["bh"]) == 0:
                        # The split launch: every float argument sized like PART_O [B·Hq, num_splits, D]
                        # gets `by` added once copied. A merge of normalised partials by their logsumexps
                        # then returns o + by; one that does not read them does not.
                        size = math.prod(grid) * int(shift["D"])
                        with torch.no_grad():
                            for arg in a:
                                if type(arg) is torch.Tensor and arg.is_floating_point() and arg.numel() == size:
                                    arg.add_(float(shift["by"]))
                        shifted.append(len(after) - 1)
                return out

            return run

    base.Launches, kept = Copying, base.Launches
    try:
        value = base.call(fn, args, kwargs, spec, user_file)
    finally:
        base.Launches = kept
    value["after_launches"] = after
    value["shifted_at"] = shifted[0] if shifted else None
    return value
