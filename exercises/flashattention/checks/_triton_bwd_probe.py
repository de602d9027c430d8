"""Subject-side instrumentation for the triton-backward checks (runs in the untrusted subject).

The grader copies this file, and 07's _triton_probe.py it builds on, beside subject.py.
`call` rebuilds q, k, v, o, lse and do from the values sent (each with the strides asked
for and NaN in the memory after it), runs the user's flash_attention_backward with poisoned
allocations and Triton launches recorded, and returns dq, dk, dv as plain arrays with what
it saw. `seeded` is one timed call on the GPU: inputs drawn here from the request's seed.
Everything reported here is advice: the grader may fail a check on it, never pass one.

Standard library, numpy and torch only: nothing of drill is importable here. The trusted
side imports `seeded_inputs` from this file, so both sides draw alike.
"""

from __future__ import annotations

import math

import numpy as np
import torch

try:  # in the subject: copied beside this file
    from _triton_probe import GUARD, Launches, Watch, _as_array, _grid, _kernel_classes, guarded, scrub
except ImportError:  # on the trusted side, which imports seeded_inputs from here
    from ._triton_probe import GUARD, Launches, Watch, _as_array, _grid, _kernel_classes, guarded, scrub


class Footprint:
    """What the kernels hold and keep: the largest block any program builds (under the Triton
    interpreter, where every block is a NumPy array in a TensorHandle), the memory of every
    tensor handed to a kernel launch, so the grader can tell blocks from whole S×S score matrices,
    and (interpreter only) every address a kernel stores to, so that memory no count sees (the
    inputs' own storage, the guard after each input and after each poisoned allocation) cannot
    hold scores either: a store there is reported even if the old values are put back later."""

    def __init__(self):
        self.largest_block = 0  # elements of the largest block seen; stays 0 when not interpreting
        self.blocks_watched = False
        self.storages: dict[int, int] = {}  # storage address -> bytes, for every tensor a kernel got
        self.stores: list = []  # (first byte, last byte + 1) arrays of every store, under the interpreter
        self.stores_watched = False
        self._patched: list = []
        self._handle = None
        self._builder = None
        # Under the interpreter, one record per launch whose programs called tl.dot (the kernels
        # that build score blocks): its program count from the grid, and the dot work (M·N·K of
        # every tl.dot, K·N per row of the left operand) of each program, told apart by the
        # interpreter's grid index. The grid alone says nothing of which programs work: one
        # program per head walking the whole sequence beside idle (or decoy) programs shows up
        # as one program holding a whole head's share of the work.
        self.dot_launches: list = []
        self._current = None

    def __enter__(self):
        try:
            from triton.runtime.interpreter import TensorHandle
        except ImportError:
            TensorHandle = None
        if TensorHandle is not None and hasattr(TensorHandle, "__post_init__"):
            check, footprint = TensorHandle.__post_init__, self

            def post_init(handle):
                size = getattr(getattr(handle, "data", None), "size", 0)
                if isinstance(size, int) and size > footprint.largest_block:
                    footprint.largest_block = size
                return check(handle)

            TensorHandle.__post_init__ = post_init
            self._handle = (TensorHandle, check)
            self.blocks_watched = True
        self._watch_stores()
        for cls in _kernel_classes():
            original = getattr(cls, "run", None)
            if callable(original):
                own = "run" in cls.__dict__
                cls.run = self._wrap(original)
                self._patched.append((cls, original, own))
        return self

    def _watch_stores(self):
        try:
            from triton.runtime.interpreter import InterpreterBuilder
        except ImportError:
            return
        stores, saved = self.stores, {}

        def note(ptrs, value, mask):
            addr = np.asarray(getattr(ptrs, "data", ptrs)).reshape(-1).astype(np.int64)
            data = getattr(value, "data", None)
            size = int(getattr(getattr(data, "dtype", None), "itemsize", 0) or 8)
            if mask is not None:
                keep = np.broadcast_to(np.asarray(getattr(mask, "data", mask)), np.shape(getattr(ptrs, "data", ptrs)))
                addr = addr[keep.reshape(-1).astype(bool)]
            if addr.size:
                stores.append((addr, size))

        def wrap(name, pick):
            original = getattr(InterpreterBuilder, name, None)
            if not callable(original):
                return False
            saved[name] = original

            def hooked(builder, *args, **kwargs):
                try:
                    note(*pick(*args))
                except Exception:  # noqa: BLE001 - an unexpected form: the op still runs, unrecorded
                    footprint.stores_watched = False
                return original(builder, *args, **kwargs)

            setattr(InterpreterBuilder, name, hooked)
            return True

        footprint = self
        dot = getattr(InterpreterBuilder, "create_dot", None)
        if callable(dot):
            saved["create_dot"] = dot

            def hooked(builder, *args, **kwargs):
                current = footprint._current
                if current is not None:
                    current["dot"] = True
                    where, work = _program_index(builder), _dot_work(args, kwargs)
                    if where is None or work is None:  # fails closed: work that cannot be placed
                        current["unplaced"] = True
                    else:
                        current["work"][where] = current["work"].get(where, 0) + work
                return dot(builder, *args, **kwargs)

            InterpreterBuilder.create_dot = hooked
        ok = wrap("create_masked_store", lambda ptrs, value, mask, *_: (ptrs, value, mask))
        ok = wrap("create_store", lambda ptr, value, *_: (ptr, value, None)) and ok
        ok = wrap("create_atomic_rmw", lambda op, ptr, val, mask, *_: (ptr, val, mask)) and ok
        ok = wrap("create_atomic_cas", lambda ptr, cmp, val, *_: (ptr, val, None)) and ok
        self._builder = (InterpreterBuilder, saved)
        self.stores_watched = ok

    def stores_outside(self, inputs, made, names) -> list[str] | None:
        """What the kernels stored into that is neither an output nor scratch the count sees: an
        input's memory (its elements or the guard after it) or the guard after an allocation of
        the user's. None when stores could not be watched (no interpreter, or patched)."""
        if not self.stores_watched:
            return None
        regions = []
        for name, t in zip(names, inputs):
            st = t.untyped_storage()
            regions.append((st.data_ptr(), st.data_ptr() + st.nbytes(), f"the memory of the input {name}"))
        for t in made:
            st = t.untyped_storage()
            end = st.data_ptr() + st.nbytes()
            regions.append((end - GUARD * t.element_size(), end, "the guard memory after a buffer you allocated"))
        hits = []
        for lo, hi, what in regions:
            for addr, size in self.stores:
                if bool(((addr + size > lo) & (addr < hi)).any()):
                    hits.append(what)
                    break
        return sorted(set(hits))

    def __exit__(self, *exc):
        if self._builder is not None:
            cls, saved = self._builder
            for name, original in saved.items():
                if getattr(getattr(cls, name), "__name__", "") != "hooked":
                    self.stores_watched = False
                setattr(cls, name, original)
        if self._handle is not None:
            cls, original = self._handle
            self.blocks_watched = self.blocks_watched and getattr(cls.__post_init__, "__name__", "") == "post_init"
            cls.__post_init__ = original
        for cls, original, own in self._patched:
            if own:
                cls.run = original
            else:
                del cls.run

    def _wrap(self, original):
        storages = self.storages

        footprint = self

        def run(this, *args, **kwargs):
            if not kwargs.get("warmup", False):
                for a in list(args) + list(kwargs.values()):
                    if type(a) is torch.Tensor:
                        st = a.untyped_storage()
                        storages[st.data_ptr()] = st.nbytes()
            # A grid lambda is called with the launch's int constants, as the launch record does, and
            # the grid it gives is the one launched: a lambda cannot show one grid here and run another.
            grid = kwargs.get("grid")
            if callable(grid):
                resolved = _grid(grid, {k: v for k, v in kwargs.items()
                                        if type(v) in (int, bool) and k != "warmup" and isinstance(k, str)})
                if resolved is not None:
                    grid = kwargs["grid"] = tuple(resolved)
            programs = None
            if isinstance(grid, (tuple, list)) and all(isinstance(g, int) for g in grid):
                programs = math.prod(grid)
            outer = footprint._current
            footprint._current = {"programs": programs, "dot": False, "work": {}, "unplaced": False}
            try:
                return original(this, *args, **kwargs)
            finally:
                seen = footprint._current
                if seen["dot"]:
                    work = list(seen["work"].values())
                    placed = not seen["unplaced"] and bool(work)
                    footprint.dot_launches.append({
                        "programs": programs, "working": len(work),
                        "total": sum(work) if placed else None, "largest": max(work) if placed else None})
                footprint._current = outer

        return run

    def scratch_bytes(self, inputs, outputs, made) -> int:
        """Bytes of the memory handed to kernels besides the inputs and the outputs' own elements
        (the guard after a poisoned allocation left out): an output that is a view into a larger
        buffer counts the rest of that buffer."""
        inputs_at = {t.untyped_storage().data_ptr() for t in inputs}
        guarded_made = {t.untyped_storage().data_ptr(): GUARD * t.element_size() for t in made}
        total = sum(max(0, nbytes - guarded_made.get(ptr, 0)) for ptr, nbytes in self.storages.items()
                    if ptr not in inputs_at)
        seen = set()
        for t in outputs:
            key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), tuple(t.stride()))
            if key[0] in self.storages and key[0] not in inputs_at and key not in seen:
                seen.add(key)
                total -= t.numel() * t.element_size()
        return max(0, total)


def _program_index(builder):
    """The interpreter's grid index of the program running now, (x, y, z) ints; None when this
    triton's builder does not keep one as expected (then no work can be told apart)."""
    where = getattr(builder, "grid_idx", None)
    if type(where) is tuple and len(where) == 3 and all(type(i) is int and i >= 0 for i in where):
        return where
    if type(where) in (tuple, list) and len(where) == 3:
        try:
            where = tuple(int(i) for i in where)
        except (TypeError, ValueError):
            return None
        return where if all(i >= 0 for i in where) else None
    return None


def _dot_work(args, kwargs):
    """M·N·K of one tl.dot under the interpreter (batch dimensions multiplied in), from the shapes
    of its two operands' NumPy arrays; None for any form not understood."""
    a = args[0] if len(args) > 0 else kwargs.get("a", kwargs.get("lhs"))
    b = args[1] if len(args) > 1 else kwargs.get("b", kwargs.get("rhs"))
    shape_a = getattr(getattr(a, "data", None), "shape", None)
    shape_b = getattr(getattr(b, "data", None), "shape", None)
    if not isinstance(shape_a, tuple) or not isinstance(shape_b, tuple) or len(shape_a) < 2 or len(shape_b) < 2:
        return None
    if shape_a[-1] != shape_b[-2]:
        return None
    return int(math.prod(shape_a)) * int(shape_b[-1])


def call(fn, args, kwargs, spec: dict, user_file: str):
    """Run fn(q, k, v, o, lse, do, ...) on tensors rebuilt as `spec` says; returns plain values."""
    dtype = getattr(torch, str(spec["dtype"]))
    device = str(spec["device"])
    tensors = []
    for array, layout in zip(args, spec["tensors"]):
        t_dtype = torch.float32 if layout.get("fp32") else dtype
        values = torch.from_numpy(np.ascontiguousarray(array)).to(device=device, dtype=t_dtype)
        fill = math.nan if layout.get("guard", "nan") == "nan" else float(layout["guard"])
        tensors.append(guarded(values, values.shape, layout["stride"], fill))
    values = None
    scrub(args[:len(tensors)])
    poison = Watch(user_file)
    footprint = Footprint()
    with Launches(user_file) as launches, footprint, poison:
        out = fn(*tensors, *args[len(tensors):], **kwargs)
    observed = {"type": type(out).__name__, "overran": poison.overran(), "launches": launches.seen,
                "watching": bool(launches.patched), "torch_compute": poison.computed,
                "largest_block": footprint.largest_block if footprint.blocks_watched else None}
    outs = [t for t in out if type(t) is torch.Tensor] if type(out) in (tuple, list) else []
    observed["scratch_bytes"] = footprint.scratch_bytes(tensors, outs, poison.poison.made)
    observed["dot_launches"] = footprint.dot_launches if footprint.stores_watched else None
    observed["stores_outside"] = footprint.stores_outside(tensors, poison.poison.made,
                                                          ("q", "k", "v", "o", "lse", "do"))
    result = None
    if type(out) in (tuple, list) and len(out) == 3 and all(type(t) is torch.Tensor for t in out):
        observed["parts"] = [{"shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch."),
                              "device": str(t.device)} for t in out]
        storages = {t.untyped_storage().data_ptr() for t in tensors}
        observed["shares"] = [name for name, t in zip(("dq", "dk", "dv"), out)
                              if t.untyped_storage().data_ptr() in storages]
        result = [_as_array(t) for t in out]
    elif type(out) in (tuple, list):
        observed["parts"] = [type(t).__name__ for t in out][:6]
    value = {"result": result, "observed": observed}
    if spec.get("return_inputs"):
        value["inputs"] = [_as_array(t) for t in tensors]
    return value


# --------------------------------------------------------------------------- timed calls (GPU)


def forward(q, k, v, causal: bool):
    """o and lse (natural log, fp32 [B, H, S]) for the timed calls: PyTorch's FlashAttention-2
    forward, or plain torch in query chunks where that operator is missing. Deterministic, so the
    grader, calling this same function on the same inputs, gets the same o and lse."""
    try:
        out = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, bool(causal), False)
        o, lse = out[0], out[1]
        if o.shape == q.shape and tuple(lse.shape) == tuple(q.shape[:3]) and _lse_agrees(q, k, lse, causal):
            return o, lse.float().contiguous()
    except Exception:  # noqa: BLE001 - not available for this build or GPU: the plain path below
        pass
    S, D = q.shape[2], q.shape[3]
    o = torch.empty_like(q)
    lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
    for lo in range(0, S, 2048):
        s = (q[:, :, lo:lo + 2048].float() @ k.float().transpose(-1, -2)) / math.sqrt(D)
        if causal:
            rows = torch.arange(lo, min(lo + 2048, S), device=q.device)
            s = s.masked_fill(torch.arange(S, device=q.device)[None, :] > rows[:, None], -math.inf)
        lse[:, :, lo:lo + 2048] = torch.logsumexp(s, -1)
        o[:, :, lo:lo + 2048] = (torch.softmax(s, -1) @ v.float()).to(q.dtype)
    return o, lse


def _lse_agrees(q, k, lse, causal: bool) -> bool:
    """Whether the operator's lse is the natural-log logsumexp we expect, on the first rows."""
    n, D = min(64, q.shape[2]), q.shape[3]
    s = (q[:, :, :n].float() @ k.float().transpose(-1, -2)) / math.sqrt(D)
    if causal:
        s = s.masked_fill(torch.arange(q.shape[2], device=q.device)[None, :] > torch.arange(n, device=q.device)[:, None],
                          -math.inf)
    return bool(((torch.logsumexp(s, -1) - lse[:, :, :n].float()).abs() < 1e-2).all())


def seeded_inputs(shape, dtype: torch.dtype, seed: int, device: str, causal: bool):
    """q, k, v, o, lse, do for one timed call, drawn from `seed`."""
    gen = torch.Generator(device=device).manual_seed(int(seed))
    q, k, v, do = (torch.randn(tuple(shape), generator=gen, device=device, dtype=torch.float32).to(dtype)
                   for _ in range(4))
    o, lse = forward(q, k, v, causal)
    return q, k, v, o, lse, do


def seeded(fn, args, kwargs, spec: dict, user_file: str):
    """One timed call: inputs drawn here from the seed, (dq, dk, dv) sent back as int16 bits."""
    dtype = getattr(torch, str(spec["dtype"]))
    q, k, v, o, lse, do = seeded_inputs(spec["shape"], dtype, spec["seed"], str(spec["device"]), bool(spec["causal"]))
    out = fn(q, k, v, o, lse, do, *args, **kwargs)
    observed = {"type": type(out).__name__}
    result = None
    if type(out) in (tuple, list) and len(out) == 3 and all(type(t) is torch.Tensor for t in out):
        observed["parts"] = [{"shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch."),
                              "device": str(t.device)} for t in out]
        if all(t.dtype == dtype and t.shape == q.shape for t in out):
            result = [t.detach().contiguous().view(torch.int16).cpu().numpy() for t in out]
    return {"result": result, "observed": observed}
