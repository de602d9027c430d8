"""Subject-side instrumentation for the triton-forward checks (runs in the untrusted subject).

The grader copies this file beside subject.py; the subject imports it when a request names
it and calls `call`. It rebuilds q, k and v from the values sent (with the layout asked
for and guard memory after each), runs the user's flash_attention with poisoned
allocations and Triton launches recorded, and returns the output as a plain array with
what it saw as plain data. It shares the process with the user's code, so everything it
reports is advice for honest users: the grader may fail a check on it, never pass one.
The values themselves are compared on the trusted side.

Standard library, numpy and torch only: nothing of drill is importable here.
"""

from __future__ import annotations

import math
import os
import sys

import numpy as np
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

# Every output element is a weighted mean of rows of v, so |o| <= max|v| (a few units here):
# this value can never be a real output, and it is exact in fp16, bf16 and fp32.
POISON = -32768.0
# Elements of guard memory after every input and output buffer: more than one block of rows
# (BLOCK_M <= 256 rows of D <= 128, times a head count), so a load or store that runs past S
# lands in the guard, not in someone else's memory (on the CPU that aborts the process).
GUARD = 1 << 17
_ALLOCATORS = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"}
# What a launcher may call on tensors: allocations, views, metadata, casts and copies. Every other
# torch operation called from the user's file is recorded as computing (softmax, matmul, a
# broadcast multiply and sum, a copy to NumPy, a Python number or a string, the address of the
# memory, ...): the work is the kernels'.
_LAUNCHER_OPS = _ALLOCATORS | {
    "zeros", "zeros_like", "new_zeros", "full", "full_like", "new_full", "ones", "ones_like", "new_ones",
    "tensor", "as_tensor", "arange",
    "__get__", "__set__", "dim", "ndimension", "size", "stride", "numel", "element_size", "is_contiguous",
    "storage_offset", "is_floating_point", "get_device", "__len__",
    "view", "view_as", "reshape", "transpose", "permute", "unsqueeze", "squeeze", "expand", "expand_as", "flatten",
    "unflatten", "as_strided", "narrow", "select", "t", "movedim", "__getitem__", "__setitem__",
    "contiguous", "to", "float", "half", "bfloat16", "type", "cuda", "cpu", "detach", "clone", "copy_",
    "fill_", "zero_", "requires_grad_", "__hash__",
}
# Attributes that hand out the memory itself (an address to read through ctypes, say; _cdata is
# the TensorImpl's, from which ctypes reaches the data).
_RAW_ATTRIBUTES = {"__cuda_array_interface__", "__dlpack__", "_cdata"}
# Module functions that hand out a tensor's memory (an address, a DLPack capsule NumPy can wrap)
# with no torch-function call to see: Watch swaps them during the call and counts a call from the
# user's file. A copy bound where Watch does not look (a default argument, say) goes unseen.
_RAW_FUNCTIONS = (("torch._C", "_data_address"), ("torch._C", "_storage_address"),
                  ("torch._C", "_tensor_impl_raw_handle"), ("torch._C", "_to_dlpack"),
                  ("torch._C", "_to_dlpack_versioned"), ("torch", "to_dlpack"), ("torch.utils.dlpack", "to_dlpack"))


def _on_host_memory(args, kwargs) -> bool:
    """Whether a tensor or storage among the arguments sits in memory torch did not allocate and
    cannot resize (torch.from_numpy, frombuffer, as_tensor or from_dlpack of an array): what the host
    reads back as a NumPy array or a buffer with no torch call at all. The probe's own inputs are
    all torch's, so whichever frame touches such memory, the user's file brought it in."""
    stack, seen = [*args, *(kwargs or {}).values()], 0
    while stack and seen < 64:
        item, seen = stack.pop(), seen + 1
        if isinstance(item, (list, tuple)):
            stack.extend(item)
            continue
        try:
            if isinstance(item, torch.Tensor):
                storage = item.untyped_storage()
            elif isinstance(item, torch.UntypedStorage):
                storage = item
            elif isinstance(item, torch.TypedStorage):
                storage = item.untyped()
            else:
                continue
            if not storage.resizable():
                return True
        except Exception:  # noqa: BLE001 - no storage to ask (a meta or sparse tensor)
            continue
    return False


def guarded(t: torch.Tensor, shape, stride, fill: float) -> torch.Tensor:
    """A tensor of t's values with the given strides, followed in memory by GUARD elements of `fill`."""
    span = 1 + sum((n - 1) * st for n, st in zip(shape, stride)) if t.numel() else 0
    buf = torch.full((span + GUARD,), fill, dtype=t.dtype, device=t.device)
    out = buf.as_strided(tuple(shape), tuple(stride))
    out.copy_(t)
    return out


def guard_of(t: torch.Tensor) -> torch.Tensor:
    span = 1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride())) if t.numel() else 0
    flat = t.as_strided((t.untyped_storage().nbytes() // t.element_size(),), (1,), 0)
    return flat[t.storage_offset() + span:]


def _triton_dir() -> str:
    try:
        import triton

        return os.path.dirname(triton.__file__)
    except ImportError:
        return "\0"  # no Triton: no frame is Triton's


_TRITON_DIR = _triton_dir()
_PROBES = os.path.dirname(os.path.abspath(__file__))  # where this file and the probes built on it sit


def _is_probe(filename: str) -> bool:
    """This file or a probe built on it (_*_probe.py beside it); the user's file may sit there too."""
    base = os.path.basename(filename)
    return base.startswith("_") and base.endswith("probe.py") and os.path.dirname(os.path.abspath(filename)) == _PROBES


# aten operations that compute (seen below torch's Python layer, where DisableTorchFunction does not reach).
_ATEN_COMPUTE = {"mm", "bmm", "addmm", "baddbmm", "addbmm", "matmul", "dot", "mv", "einsum", "tensordot",
                 "_softmax", "softmax", "_log_softmax", "log_softmax", "logsumexp", "exp", "exp_", "exp2", "expm1",
                 "log", "mul", "mul_", "div", "div_", "add", "add_", "sub", "sub_", "sum", "mean", "amax", "amin",
                 "max", "min", "where", "masked_fill", "masked_fill_", "pow", "sqrt", "rsqrt", "reciprocal",
                 "cumsum", "cumprod", "prod", "lerp", "addcmul", "addcdiv"}
_ATEN_COMPUTE_PREFIXES = ("_scaled_dot_product", "scaled_dot_product", "_flash_attention", "_efficient_attention")


def _users_doing(frame, entry, user_file: str = "") -> bool:
    """True unless the call came from Triton (a launch, the interpreter) or from the probe's own
    helpers: everything else run under the user's function is the user's doing, however it was
    called (a trampoline in functools, code compiled under another file name). A frame of the
    user's file met before any of Triton's (a kernel body the interpreter runs as Python, calling
    torch itself) is the user's doing too."""
    while frame is not None and frame.f_code is not entry:
        name = frame.f_code.co_filename
        if user_file and name == user_file:
            return True
        if name.startswith(_TRITON_DIR) or _is_probe(name):
            return False
        frame = frame.f_back
    return True


class PoisonAllocations(TorchFunctionMode):
    """Swap every uninitialised float tensor the user's file allocates for a poisoned, guarded one,
    and record the torch operations the file calls that a launcher has no use for (_LAUNCHER_OPS).

    torch.empty hands back whatever memory was free, which may hold an earlier answer;
    POISON makes rows the kernel never writes visible, and the guard after the buffer
    shows a store past its end. Every call made under the user's function counts unless it
    came from Triton or from the probe (see _users_doing). `Watch` adds what this mode
    cannot see.
    """

    def __init__(self, user_file: str):
        super().__init__()
        self.user_file = user_file
        self.made: list[torch.Tensor] = []
        self.computed: list[str] = []
        self.entry = None  # the code of the probe function that calls the user's

    def __enter__(self):
        self.entry = self.entry or sys._getframe(1).f_code
        return super().__enter__()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        mine = _users_doing(sys._getframe(1), self.entry, self.user_file)
        name = getattr(func, "__name__", "")
        if name == "__get__" and getattr(getattr(func, "__self__", None), "__name__", "") in _RAW_ATTRIBUTES:
            name = func.__self__.__name__
        if mine and name not in _LAUNCHER_OPS and len(self.computed) < 20:
            self.computed.append(name)
        elif len(self.computed) < 20 and _on_host_memory(args, kwargs):
            # from_numpy shows up only as the lift_fresh that the dispatch mode below passes on.
            label = {"lift_fresh": "from_numpy"}.get(name.split(".")[0], name.split(".")[0]) + " on NumPy memory"
            if label not in self.computed:
                self.computed.append(label)
        result = func(*args, **(kwargs or {}))
        if (mine and name in _ALLOCATORS and type(result) is torch.Tensor and result.is_floating_point()
                and not result.requires_grad):
            result = guarded(result.fill_(POISON), result.shape, result.stride(), POISON)
            self.made.append(result)
        return result

    def overran(self) -> bool:
        return any(bool((guard_of(t) != POISON).any()) for t in self.made)


class _ComputeBelow(TorchDispatchMode):
    """The aten operations that compute, as the dispatcher runs them: torch._C.DisableTorchFunction
    turns the torch-function mode off, not this one."""

    def __init__(self, owner: "Watch"):
        super().__init__()
        self.owner = owner

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(getattr(func, "__name__", func)).split(".")[0]
        if ((name in _ATEN_COMPUTE or name.startswith(_ATEN_COMPUTE_PREFIXES))
                and _users_doing(sys._getframe(1), self.owner.poison.entry, self.owner.poison.user_file)):
            self.owner.note(f"aten.{name}")
        return func(*args, **(kwargs or {}))


class Watch:
    """PoisonAllocations, the aten operations below it, and any thread started during the call
    (modes are per thread): everything the user's launcher computes beside its kernels."""

    def __init__(self, user_file: str):
        self.poison = PoisonAllocations(user_file)
        self.below = _ComputeBelow(self)
        self.computed = self.poison.computed
        self._start = None
        self._swapped: list = []

    def note(self, name: str) -> None:
        if len(self.computed) < 20:
            self.computed.append(name)

    def overran(self) -> bool:
        return self.poison.overran()

    def __enter__(self):
        import threading

        self.poison.entry = sys._getframe(1).f_code
        self._start, watch = threading.Thread.start, self

        def start(thread, *args, **kwargs):
            watch.note("a thread")
            return watch._start(thread, *args, **kwargs)

        threading.Thread.start = start
        self._swap_raw_functions()
        self.below.__enter__()
        self.poison.__enter__()
        return self

    def __exit__(self, *exc):
        import threading

        self.poison.__exit__(*exc)
        self.below.__exit__(*exc)
        threading.Thread.start = self._start
        for owner, name, original in reversed(self._swapped):
            if isinstance(owner, dict):  # the user's module's globals
                owner[name] = original
            else:
                setattr(owner, name, original)
        self._swapped = []

    def _swap_raw_functions(self) -> None:
        """Count the user's calls of _RAW_FUNCTIONS: swapped in their modules and wherever the user's
        module bound them by name (from torch._C import _data_address)."""
        self._swapped, watch, wrapped = [], self, {}
        for module_name, name in _RAW_FUNCTIONS:
            module = sys.modules.get(module_name)
            original = getattr(module, name, None)
            if not callable(original):
                continue

            def raw(*args, _original=original, _name=name, **kwargs):
                if (_name not in watch.computed
                        and _users_doing(sys._getframe(1), watch.poison.entry, watch.poison.user_file)):
                    watch.note(_name)
                return _original(*args, **kwargs)

            wrapped[id(original)] = (original, raw)
            self._swapped.append((module, name, original))
            setattr(module, name, raw)
        for module in list(sys.modules.values()):
            if getattr(module, "__file__", None) != self.poison.user_file:
                continue
            names = vars(module)
            for name, value in list(names.items()):
                if id(value) in wrapped and wrapped[id(value)][0] is value:
                    self._swapped.append((names, name, value))
                    names[name] = wrapped[id(value)][1]


def _kernel_classes() -> list:
    classes = []
    try:
        from triton.runtime.jit import JITFunction

        classes.append(JITFunction)
    except ImportError:
        pass
    try:
        from triton.runtime.interpreter import InterpretedFunction

        classes.append(InterpretedFunction)
    except ImportError:
        pass
    return classes


class Launches:
    """Records every Triton kernel launch (kernel name, whether from the user's file, grid, int constants)."""

    def __init__(self, user_file: str):
        self.user_file = user_file
        self.seen: list[dict] = []
        self.patched: list = []

    def __enter__(self):
        # `run` as the class resolves it (through its bases too), installed on the class itself:
        # moving `run` to a base class is still watched. Whatever else dodges the hook (an
        # instance attribute, another launch path) records no launch, and no launch fails.
        for cls in _kernel_classes():
            original = getattr(cls, "run", None)
            if callable(original):
                own = "run" in cls.__dict__
                cls.run = self._wrap(original)
                self.patched.append((cls, original, own))
        return self

    def __exit__(self, *exc):
        for cls, original, own in self.patched:
            if own:
                cls.run = original
            else:
                del cls.run

    def _wrap(self, original):
        seen, user_file = self.seen, self.user_file

        def run(this, *args, **kwargs):
            if not kwargs.get("warmup", False) and not _autotune_trial(sys._getframe(1)):
                fn = getattr(this, "fn", None)
                code = getattr(fn, "__code__", None)
                constants = {k: v for k, v in kwargs.items()
                             if type(v) in (int, bool) and k != "warmup" and isinstance(k, str)}
                filename = code.co_filename if code else ""
                seen.append({"kernel": str(getattr(fn, "__name__", "?")), "mine": filename == user_file,
                             "file": os.path.basename(filename), "grid": _grid(kwargs.get("grid"), constants),
                             "constants": constants})
            return original(this, *args, **kwargs)

        return run


def _autotune_trial(frame) -> bool:
    """A launch triton.autotune makes to time one config (its final launch with the best one is
    recorded as usual): an autotuned kernel is then one launch per call, as a plain one is."""
    while frame is not None:
        code = frame.f_code
        if code.co_name in ("kernel_call", "_bench") and code.co_filename.startswith(_TRITON_DIR):
            return True
        frame = frame.f_back
    return False


def _grid(grid, constants: dict):
    try:
        if callable(grid):
            grid = grid(dict(constants))
        return [int(g) for g in grid]
    except Exception:  # a grid that cannot be evaluated here: the launch check then looks at less
        return None


def _as_array(t: torch.Tensor) -> np.ndarray:
    t = t.detach()
    if t.dtype in (torch.float16, torch.bfloat16):
        t = t.float()  # exact: every half and bf16 value is a float32 value
    else:
        # A copy: .numpy() marks a storage not resizable, which _on_host_memory would then blame
        # on the user's file when a later launch (decode's Copying calls this mid-call) touches it.
        t = t.clone()
    return t.cpu().numpy()


def scrub(arrays) -> None:
    """NaN over the request's float arrays once the inputs are built from them: the user's code can
    reach them (the caller's frame, gc) and read q, k and v there with no torch call at all."""
    for array in arrays:
        if isinstance(array, np.ndarray) and array.dtype.kind == "f" and array.flags.writeable:
            array.fill(np.nan)


def call(fn, args, kwargs, spec: dict, user_file: str):
    """Run fn on q, k, v rebuilt from `args` as `spec` says; returns a dict of plain values."""
    dtype = getattr(torch, str(spec["dtype"]))
    device = str(spec["device"])
    tensors = []
    for array, layout in zip(args, spec["tensors"]):
        if layout.get("keep_dtype"):  # integer inputs (seq_lens) keep theirs, with no guard
            # A copy: an input on NumPy's memory would read as the user's (_on_host_memory).
            tensors.append(torch.from_numpy(np.ascontiguousarray(array)).to(device=device, copy=True))
            continue
        values = torch.from_numpy(np.ascontiguousarray(array)).to(device=device, dtype=dtype)
        fill = math.nan if layout.get("guard") == "nan" else float(layout.get("guard", 0.0))
        tensors.append(guarded(values, values.shape, layout["stride"], fill))
    values = None
    scrub(args[:len(tensors)])
    poison = Watch(user_file)
    with Launches(user_file) as launches, poison:
        out = fn(*tensors, *args[len(tensors):], **kwargs)
    plain = type(out) is torch.Tensor  # a subclass's methods could say anything: it does not cross
    observed = {
        "type": type(out).__name__, "plain": plain, "overran": poison.overran(),
        "launches": launches.seen, "watching": bool(launches.patched), "torch_compute": poison.computed,
    }
    result = None
    if plain:
        observed.update(shape=list(out.shape), dtype=str(out.dtype).removeprefix("torch."), device=str(out.device))
        storage = out.untyped_storage().data_ptr()
        observed["shares"] = [name for name, t in zip("qkv", tensors) if t.untyped_storage().data_ptr() == storage]
        result = _as_array(out)
    value = {"result": result, "observed": observed}
    if spec.get("return_inputs"):
        value["inputs"] = [_as_array(t) for t in tensors]
    return value


def seeded_inputs(shape, dtype: torch.dtype, seed: int, device: str):
    """q, k, v drawn on the device from `seed`; the grader draws the same ones to check the output."""
    gen = torch.Generator(device=device).manual_seed(int(seed))
    return tuple(torch.randn(tuple(shape), generator=gen, device=device, dtype=torch.float32).to(dtype)
                 for _ in range(3))


def seeded(fn, args, kwargs, spec: dict, user_file: str):
    """One timed call (GPU): inputs drawn here from the seed in the request, the output sent back as bits.

    The grader times the whole round trip and checks every output. Values sent with the request (`args`, e.g.
    causal and sm_scale for `drill bench`) follow q, k and v.
    """
    q, k, v = seeded_inputs(spec["shape"], getattr(torch, str(spec["dtype"])), spec["seed"], str(spec["device"]))
    return packed(fn(q, k, v, *args, **kwargs))


def packed(out) -> dict:
    """A timed call's reply: what the output is, and its half-precision bits as int16 (exact, half
    the bytes of float32); anything else sends no values, and the grader fails it on `observed`."""
    plain = type(out) is torch.Tensor
    observed = {"type": type(out).__name__, "plain": plain}
    result = None
    if plain:
        observed.update(shape=list(out.shape), dtype=str(out.dtype).removeprefix("torch."), device=str(out.device))
        if out.dtype in (torch.float16, torch.bfloat16):
            result = out.detach().contiguous().view(torch.int16).cpu().numpy()
    return {"result": result, "observed": observed}

