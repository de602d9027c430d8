"""07's fp32 tolerance comes from an error model, not one implementation (issue 32).

FlashAttention's own Triton kernel tracks the logsumexp instead of the running sum; at scores near
-600 in fp32 its error (1.3e-4 in the issue) exceeded the old allowance, twice naive attention's
error (4.6e-5). tests/variants/triton-forward/lse_tracking.py passes either way on its one seed, so
this test replays that kernel's arithmetic in fp32 torch on 07's "scores near -600" inputs over
many seeds: the allowance must hold every one, and without its |lse|·eps term some must fail.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
from drill.exercises.flashattention.checks import _triton_forward_support as tf  # noqa: E402


def _lse_tracking(q, k, v, scale: float, block: int = 16):
    """The variant's loop (state m, lse; p = exp(s - m)), in the inputs' dtype as the kernel runs it."""
    m = torch.full(q.shape[:-1], -math.inf, dtype=q.dtype)
    lse, acc = m.clone(), torch.zeros_like(q)
    for j in range(0, q.shape[2], block):
        s = (q @ k[..., j:j + block, :].transpose(-1, -2)) * scale
        m_new = torch.maximum(s.max(-1).values, lse)
        p = torch.exp(s - m_new[..., None])
        acc = acc * torch.exp(m - m_new)[..., None] + p @ v[..., j:j + block, :]
        lse, m = m_new + torch.log(torch.exp(lse - m_new) + p.sum(-1)), m_new
    return acc * torch.exp(m - lse)[..., None]


def test_an_lse_tracking_kernel_is_within_the_fp32_allowance_at_scores_near_minus_600():
    B, H, S, D = 1, 1, 64, 32  # 07's interpreter shape for its large-logit check
    over_old, errors = 0, []
    for seed in range(20):
        g = torch.Generator().manual_seed(seed)
        q, k, v = (torch.randn(B, H, S, D, generator=g, dtype=torch.float64) for _ in range(3))
        a = (600.0 * D ** 0.5) ** 0.5  # as 07's inputs: every score near -600
        q[..., 0] += a
        k[..., 0] -= a
        q, k, v = (t.float() for t in (q, k, v))
        ref = tf.reference(q, k, v, False, None)
        allowed, naive_err = tf.tolerance(q, k, v, False, None, ref)
        err = float((_lse_tracking(q, k, v, 1 / math.sqrt(D)).double() - ref).abs().max())
        errors.append((seed, err, allowed))
        old = max(2.0 * naive_err, tf.FLOOR.get(q.dtype, 2e-5) * max(1.0, float(ref.abs().max())))
        over_old += err > old
    assert all(err <= allowed for _, err, allowed in errors), errors
    assert over_old, "no seed reproduces the false failure: the test no longer shows the |lse|·eps term is needed"
