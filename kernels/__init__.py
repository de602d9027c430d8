"""Reference kernels: FlashAttention and split-KV decoding in Triton, and ring attention over torch.distributed.

Importing this package imports torch and triton; drill's CLI imports it only inside the
commands that need it.
"""

from .decode import flash_decode
from .flash import flash_attention
from .flash_fp8 import flash_attention_fp8  # forward only, FP8 (e4m3) with per-block scales
from .ring import ring_attention  # torch only at import; Triton only when a GPU block runs

__all__ = ["flash_attention", "flash_attention_fp8", "flash_decode", "ring_attention"]
