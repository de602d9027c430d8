"""Speed of light: the ceilings an attention kernel runs against, measured on this GPU in this run.

An attention forward over B·H heads of S queries and S keys (half the pairs when causal) must
  - do 4·S²·D FLOPs of matmul per head: no faster than the bf16 matmul rate torch.mm reaches;
  - take one exponential per score: no faster than the measured exp2 rate (the special-function
    unit, 16 per clock per SM on Hopper: FlashAttention-3 §3 counts 3.9 TFLOP/s of it against
    989 of matmul on an H100);
  - read q, k, v and write o once: no faster than the device's copy bandwidth.
Each is a lower bound on the kernel's time; the largest is the one that binds. A kernel timed
faster than the binding floor was mismeasured, or its figure forged: the checks fail it.

    ceilings()                     measured once per process: Ceilings(matmul, exp, hbm)
    attention_floors(c, ...)       the three floors in ms for one shape
    assess(c, ms, shape...)        the binding ceiling and how far a timing is from it
    decode_floors, assess_decode   the same for one decode step over a K/V cache (HBM binds)
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch
import triton
import triton.language as tl

# A timing under this share of the binding floor cannot be a real kernel (the floors are
# rates measured here, a few percent under the hardware's own).
IMPOSSIBLE_SHARE = 0.8


@dataclass(frozen=True)
class Ceilings:
    matmul_tflops: float  # bf16 dense matmul (torch.mm, 8192³)
    exp_per_s: float  # exp2 evaluations per second (a Triton kernel of dependent exp2 chains)
    hbm_bytes_per_s: float  # device-to-device copy, bytes read plus bytes written per second
    gpu: str

    def describe(self) -> str:
        return (f"{self.gpu}: matmul {self.matmul_tflops:.0f} TFLOP/s (bf16 torch.mm), exp2 "
                f"{self.exp_per_s / 1e12:.2f} T/s, HBM {self.hbm_bytes_per_s / 1e12:.2f} TB/s (copy)")


@triton.jit
def _exp_chain_kernel(X, ITERS: tl.constexpr, BLOCK: tl.constexpr):
    # Each element runs a chain of ITERS exp2s; x stays in [-1, 0] (exp2 then minus 1), so no
    # value overflows and the compiler cannot fold the chain away.
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(X + offs)
    for _ in range(ITERS):
        x = tl.math.exp2(x) - 1.0
    tl.store(X + offs, x)


def _median_ms(fn) -> float:
    return float(triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median"))


@lru_cache(maxsize=None)
def ceilings(device: int = 0) -> Ceilings:
    """The three rates on this GPU, measured once per process (about a second)."""
    with torch.cuda.device(device):
        n = 8192
        a, b = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        matmul = 2 * n**3 / (_median_ms(lambda: torch.mm(a, b)) * 1e-3) / 1e12
        del a, b
        sms = torch.cuda.get_device_properties(device).multi_processor_count
        block, iters = 1024, 512
        x = torch.rand(sms * 16 * block, device="cuda") - 1.0
        exp_rate = x.numel() * iters / (_median_ms(
            lambda: _exp_chain_kernel[(x.numel() // block,)](x, ITERS=iters, BLOCK=block, num_warps=8)) * 1e-3)
        src = torch.empty(2**28, dtype=torch.uint8, device="cuda")  # 256 MiB: past every cache
        dst = torch.empty_like(src)
        hbm = 2 * src.numel() / (_median_ms(lambda: dst.copy_(src)) * 1e-3)
        del x, src, dst
    return Ceilings(matmul, exp_rate, hbm, torch.cuda.get_device_name(device))


def attention_floors(c: Ceilings, B: int, H: int, S: int, D: int, causal: bool, elem_bytes: int = 2,
                     backward: bool = False) -> dict:
    """The least time, in ms, each ceiling allows for a forward (or backward) of this shape. The
    backward does 2.5× the forward's matmul FLOPs (five matmuls to two), recomputes each score's
    exponential once, reads q, k, v, o, do and writes dq, dk, dv."""
    pairs = B * H * S * S / (2 if causal else 1)
    tensors = 8 if backward else 4
    return {"matmul": 4 * pairs * D * (2.5 if backward else 1) / (c.matmul_tflops * 1e12) * 1e3,
            "exp": pairs / c.exp_per_s * 1e3,
            "HBM": tensors * B * H * S * D * elem_bytes / c.hbm_bytes_per_s * 1e3}


@dataclass(frozen=True)
class Assessment:
    floors: dict  # ceiling name -> least ms
    binding: str  # the ceiling with the largest floor
    share: float  # binding floor / measured ms: 1.0 is the speed of light

    @property
    def impossible(self) -> bool:
        return self.share > 1 / IMPOSSIBLE_SHARE

    def describe(self, who: str | None = "the kernel") -> str:
        """The floors and the binding ceiling, then `who`'s share of it (None: the floors alone)."""
        floors = ", ".join(f"{n} {ms:.3g} ms" for n, ms in self.floors.items())
        text = f"floors {floors}: {self.binding} binds"
        return text if who is None else f"{text}; {who} at {self.share:.0%} of its speed of light"


def assess(c: Ceilings, ms: float, B: int, H: int, S: int, D: int, causal: bool, elem_bytes: int = 2,
           backward: bool = False) -> Assessment:
    floors = attention_floors(c, B, H, S, D, causal, elem_bytes, backward)
    binding = max(floors, key=floors.get)
    return Assessment(floors, binding, floors[binding] / ms)


def decode_floors(c: Ceilings, B: int, Hq: int, Hkv: int, S: int, D: int, elem_bytes: int = 2) -> dict:
    """The least time, in ms, of one decode step: each query head scores S keys (4·S·D FLOPs, S
    exponentials) and the K/V cache, 2·B·Hkv·S·D elements, is read once. HBM binds by far."""
    pairs = B * Hq * S
    return {"matmul": 4 * pairs * D / (c.matmul_tflops * 1e12) * 1e3, "exp": pairs / c.exp_per_s * 1e3,
            "HBM": 2 * B * Hkv * S * D * elem_bytes / c.hbm_bytes_per_s * 1e3}


def assess_decode(c: Ceilings, ms: float, B: int, Hq: int, Hkv: int, S: int, D: int,
                  elem_bytes: int = 2) -> Assessment:
    floors = decode_floors(c, B, Hq, Hkv, S, D, elem_bytes)
    binding = max(floors, key=floors.get)
    return Assessment(floors, binding, floors[binding] / ms)


def check_row(c: Ceilings, figures: dict, shape: tuple, causal: bool, *, yours_judged: bool,
              backward: bool = False) -> tuple[str, str | None]:
    """For a speed check's row: (the note placing "yours" and the others against the binding
    ceiling, why "yours" is impossible or None). figures: name -> ms (None where it could not
    run); "yours" is placed only where its figure is judged (out of the transfer's noise)."""
    B, H, S, D = shape
    light = {n: assess(c, ms, B, H, S, D, causal, backward=backward) for n, ms in figures.items()
             if ms and (n != "yours" or yours_judged)}
    if not light:
        return "", None
    first = light.get("yours") or next(iter(light.values()))
    mine = first.describe("yours") if "yours" in light else first.describe(None) + "; yours in noise"
    others = ", ".join(f"{n} at {a.share:.0%}" for n, a in light.items() if n != "yours")
    mine = f"  speed of light: {mine}; {others}"
    a = light.get("yours")
    if a is None or not a.impossible:
        return mine, None
    where = f"B={B} H={H} S={S} D={D}{' causal' if causal else ''}"
    return mine, (f"{where}: {figures['yours']:.3g} ms against a {a.binding} floor of "
                  f"{a.floors[a.binding]:.3g} ms")
