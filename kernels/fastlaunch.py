"""Launch a Triton kernel again without Triton's Python launcher, once it is compiled.

`kernel[grid](*args)` binds and specialises every argument in Python before it looks the
compiled kernel up: 11 µs of host time for one argument and 28 µs for 24 on the H200's host
(decode_bench's launch figures). A decode call is a few tens of µs of GPU work, so at batch 1
two such launches cost more than the kernels take to run. FastLaunch keeps each compiled
kernel under a key at least as fine as Triton's own specialisation (every integer's value,
each tensor's dtype, device and 16-byte alignment, the constexprs and launch options), and
calls the compiled kernel's C launcher directly when the key repeats.

Arguments go positionally in the kernel's signature order, constexprs included (the launcher
receives all of them, as Triton's own `run` passes them). Under TRITON_INTERPRET=1, or when
`enabled` is False, every call goes through Triton's launcher unchanged.
"""

from __future__ import annotations

import os

import torch
from triton import knobs

enabled = True


def interpreting() -> bool:
    """True under TRITON_INTERPRET=1 (the CPU): no compiled kernels, no launcher to skip."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _key(device: int, args, num_warps, num_stages) -> tuple:
    """What of the arguments the compiled kernel depends on, never coarser than Triton's view
    (an int through ==1, %16 and its width; a tensor through its dtype and alignment): every
    non-tensor's type and value, each tensor's dtype and address mod 16, the device. A list
    comprehension with `type(a) is Tensor`, because this runs every call (~5 µs for 32 args)."""
    Tensor = torch.Tensor
    spec = [(a.dtype, a.data_ptr() & 15) if type(a) is Tensor else (type(a), a) for a in args]
    return num_warps, num_stages, device, *spec


def _current_stream(device: int) -> int:
    # What Triton's own launcher asks for; torch.cuda.current_stream() builds a Stream object.
    return torch._C._cuda_getCurrentRawStream(device)


def _disable() -> None:
    global enabled
    enabled = False


class FastLaunch:
    def __init__(self, kernel):
        self.kernel = kernel  # a @triton.jit function
        self.compiled: dict = {}
        self.launches = {"jit": 0, "fast": 0}  # which path each call took, for the tests

    def __call__(self, grid: tuple, *args, num_warps: int = 4, num_stages: int = 3):
        if not enabled or interpreting():
            self.launches["jit"] += 1
            return self.kernel[grid](*args, num_warps=num_warps, num_stages=num_stages)
        device = args[0].get_device()  # the first argument is a tensor
        key = _key(device, args, num_warps, num_stages)
        compiled = self.compiled.get(key)
        if compiled is None:
            self.launches["jit"] += 1
            if len(self.compiled) > 4096:  # every distinct stride is a key: keep the table bounded
                self.compiled.clear()
            self.compiled[key] = self.kernel[grid](*args, num_warps=num_warps, num_stages=num_stages)
            return
        stream = _current_stream(device)
        enter, leave = knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook
        # A profiler's hook wants the metadata; without one, skip building it (as Triton does).
        meta = compiled.launch_metadata(grid, stream, *args) if enter is not None else None
        g = (*grid, 1, 1)
        try:
            compiled.run(g[0], g[1], g[2], stream, compiled.function, compiled.packed_metadata, meta, enter, leave,
                         *args)
        except TypeError:  # a Triton whose launcher takes other arguments (checked on 3.6): its own path
            _disable()
            self.launches["jit"] += 1
            self.kernel[grid](*args, num_warps=num_warps, num_stages=num_stages)
            return
        self.launches["fast"] += 1
