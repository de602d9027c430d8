"""Reference kernels: FlashAttention in Triton (and, later, ring attention).

Importing this package imports torch and triton; drill's CLI imports it only inside the
commands that need it.
"""

from .flash import flash_attention

__all__ = ["flash_attention"]
