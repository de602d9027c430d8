"""Launch a Triton kernel again without Triton's Python launcher, once it is compiled.

`kernel[grid](*args)` binds and specialises every argument in Python before it looks the
compiled kernel up: 11 µs of host time for one argument and 28 µs for 24 on the H200's host
(decode_bench's launch figures), more with tensor descriptors. A decode call is a few tens of
µs of GPU work, and a 1k causal attention forward ~150 µs, so such launches decide the call's
time. FastLaunch keeps each compiled kernel under a key at least as fine as Triton's own
specialisation (every integer's value, each tensor's dtype, device and 16-byte alignment, each
tensor descriptor's dtype, block shape and layout, the constexprs and launch options), and calls
the compiled kernel's C launcher directly when the key repeats.

Arguments go positionally or by name, as to `kernel[grid]`; keywords that are not parameters
of the kernel are launch options (num_warps, num_stages, maxnreg, ...). Under TRITON_INTERPRET=1,
or when `enabled` is False, every call goes through Triton's launcher unchanged.
"""

from __future__ import annotations

import inspect
import os

import torch
from triton import knobs
from triton.tools.tensor_descriptor import TensorDescriptor

enabled = True

_DESCRIPTORS = {TensorDescriptor}
try:  # Gluon's descriptor also carries its shared-memory layout
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor as _GluonDescriptor

    _DESCRIPTORS.add(_GluonDescriptor)
except ImportError:  # a Triton without Gluon
    pass


def interpreting() -> bool:
    """True under TRITON_INTERPRET=1 (the CPU): no compiled kernels, no launcher to skip."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _descriptor_spec(d) -> tuple:
    # What Triton specialises a descriptor on; its shape and strides are runtime values.
    return type(d), d.base.dtype, tuple(d.block_shape), getattr(d, "layout", None), d.padding


def _key(device: int, args, options: tuple) -> tuple:
    """What of the arguments the compiled kernel depends on, never coarser than Triton's view
    (an int through ==1, %16 and its width; a tensor through its dtype and alignment; a
    descriptor through its dtype, block shape and layout): every other argument's type and value,
    the launch options, the device. Tested with `type(a) is Tensor` first, because this runs every
    call (~5 µs for 32 args)."""
    Tensor = torch.Tensor
    spec = [(a.dtype, a.data_ptr() & 15) if type(a) is Tensor
            else _descriptor_spec(a) if type(a) in _DESCRIPTORS else (type(a), a) for a in args]
    return options, device, *spec


def _current_device() -> int:
    return torch.cuda.current_device()  # where Triton launches, whatever the arguments' device


def _current_stream(device: int) -> int:
    # What Triton's own launcher asks for; torch.cuda.current_stream() builds a Stream object.
    return torch._C._cuda_getCurrentRawStream(device)


def _disable() -> None:
    global enabled
    enabled = False


class FastLaunch:
    def __init__(self, kernel):
        self.kernel = kernel  # a @triton.jit (or Gluon) function
        self.compiled: dict = {}
        self.launches = {"jit": 0, "fast": 0}  # which path each call took, for the tests
        self._params: list[str] | None = None
        self._defaults: dict = {}

    def _signature_order(self, args: tuple, kwargs: dict) -> tuple[tuple, tuple]:
        """(every kernel argument in signature order, the launch options) of one call."""
        if not kwargs:
            return args, ()
        if self._params is None:
            sig = inspect.signature(self.kernel.fn).parameters
            self._params = list(sig)
            self._defaults = {n: p.default for n, p in sig.items() if p.default is not inspect.Parameter.empty}
        full = args + tuple(kwargs[n] if n in kwargs else self._defaults[n] for n in self._params[len(args):])
        params = self._params
        return full, tuple((k, v) for k, v in kwargs.items() if k not in params)

    def _jit(self, grid, args, kwargs):
        self.launches["jit"] += 1
        return self.kernel[grid](*args, **kwargs)

    def __call__(self, grid: tuple, *args, **kwargs):
        if not enabled or interpreting():
            self._jit(grid, args, kwargs)
            return
        full, options = self._signature_order(args, kwargs)
        device = _current_device()
        key = _key(device, full, options)
        compiled = self.compiled.get(key)
        if compiled is None:
            if len(self.compiled) > 4096:  # every distinct stride is a key: keep the table bounded
                self.compiled.clear()
            self.compiled[key] = self._jit(grid, args, kwargs)
            return
        stream = _current_stream(device)
        enter, leave = knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook
        # A profiler's hook wants the metadata; without one, skip building it (as Triton does).
        meta = compiled.launch_metadata(grid, stream, *full) if enter is not None else None
        g = (*grid, 1, 1)
        try:
            compiled.run(g[0], g[1], g[2], stream, compiled.function, compiled.packed_metadata, meta, enter, leave,
                         *full)
        except TypeError:  # a Triton whose launcher takes other arguments (checked on 3.6): its own path
            _disable()
            self._jit(grid, args, kwargs)
            return
        self.launches["fast"] += 1
