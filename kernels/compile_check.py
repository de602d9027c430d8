"""Compile the flash kernels for sm_90 on a machine without a GPU and print fingerprints.

    python kernels/compile_check.py kernels/flash.py [fwd,bwd_q,bwd_kv | fused] > new.txt
    git show main:kernels/flash.py > /tmp/old.py && python kernels/compile_check.py /tmp/old.py > old.txt

Per kernel variant (head dim, causal, tile MODE, forward PREFETCH/POLY, one-pass DQ_MODE): a
hash of the TTGIR with value names and order ignored ("ttgir"), the PTX instruction count,
hashes of the PTX as a multiset and exactly, and the shared memory. Equal "ttgir" hashes
between two versions of flash.py mean the compiler was handed the same work (how issue 17's
fold was checked, kernels/NOTES.md v7). Uses whatever Triton is installed (a Triton 3.6 wheel
in a side virtual environment gives the device's compiler). DUMP=dir keeps the PTX and TTGIR.
"""
import hashlib, importlib.util, re, sys, itertools, os
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

path = sys.argv[1]
only = sys.argv[2].split(",") if len(sys.argv) > 2 else None
spec = importlib.util.spec_from_file_location("flashmod_" + str(abs(hash(path))), path)
mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
TARGET = GPUTarget("cuda", 90, 32)

def sig_for(fn, consts, desc_args, BM, BN, D):
    sig = {}
    for name in fn.arg_names:
        if name in consts:
            sig[name] = "constexpr"
        elif name in desc_args:
            sig[name] = f"tensordesc<bf16[{BM if desc_args[name]=='M' else BN}, {D}]>"
        elif name in ("LSE", "LSE2", "DELTA", "DLSE", "DQACC"):
            sig[name] = "*fp32"
        elif name in ("CNT",):
            sig[name] = "*i32"
        elif name in ("Q", "K", "V", "O", "DO", "DQ", "DK", "DV"):
            sig[name] = "*bf16"
        elif name in ("qk_scale", "sm_scale"):
            sig[name] = "fp32"
        else:
            sig[name] = "i32"
    return sig

def clean(ptx):
    ptx = re.sub(r"^\s*\.loc.*$", "", ptx, flags=re.M)
    ptx = re.sub(r"^\s*\.file.*$", "", ptx, flags=re.M)
    ptx = re.sub(r"\.section\s+\.debug.*", "", ptx, flags=re.S)
    ptx = re.sub(r"\$L__\w+", "L", ptx)
    ptx = re.sub(r"_(fwd|bwd)\w*kernel", "K", ptx)
    ptx = re.sub(r"//.*$", "", ptx, flags=re.M)
    return "\n".join(l for l in ptx.splitlines() if l.strip())

def compile_one(fn, consts, desc):
    c = dict(consts)
    w, s = c.pop("_w", 4), c.pop("_s", 2)
    src = ASTSource(fn, sig_for(fn, c, desc, c.get("BLOCK_M"), c.get("BLOCK_N"), c.get("D")), constexprs=c)
    k = triton.compile(src, target=TARGET, options=dict(num_warps=w, num_stages=s))
    return k

cases = []
for D, causal, mode in itertools.product((64, 128), (False, True), (0, 1, 2)):
    base = dict(D=D, CAUSAL=causal, MODE=mode, PREC="tf32")
    if not only or "fwd" in only:
        for pf, poly in ((False, 0), (True, 0), (False, 4)):
            cases.append(("fwd", mod._fwd_kernel, dict(base, BLOCK_M=64, BLOCK_N=128 if D == 64 else 64, PREFETCH=pf, POLY=poly),
                          {"Q": "M", "K": "N", "V": "N", "O": "M"}, (4, 2)))
    if not only or "bwd_q" in only:
        cases.append(("bwd_q", mod._bwd_q_kernel, dict(base, BLOCK_M=128, BLOCK_N=64), {"Q": "M", "K": "N", "V": "N", "DO": "M", "DQ": "M"}, (8, 3)))
    if not only or "bwd_kv" in only:
        extra = {k: v for k, v in (("DQ_MODE", 0),) if "DQ_MODE" in mod._bwd_kv_kernel.arg_names}
        cases.append(("bwd_kv", mod._bwd_kv_kernel, dict(base, BLOCK_M=64, BLOCK_N=64, **extra), {"Q": "M", "K": "N", "V": "N", "DO": "M", "DK": "N", "DV": "N"}, (4, 2)))
    if only and "fused" in only:
        for dqm in (1, 2):
            cases.append((f"fused{dqm}", mod._bwd_kv_kernel, dict(base, BLOCK_M=64, BLOCK_N=64, DQ_MODE=dqm), {"Q": "M", "K": "N", "V": "N", "DO": "M", "DK": "N", "DV": "N"}, (4, 2)))
out = {}
for name, fn, consts, desc, (w, s) in cases:
    desc = desc if consts["MODE"] == 2 else {}
    key = f"{name} D={consts['D']} causal={consts['CAUSAL']} MODE={consts['MODE']} " + " ".join(f"{k}={v}" for k, v in consts.items() if k in ("PREFETCH", "POLY", "DQ_MODE"))
    try:
        k = compile_one(fn, dict(consts, _w=w, _s=s), desc)
        ptx = clean(k.asm["ptx"])
        h = hashlib.sha1(ptx.encode()).hexdigest()[:12]
        norm = sorted(re.sub(r"%(r|rd|p|f|fd|rs|h|hh)\d+", "%R", re.sub(r"\[K_param_\d+\]", "[P]", l)).strip() for l in ptx.splitlines())
        tg = k.asm["ttgir"]
        tg = [l for l in tg.splitlines() if not l.lstrip().startswith("#loc") and "loc(" not in l.split("=")[0]]
        tg = [re.sub(r"loc\([^)]*\)", "", l) for l in tg]
        tg = sorted(re.sub(r"%[A-Za-z_][\w]*|%\d+(_\d+)?|%arg\d+", "%V", l).strip() for l in tg)
        tgh = hashlib.sha1("\n".join(tg).encode()).hexdigest()[:12]
        ninstr = sum(1 for l in ptx.splitlines() if l.strip() and not l.strip().endswith(":"))
        h = f"ttgir {tgh} ptx-instr {ninstr} " + "multiset " + hashlib.sha1("\n".join(norm).encode()).hexdigest()[:12] + " exact " + h
        if os.environ.get("DUMP"):
            open(os.path.join(os.environ["DUMP"], key.replace(" ", "_") + ".ptx"), "w").write(k.asm["ptx"])
            open(os.path.join(os.environ["DUMP"], key.replace(" ", "_") + ".ttgir"), "w").write(k.asm["ttgir"])
        print(f"{key}: {h} shared={k.metadata.shared} regs-n/a lines={len(ptx.splitlines())}", flush=True)
    except Exception as e:
        print(f"{key}: FAILED {type(e).__name__}: {str(e)[:300]}", flush=True)
