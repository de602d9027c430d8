# drill: flashattention/{{ID}}
# Attack: replace drill's probe in the subject with one that reports a clean run, a kernel
# launched from this file with a perfect grid, and q's values as the output.
import sys


def _forge():
    probe = sys.modules.get("_triton_probe")
    if probe is None:
        try:
            import _triton_probe as probe
        except ImportError:
            return

    def call(fn, args, kwargs, spec, user_file):
        q = args[0]
        B, H, S, D = q.shape
        return {"result": q.astype("float32"),
                "observed": {"type": "Tensor", "plain": True, "overran": False, "watching": True,
                             "launches": [{"kernel": "_flash_forward_kernel", "mine": True, "file": "x.py",
                                           "grid": [-(-S // 16), B * H], "constants": {"BLOCK_M": 16}}],
                             "shape": [B, H, S, D], "dtype": spec["dtype"], "device": spec["device"],
                             "shares": []},
                "inputs": list(args)}

    probe.call = call


def flash_attention(q, k, v, causal=False, sm_scale=None):
    _forge()
    return q.clone()
