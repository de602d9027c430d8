"""Compile the Triton FlashAttention kernels for sm_90 on a machine without a GPU and print fingerprints.

    python tests/kernel_compile.py kernels/triton_fa2.py [fwd,bwd_q,bwd_kv | fused][,window][,varlen] > new.txt
    git show main:kernels/triton_fa2.py > /tmp/old.py && python tests/kernel_compile.py /tmp/old.py > old.txt

Per kernel variant (head dim, causal, tile MODE, forward PREFETCH/POLY, one-pass DQ_MODE): a
hash of the TTGIR with value names and order ignored ("ttgir"), the PTX instruction count,
hashes of the PTX as a multiset and exactly, and the shared memory. Equal "ttgir" hashes
between two versions of the file mean the compiler was handed the same work: the way to show a
refactor changed no kernel. Uses whatever Triton is installed (a Triton 3.6 wheel in a side
virtual environment gives the device's compiler). DUMP=dir keeps the PTX and TTGIR.
compile_gluon_forward compiles gluon_fwd's Gluon forward (bf16 or FP8) as the tests need it.
The file to check is loaded as a module of the package (drill.kernels), so its relative imports
resolve.
"""

from __future__ import annotations

import hashlib
import importlib.util
import itertools
import os
import re
import sys
from pathlib import Path

FLOAT32_ARGS = ("LSE", "LSE2", "DELTA", "DLSE", "DQACC")
TENSOR_ARGS = ("Q", "K", "V", "O", "DO", "DQ", "DK", "DV")
TILE_ROLES = {"fwd": {"Q": "M", "K": "N", "V": "N", "O": "M"},
              "bwd_q": {"Q": "M", "K": "N", "V": "N", "DO": "M", "DQ": "M"},
              "bwd_kv": {"Q": "M", "K": "N", "V": "N", "DO": "M", "DK": "N", "DV": "N"}}


def signature(fn, consts: dict, descriptors: dict, block_m: int, block_n: int, d: int) -> dict:
    """Triton's type string for every argument of fn (descriptors: argument -> "M" or "N" rows)."""
    sig = {}
    for name in fn.arg_names:
        if name in consts:
            sig[name] = "constexpr"
        elif name in descriptors:
            sig[name] = f"tensordesc<bf16[{block_m if descriptors[name] == 'M' else block_n}, {d}]>"
        elif name in FLOAT32_ARGS:
            sig[name] = "*fp32"
        elif name in ("CNT", "CU_Q", "CU_K"):
            sig[name] = "*i32"
        elif name in TENSOR_ARGS:
            sig[name] = "*bf16"
        elif name in ("qk_scale", "sm_scale"):
            sig[name] = "fp32"
        else:
            sig[name] = "i32"
    return sig


def plain_ptx(ptx: str) -> str:
    """PTX without debug lines, comments, label numbers or kernel names: what the compiler chose."""
    ptx = re.sub(r"^\s*\.(loc|file).*$", "", ptx, flags=re.M)
    ptx = re.sub(r"\.section\s+\.debug.*", "", ptx, flags=re.S)
    ptx = re.sub(r"\$L__\w+", "L", ptx)
    ptx = re.sub(r"_(fwd|bwd)\w*kernel", "K", ptx)
    ptx = re.sub(r"//.*$", "", ptx, flags=re.M)
    return "\n".join(line for line in ptx.splitlines() if line.strip())


def fingerprint(kernel) -> str:
    ptx = plain_ptx(kernel.asm["ptx"])
    multiset = sorted(re.sub(r"%(r|rd|p|f|fd|rs|h|hh)\d+", "%R", re.sub(r"\[K_param_\d+\]", "[P]", line)).strip()
                      for line in ptx.splitlines())
    ttgir = [line for line in kernel.asm["ttgir"].splitlines()
             if not line.lstrip().startswith("#loc") and "loc(" not in line.split("=")[0]]
    ttgir = sorted(re.sub(r"%[A-Za-z_]\w*|%\d+(_\d+)?|%arg\d+", "%V", re.sub(r"loc\([^)]*\)", "", line)).strip()
                   for line in ttgir)
    instructions = sum(1 for line in ptx.splitlines() if line.strip() and not line.strip().endswith(":"))

    def short(text: str) -> str:
        return hashlib.sha1(text.encode()).hexdigest()[:12]

    return (f"ttgir {short(chr(10).join(ttgir))} ptx-instr {instructions} multiset {short(chr(10).join(multiset))} "
            f"exact {short(ptx)} shared={kernel.metadata.shared}")


def cases(mod, only):
    masking = ["plain"] + [m for m in ("window", "varlen") if only and m in only]
    for d, causal, mode, mask in itertools.product((64, 128), (False, True), (0, 1, 2), masking):
        base = dict(D=d, CAUSAL=causal, MODE=mode, PREC="tf32")
        if "WINDOW" in mod._fwd_kernel.arg_names:  # the window and varlen constexprs: off but where asked
            if (mask == "window" and causal) or (mask == "varlen" and mode == 2):
                continue  # a window folds causal into its right edge; packed tiles are never host descriptors
            base.update(WINDOW=mask == "window", VARLEN=mask == "varlen")
        if not only or "fwd" in only:
            for prefetch, poly in ((False, 0), (True, 0), (False, 4)):
                yield ("fwd", mod._fwd_kernel, dict(base, BLOCK_M=64, BLOCK_N=128 if d == 64 else 64,
                                                    PREFETCH=prefetch, POLY=poly), TILE_ROLES["fwd"], (4, 2))
        if not only or "bwd_q" in only:
            yield "bwd_q", mod._bwd_q_kernel, dict(base, BLOCK_M=128, BLOCK_N=64), TILE_ROLES["bwd_q"], (8, 3)
        if not only or "bwd_kv" in only:
            extra = {"DQ_MODE": 0} if "DQ_MODE" in mod._bwd_kv_kernel.arg_names else {}
            yield "bwd_kv", mod._bwd_kv_kernel, dict(base, BLOCK_M=64, BLOCK_N=64, **extra), TILE_ROLES["bwd_kv"], (4, 2)
        if only and "fused" in only:
            for dq_mode in (1, 2):
                yield (f"fused{dq_mode}", mod._bwd_kv_kernel, dict(base, BLOCK_M=64, BLOCK_N=64, DQ_MODE=dq_mode),
                       TILE_ROLES["bwd_kv"], (4, 2))


def compile_gluon_forward(cfg: dict, d: int, causal: bool, fp8: bool):
    """gluon_fwd's forward kernel compiled for sm_90 with the installed Triton (no GPU needed:
    Triton 3.9 compiles Gluon for an explicit target), as forward / forward_fp8 would launch cfg."""
    import torch
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from drill.kernels import gluon_common
    from drill.kernels import gluon_fwd as fh

    dtype = torch.float8_e4m3fn if fp8 else torch.bfloat16
    rows, bn = cfg["BLOCK_M"] // cfg["PARTS"], cfg["BLOCK_N"]

    def desc(r, c, t):
        return TensorDescriptor(torch.empty(1024, 1024, dtype=t), [1024, 1024], [1024, 1], [r, c],
                                gluon_common._smem_layout(r, c, t)).__mangle__()

    descs = {"q_desc": desc(rows, d, dtype), "k_desc": desc(bn, d, dtype),
             "v_desc": desc(d, bn, dtype) if fp8 else desc(bn, d, dtype), "o_desc": desc(rows, d, torch.bfloat16)}
    persistent = bool(cfg.get("PERSISTENT"))
    consts = dict(D=d, BLOCK_M=cfg["BLOCK_M"], BLOCK_N=bn, STAGES=cfg["STAGES"], CAUSAL=causal, PARTS=cfg["PARTS"],
                  SCHEDULED=causal and persistent, OWN_O=fp8 or persistent, TRIM=fh.TRIM, FP8=fp8,
                  Q_BUFFERS=fh.Q_BUFFERS, num_warps=cfg["num_warps"])
    fn = fh._fwd_kernel
    # pointers as _launch passes them: the schedule's int32 lists, or lse in its place when not read
    pointers = {"LSE": "*fp32", "QS": "*fp32", "KS": "*fp32", "VC": "*fp32", "VOUT": "*fp32",
                "SCHED": "*i32" if consts["SCHEDULED"] else "*fp32"}
    sig = {n: "constexpr" if n in consts else descs.get(n) or pointers.get(n) or ("fp32" if n == "qk_scale" else "i32")
           for n in fn.arg_names}
    options = dict(num_warps=cfg["num_warps"], **({"maxnreg": cfg["maxnreg"]} if cfg.get("maxnreg") else {}))
    return triton.compile(GluonASTSource(fn, sig, constexprs=consts), target=GPUTarget("cuda", 90, 32),
                          options=options)


def main(argv: list[str]) -> int:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    path, only = argv[0], (argv[1].split(",") if len(argv) > 1 else None)
    import drill.kernels  # noqa: F401  (the package the checked file's relative imports resolve in)

    spec = importlib.util.spec_from_file_location("drill.kernels._under_check", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    target = GPUTarget("cuda", 90, 32)
    dump = os.environ.get("DUMP")
    for name, fn, consts, roles, (warps, stages) in cases(mod, only):
        descriptors = roles if consts["MODE"] == 2 else {}
        key = f"{name} D={consts['D']} causal={consts['CAUSAL']} MODE={consts['MODE']} " + " ".join(
            f"{k}={v}" for k, v in consts.items() if k in ("PREFETCH", "POLY", "DQ_MODE") or (k in (
                "WINDOW", "VARLEN") and v))
        try:
            sig = signature(fn, consts, descriptors, consts["BLOCK_M"], consts["BLOCK_N"], consts["D"])
            kernel = triton.compile(ASTSource(fn, sig, constexprs=consts), target=target,
                                    options=dict(num_warps=warps, num_stages=stages))
        except Exception as exc:  # noqa: BLE001 - a variant that does not compile is a line of the report
            print(f"{key}: FAILED {type(exc).__name__}: {str(exc)[:300]}", flush=True)
            continue
        if dump:
            for ext in ("ptx", "ttgir"):
                Path(dump, key.replace(" ", "_") + "." + ext).write_text(kernel.asm[ext])
        print(f"{key}: {fingerprint(kernel)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
