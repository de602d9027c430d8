"""Reference attention kernels: FlashAttention (Triton, and Gluon on Hopper), FP8, split-KV decoding,
and ring attention over torch.distributed.

The entry points and the plan that picks a backend are in dispatch.py; each backend is a module of
its own (dispatch.py's docstring lists them); benchmarks/ times them against PyTorch's attention.
Importing this package imports torch and triton; drill's CLI imports it only inside the commands
that need it.
"""

from .dispatch import flash_attention, flash_attention_fp8, flash_attention_varlen, flash_decode, ring_attention

__all__ = ["flash_attention", "flash_attention_fp8", "flash_attention_varlen", "flash_decode", "ring_attention"]
