"""Compile every kernel launch of a Triton exercise file for sm_90 on a machine without a GPU.

    TRITON_INTERPRET=0 python tests/triton_sm90_compile.py FILE ENTRY

The interpreter runs kernels that the GPU compiler refuses (a bf16 tile times an fp32 one, say),
so a file can pass every CPU check and fail on every GPU. Here FILE's ENTRY is called on CPU
tensors that say they are on a GPU (so its launcher takes its GPU branch: GPU tile sizes, warps,
stages); each launch is recorded instead of run, then compiled for sm_90 with the arguments' types
and the launch's constexprs and options. Prints one JSON line per distinct kernel specialisation:
{"kernel", "case", "ok", "error"}. tests/test_triton_sm90_compile.py runs it.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import sys
from types import SimpleNamespace

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.runtime.jit import JITFunction

TYPES = {torch.float16: "*fp16", torch.bfloat16: "*bf16", torch.float32: "*fp32", torch.int32: "*i32",
         torch.int64: "*i64", torch.int8: "*i8", torch.uint8: "*u8", torch.bool: "*i1"}
OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")


class OnGpu(torch.Tensor):
    """A CPU tensor that answers is_cuda = True: only the launcher's branch reads it."""

    @property
    def is_cuda(self):
        return True


def _arg_type(value) -> str:
    if isinstance(value, torch.Tensor):
        return TYPES[value.dtype]
    if isinstance(value, bool):
        return "i1"
    if isinstance(value, int):
        return "i32" if -2**31 <= value < 2**31 else "i64"
    if isinstance(value, float):
        return "fp32"
    raise TypeError(f"no Triton type for {type(value).__name__}")


def record_launches(module, entry: str, args: tuple, kwargs: dict) -> list[tuple]:
    launches = []

    def run(self, *a, grid, warmup, **kw):
        launches.append((self, a, kw))

    saved_run, saved_props = JITFunction.run, torch.cuda.get_device_properties
    JITFunction.run = run
    torch.cuda.get_device_properties = lambda *_: SimpleNamespace(multi_processor_count=132, name="sm_90 (compile only)")
    try:
        getattr(module, entry)(*args, **kwargs)
    finally:
        JITFunction.run, torch.cuda.get_device_properties = saved_run, saved_props
    return launches


def compile_launch(fn: JITFunction, args: tuple, kwargs: dict) -> None:
    options = {k: kwargs.pop(k) for k in OPTIONS if k in kwargs}
    names = [p.name for p in fn.params]
    defaults = {n: q.default for n, q in inspect.signature(fn.fn).parameters.items()
                if q.default is not inspect.Parameter.empty}
    values = defaults | dict(zip(names, args)) | kwargs
    constexprs = {p.name: values[p.name] for p in fn.params if p.is_constexpr and p.name in values}
    signature = {n: "constexpr" if n in constexprs else _arg_type(values[n]) for n in names}
    triton.compile(ASTSource(fn, signature, constexprs), target=GPUTarget("cuda", 90, 32), options=options)


def cases(entry: str):
    """(label, args, kwargs) of the entry's calls: fp16 and bf16, head dims 64 and 128."""
    g = torch.Generator().manual_seed(0)
    for dtype in (torch.float16, torch.bfloat16):
        for d in (64, 128):
            def t(*shape):
                return torch.randn(*shape, generator=g).to(dtype).as_subclass(OnGpu)

            name = f"{str(dtype).removeprefix('torch.')} D={d}"
            if entry == "flash_decode":
                seq_lens = torch.tensor([300, 77], dtype=torch.int32).as_subclass(OnGpu)
                yield name, (t(2, 8, d), t(2, 2, 320, d), t(2, 2, 320, d), seq_lens), {}
            elif entry == "flash_attention_backward":
                lse = torch.randn(1, 2, 300, generator=g).float().as_subclass(OnGpu)
                for causal in (False, True):
                    yield f"{name} causal={causal}", (t(1, 2, 300, d), t(1, 2, 300, d), t(1, 2, 300, d),
                                                     t(1, 2, 300, d), lse, t(1, 2, 300, d)), {"causal": causal}
            else:
                for causal in (False, True):
                    yield f"{name} causal={causal}", (t(1, 2, 300, d), t(1, 2, 300, d), t(1, 2, 300, d)), {"causal": causal}


def main(path: str, entry: str) -> None:
    spec = importlib.util.spec_from_file_location("triton_file_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    seen = set()
    for label, args, kwargs in cases(entry):
        for fn, a, kw in record_launches(module, entry, args, kwargs):
            key = (fn.__name__, tuple(map(_arg_type_or_repr, a)), repr(sorted(kw.items())))
            if key in seen:
                continue
            seen.add(key)
            try:
                compile_launch(fn, a, dict(kw))
                print(json.dumps({"kernel": fn.__name__, "case": label, "ok": True}), flush=True)
            except Exception as exc:  # noqa: BLE001 - the error is the finding
                text = " | ".join(line for line in str(exc).splitlines()[-3:] if line.strip())
                cause = exc.__cause__
                while cause is not None and cause.__cause__ is not None:
                    cause = cause.__cause__
                print(json.dumps({"kernel": fn.__name__, "case": label, "ok": False,
                                  "error": f"{type(exc).__name__}: {text}" + (f" <- {cause}" if cause else "")}),
                      flush=True)


def _arg_type_or_repr(value) -> str:
    return _arg_type(value) if isinstance(value, (torch.Tensor, bool, int, float)) else repr(value)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
