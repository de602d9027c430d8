"""Sliding-window attention and packed (varlen) batches in drill.kernels.

The mask is written here from FlashAttention-2's definition, apart from the kernels: query row i
of a sequence with Sq queries and Sk keys has the diagonal key j0 = i + Sk - Sq and sees keys
j0 - left <= j <= j0 + right (-1: that side unbounded; causal sets right = 0). Every comparison
also checks that it could fail: the window must change the output, and a reference whose window
is off by one key must differ from the kernel.

CPU: small float32 shapes under TRITON_INTERPRET=1 against float64 (the interpreter's blocks are
32 x 16 and 16 x 32, so a few dozen rows cross masked and unmasked blocks on both window edges).
GPU (marker `gpu`): bf16 at S = 1k-4k against an fp32 reference by FlashAttention's rule.
"""

from __future__ import annotations

import itertools
import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from drill.kernels import flash_attention, flash_attention_varlen  # noqa: E402

from test_kernel_flash import _grads as grads  # noqa: E402  (tests/ is on sys.path)

ON_GPU = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") in ("", "0")
NAMES = ["o", "lse", "dq", "dk", "dv"]


def window_mask(sq: int, sk: int, left: int, right: int, causal: bool = False, device=None) -> torch.Tensor:
    """[sq, sk] bool: which keys each query row sees (module docstring)."""
    i = torch.arange(sq, device=device)[:, None]
    j = torch.arange(sk, device=device)[None, :]
    j0 = i + sk - sq
    if causal:
        right = 0
    keep = torch.ones(sq, sk, dtype=torch.bool, device=device)
    if left >= 0:
        keep &= j >= j0 - left
    if right >= 0:
        keep &= j <= j0 + right
    return keep


def masked_reference(q, k, v, keep, scale, dtype=torch.float64):
    """(o, lse) of attention over [B, H, S, D] tensors with a boolean mask [Sq, Sk], in `dtype`;
    k and v may have fewer heads (GQA). A row with no key gives o = 0 and lse = -inf (and, through
    autograd, zero gradients)."""
    q, k, v = (t.to(dtype) for t in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = (q @ k.transpose(-1, -2)) * scale
    s = s.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - torch.where(torch.isinf(lse), 0.0, lse)[..., None])
    return p @ v, lse


def compare(got, want, tol_fwd=2e-5, tol_bwd=1e-4):
    for name, x, y in zip(NAMES, got, want):
        assert x.shape == y.shape, f"{name}: shape {tuple(x.shape)}, want {tuple(y.shape)}"
        if name == "lse":
            assert torch.equal(torch.isinf(x), torch.isinf(y)), "lse must be -inf exactly on rows with no key"
            x, y = x[torch.isfinite(y)], y[torch.isfinite(y)]
        assert torch.isfinite(x).all() or name == "lse", f"{name} has non-finite values"
        err = (x.double() - y.double()).abs().max().item() if x.numel() else 0.0
        assert err < (tol_fwd if name in ("o", "lse") else tol_bwd), f"{name}: max |kernel - reference| = {err:.3g}"


def differs(x, y, by=1e-3) -> bool:
    return (x.double() - y.double()).abs().max().item() > by


@pytest.fixture(params=["auto", "0"], ids=["descriptors", "pointers"])
def tiles(request, monkeypatch):
    """Tensor descriptors (host ones where the blocks divide the lengths) or plain pointers."""
    monkeypatch.setenv("DRILL_FLASH_TMA", request.param)
    return request.param


# --------------------------------------------------------------------------- sliding window, CPU

WINDOW_CASES = [
    # B, H, Hkv, Sq, Sk, causal, (left, right)
    (1, 2, 2, 70, 70, False, (20, -1)),  # left only
    (1, 1, 1, 70, 70, False, (-1, 9)),  # right only
    (1, 2, 1, 80, 80, False, (17, 5)),  # both sides, GQA
    (2, 1, 1, 64, 64, True, (24, -1)),  # causal window; blocks divide: host descriptors
    (1, 2, 1, 37, 90, True, (30, 7)),  # Sq < Sk: bottom-right; causal overrides right
    (1, 2, 1, 60, 25, False, (4, 2)),  # Sq > Sk: rows 0..32 see no key
]


@pytest.mark.parametrize("case", WINDOW_CASES, ids=lambda c: "B{}H{}kv{}q{}k{}{}-w{}_{}".format(
    *c[:5], "c" if c[5] else "", *c[6]))
def test_cpu_window_matches_masked_float64(case, tiles):
    B, H, HKV, SQ, SK, causal, window = case
    D, scale = 16, 0.3
    g = torch.Generator().manual_seed(SQ * 100 + SK)
    q = torch.randn(B, H, SQ, D, generator=g)
    k, v = (torch.randn(B, HKV, SK, D, generator=g) for _ in range(2))
    do, dlse = torch.randn(B, H, SQ, D, generator=g), torch.randn(B, H, SQ, generator=g)
    keep = window_mask(SQ, SK, *window, causal)
    got = grads(lambda a, b, c: flash_attention(a, b, c, causal, scale, return_lse=True, window_size=window),
                q, k, v, do, dlse)
    want = grads(lambda a, b, c: masked_reference(a, b, c, keep, scale), q, k, v, do, dlse)
    compare(got, want)
    # not vacuous: the window matters here, and a window off by one key is told apart
    plain = masked_reference(q, k, v, window_mask(SQ, SK, -1, -1, causal), scale)[0]
    assert differs(got[0], plain), "the window does not change the output: the case tests nothing"
    left, right = window
    off_by_one = window_mask(SQ, SK, left + 1 if left >= 0 else left, right + 1 if right >= 0 and not causal else right,
                             causal)
    assert differs(got[0], masked_reference(q, k, v, off_by_one, scale)[0])


def test_cpu_rows_outside_every_window_give_zeros():
    """Sq = 60 > Sk = 25, window (4, 2): rows 0..32 have j0 + 2 < 0, so they see no key: o = 0,
    lse = -inf, dq = 0; every gradient is finite, and keys no row sees get dk = dv = 0."""
    g = torch.Generator().manual_seed(1)
    q = torch.randn(1, 2, 60, 16, generator=g, requires_grad=True)
    k, v = (torch.randn(1, 2, 25, 16, generator=g, requires_grad=True) for _ in range(2))
    o, lse = flash_attention(q, k, v, return_lse=True, window_size=(4, 2))
    (o.sum() + torch.where(torch.isfinite(lse), lse, 0).sum()).backward()
    empty = slice(0, 33)
    assert torch.equal(o[:, :, empty], torch.zeros_like(o[:, :, empty]))
    assert bool((lse[:, :, empty] == float("-inf")).all()) and bool(torch.isfinite(lse[:, :, 33:]).all())
    assert torch.equal(q.grad[:, :, empty], torch.zeros_like(q.grad[:, :, empty]))
    assert all(bool(torch.isfinite(t.grad).all()) for t in (q, k, v))
    # row 33 (j0 = -2) sees keys 0..0; nothing sees keys j < (the first row's left edge) -- none here;
    # the last row (j0 = 24) sees 20..24, so every key is seen and dv must be nonzero everywhere
    assert bool((v.grad.abs().sum(-1) > 0).all())


def test_cpu_wide_windows_take_the_plain_kernels():
    """A window past every key is no window (bitwise the unwindowed call), and (-1, 0) is causal."""
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 2, 40, 16, generator=g) for _ in range(3))
    plain = flash_attention(q, k, v, return_lse=True)
    assert all(torch.equal(a, b) for a, b in zip(flash_attention(q, k, v, return_lse=True, window_size=(39, 39)),
                                                 plain))
    assert all(torch.equal(a, b) for a, b in zip(flash_attention(q, k, v, return_lse=True, window_size=(500, -1)),
                                                 plain))
    causal = flash_attention(q, k, v, causal=True, return_lse=True)
    for w in ((-1, 0), (39, 0), (-1, 7)):  # with causal=True the right side is 0 whatever it says
        assert all(torch.equal(a, b) for a, b in zip(
            flash_attention(q, k, v, causal=w[1] != 0, return_lse=True, window_size=w), causal))
    # one key narrower than the sequence is a window (the kernels' masked path), and it shows
    narrow = flash_attention(q, k, v, window_size=(38, -1))
    want = masked_reference(q, k, v, window_mask(40, 40, 38, -1), 0.25)[0]
    assert (narrow.double() - want).abs().max().item() < 2e-5 and differs(narrow, plain[0], 1e-6)


def test_cpu_window_size_takes_any_integers():
    """A list, or numpy integers, are as good as a tuple of ints."""
    np = pytest.importorskip("numpy")
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(1, 1, 40, 16, generator=g) for _ in range(3))
    want = flash_attention(q, k, v, window_size=(7, 2))
    assert torch.equal(flash_attention(q, k, v, window_size=[7, 2]), want)
    assert torch.equal(flash_attention(q, k, v, window_size=(np.int64(7), np.int32(2))), want)


def test_cpu_window_padded_head_dim_and_bf16():
    """The window reaches the zero-padded head dims (D = 96, Dv = 64) and bf16 (fp32 in the interpreter)."""
    g = torch.Generator().manual_seed(3)
    q, k = (torch.randn(1, 2, 40, 96, generator=g) for _ in range(2))
    v = torch.randn(1, 2, 40, 64, generator=g)
    keep = window_mask(40, 40, 6, 3)
    o = flash_attention(q, k, v, window_size=(6, 3))
    assert o.shape == (1, 2, 40, 64)
    assert (o.double() - masked_reference(q, k, v, keep, 96 ** -0.5)[0]).abs().max().item() < 2e-5
    ob = flash_attention(*(t.to(torch.bfloat16) for t in (q, k, v)), window_size=(6, 3))
    assert ob.dtype == torch.bfloat16
    assert (ob.double() - masked_reference(q, k, v, keep, 96 ** -0.5)[0]).abs().max().item() < 3e-2


@pytest.mark.parametrize("bad", [(-2, 0), (0, -3), (1,), (1, 2, 3), (1.0, 2), (True, 0), None, "12", 5])
def test_cpu_rejects_bad_window_size(bad):
    q = torch.randn(1, 1, 8, 16)
    with pytest.raises(ValueError, match="window_size"):
        flash_attention(q, q, q, window_size=bad)
    with pytest.raises(ValueError, match="window_size"):
        cu = torch.tensor([0, 8], dtype=torch.int32)
        flash_attention_varlen(q[0].transpose(0, 1), q[0].transpose(0, 1), q[0].transpose(0, 1), cu, cu, 8, 8,
                               window_size=bad)


# --------------------------------------------------------------------------- varlen, CPU


def packed(lengths, heads, d, g, extra=0):
    """A [sum(lengths), heads, d] tensor whose rows are strided (every row skips `extra` heads' worth
    of memory): packed batches often come as slices of a fused qkv projection."""
    total = sum(lengths)
    return torch.randn(total, heads + extra, d, generator=g)[:, :heads]


def cumulative(lengths, device=None) -> torch.Tensor:
    """cu_seqlens: int32 [B + 1], 0 then the running sums."""
    return torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32, device=device)


def varlen_reference(q, k, v, lens_q, lens_k, causal, window, scale):
    """(o [total_q, H, Dv], lse [H, total_q]) sequence by sequence through masked_reference."""
    outs, lses = [], []
    cq = ck = 0
    for sq, sk in zip(lens_q, lens_k):
        qs, ks, vs = (t[a:a + n].transpose(0, 1)[None] for t, a, n in ((q, cq, sq), (k, ck, sk), (v, ck, sk)))
        o, lse = masked_reference(qs, ks, vs, window_mask(sq, sk, *window, causal), scale)
        outs.append(o[0].transpose(0, 1))
        lses.append(lse[0])
        cq, ck = cq + sq, ck + sk
    return torch.cat(outs, 0), torch.cat(lses, 1)


VARLEN_CASES = [
    # lengths of q, lengths of k, H, Hkv, causal, window
    ([37, 0, 1, 50, 20], [37, 5, 1, 64, 0], 2, 2, False, (-1, -1)),  # empty q, empty k, one row, Sq != Sk
    ([33, 48, 1, 0, 17], [40, 48, 3, 6, 17], 2, 1, True, (12, -1)),  # causal window per sequence, GQA
    ([45, 9, 30, 4], [30, 9, 52, 0], 3, 1, False, (6, 4)),  # two-sided window, MQA, Sq > Sk and Sq < Sk
]


@pytest.mark.parametrize("case", VARLEN_CASES, ids=["plain", "causal-window", "window-mqa"])
def test_cpu_varlen_matches_each_sequence(case, tiles):
    lens_q, lens_k, H, HKV, causal, window = case
    D, scale = 16, 0.25
    g = torch.Generator().manual_seed(sum(lens_q) + H)
    q, k, v = packed(lens_q, H, D, g, extra=1), packed(lens_k, HKV, D, g, extra=2), packed(lens_k, HKV, D, g)
    do, dlse = torch.randn(sum(lens_q), H, D, generator=g), torch.randn(H, sum(lens_q), generator=g)
    cu_q, cu_k = (cumulative(n) for n in (lens_q, lens_k))
    got = grads(lambda a, b, c: flash_attention_varlen(a, b, c, cu_q, cu_k, max(lens_q), max(lens_k), causal, scale,
                                                       return_lse=True, window_size=window), q, k, v, do, dlse)
    want = grads(lambda a, b, c: varlen_reference(a, b, c, lens_q, lens_k, causal, window, scale), q, k, v, do, dlse)
    compare(got, want)
    assert got[1].shape == (H, sum(lens_q))  # FA2's lse layout
    # not vacuous: treating the batch as one sequence, or shifting the window, gives other numbers
    whole = masked_reference(q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None],
                             window_mask(sum(lens_q), sum(lens_k), *window, causal), scale)[0][0].transpose(0, 1)
    assert differs(got[0], whole)
    if window != (-1, -1):
        shifted = varlen_reference(q, k, v, lens_q, lens_k, causal, (window[0] + 1, window[1]), scale)[0]
        assert differs(got[0], shifted)


def test_cpu_varlen_equals_dense_for_one_sequence_and_takes_int64():
    """One sequence packed is the dense call (same kernels, the packed view): equal to rounding; an
    int64 cu_seqlens is accepted, and a row-strided q too."""
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(1, 2, 50, 16, generator=g) for _ in range(3))
    dense_o, dense_lse = flash_attention(q, k, v, causal=True, return_lse=True, window_size=(9, 0))
    cu = torch.tensor([0, 50], dtype=torch.int64)
    o, lse = flash_attention_varlen(*(t[0].transpose(0, 1) for t in (q, k, v)), cu, cu, 50, 64, causal=True,
                                    return_lse=True, window_size=(9, 0))
    assert (o - dense_o[0].transpose(0, 1)).abs().max().item() < 1e-6
    assert (lse - dense_lse[0]).abs().max().item() < 1e-6


def _varlen_call(bad):
    q = torch.randn(10, 2, 16)
    k = v = torch.randn(12, 2, 16)
    cu_q = torch.tensor([0, 4, 10], dtype=torch.int32)
    cu_k = torch.tensor([0, 6, 12], dtype=torch.int32)
    mq, mk = 6, 6
    if bad == "cu dtype":
        cu_q = cu_q.float()
    elif bad == "cu shape":
        cu_q = cu_q[None]
    elif bad == "cu start":
        cu_q = torch.tensor([1, 4, 10], dtype=torch.int32)
    elif bad == "cu decreasing":
        cu_k = torch.tensor([0, 7, 5, 12], dtype=torch.int32)
        cu_q = torch.tensor([0, 4, 6, 10], dtype=torch.int32)
    elif bad == "cu last":
        cu_k = torch.tensor([0, 6, 11], dtype=torch.int32)
    elif bad == "cu lengths differ":
        cu_k = torch.tensor([0, 6, 9, 12], dtype=torch.int32)
    elif bad == "max_seqlen":
        mq = 5
    elif bad == "max_seqlen type":
        mk = 6.0
    elif bad == "q dims":
        q = q[None]
    elif bad == "heads":
        q = torch.randn(10, 3, 16)
    flash_attention_varlen(q, k, v, cu_q, cu_k, mq, mk)


@pytest.mark.parametrize("bad,names", [("cu dtype", "cu_seqlens_q"), ("cu shape", "cu_seqlens_q"),
                                       ("cu start", "cu_seqlens_q"), ("cu decreasing", "cu_seqlens_k"),
                                       ("cu last", "cu_seqlens_k"), ("cu lengths differ", "cu_seqlens_k"),
                                       ("max_seqlen", "max_seqlen_q"), ("max_seqlen type", "max_seqlen_k"),
                                       ("q dims", "q"), ("heads", "shape mismatch")])
def test_cpu_varlen_rejects_bad_arguments(bad, names):
    with pytest.raises(ValueError, match=names):
        _varlen_call(bad)


def test_cpu_varlen_arguments_check_can_pass():
    """The call _varlen_call breaks, unbroken, runs (so each rejection above is the one fault)."""
    _varlen_call(None)


# --------------------------------------------------------------------------- GPU


def _fa_rule(name, ours, naive, ref):
    err = (ours.float() - ref.float()).abs().max().item()
    base = (naive.float() - ref.float()).abs().max().item()
    bound = 2 * base + 1e-4 * ref.float().abs().max().item() + 1e-6
    assert err <= bound, f"{name}: flash error {err:.3g} > 2 x naive {base:.3g} (+ slack)"


def _naive(q, k, v, keep, scale):
    """matmul-softmax-matmul in the inputs' dtype (softmax in fp32), as FlashAttention's tests do."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = ((q @ k.transpose(-1, -2)) * scale).masked_fill(~keep, float("-inf"))
    p = torch.softmax(s.float(), dim=-1).nan_to_num(0.0).to(q.dtype)
    return p @ v, torch.zeros(q.shape[:-1], device=q.device)


GPU_WINDOW_CASES = [(d, sq, sk, c, w) for d in (64, 128)
                    for sq, sk, c, w in ((1024, 1024, False, (256, 256)), (2048, 2048, True, (512, -1)),
                                         (1000, 1277, True, (300, 0)), (4096, 4096, False, (1024, 0)),
                                         (1536, 1000, False, (100, 40)))]


@pytest.mark.gpu
@pytest.mark.parametrize("d,sq,sk,causal,window", GPU_WINDOW_CASES, ids=lambda x: str(x))
def test_gpu_window_fa_rule(d, sq, sk, causal, window, monkeypatch):
    monkeypatch.setenv("DRILL_FLASH_TUNE", "0")
    g = torch.Generator(device="cuda").manual_seed(d + sq + sk)
    B, H, HKV = 2, 8, 2
    q = torch.randn(B, H, sq, d, device="cuda", dtype=torch.bfloat16, generator=g)
    k, v = (torch.randn(B, HKV, sk, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
    do = torch.randn_like(q)
    scale = d ** -0.5
    keep = window_mask(sq, sk, *window, causal, device="cuda")
    ours = grads(lambda a, b, c: flash_attention(a, b, c, causal, return_lse=True, window_size=window), q, k, v, do)
    ref = grads(lambda a, b, c: masked_reference(a, b, c, keep, scale, torch.float32), q, k, v, do)
    naive = grads(lambda a, b, c: _naive(a, b, c, keep, scale), q, k, v, do)
    fin = torch.isfinite(ref[1])
    assert torch.equal(torch.isinf(ours[1]), ~fin)
    assert (ours[1][fin] - ref[1][fin]).abs().max().item() < 1e-2
    for i, name in ((0, "o"), (2, "dq"), (3, "dk"), (4, "dv")):
        _fa_rule(name, ours[i], naive[i], ref[i])
    again = grads(lambda a, b, c: flash_attention(a, b, c, causal, return_lse=True, window_size=window), q, k, v, do)
    assert all(torch.equal(x, y) for x, y in zip(ours, again)), "the windowed backward is not deterministic"


@pytest.mark.gpu
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal,window", [(False, (-1, -1)), (True, (-1, -1)), (True, (256, -1)),
                                           (False, (128, 64))], ids=str)
def test_gpu_varlen_fa_rule(d, causal, window, monkeypatch):
    """16 sequences of 0-3000 rows (one empty, one of a single row), packed, GQA, bf16."""
    monkeypatch.setenv("DRILL_FLASH_TUNE", "0")
    gen = torch.Generator().manual_seed(d)
    lens_q = torch.randint(1, 3000, (16,), generator=gen).tolist()
    lens_k = [n + int(torch.randint(0, 200, (1,), generator=gen)) for n in lens_q]
    lens_q[3], lens_q[7], lens_k[9] = 0, 1, 0
    H, HKV = 8, 2
    g = torch.Generator(device="cuda").manual_seed(d)
    q = torch.randn(sum(lens_q), H, d, device="cuda", dtype=torch.bfloat16, generator=g)
    k, v = (torch.randn(sum(lens_k), HKV, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
    do = torch.randn_like(q)
    cu_q, cu_k = (cumulative(n, "cuda") for n in (lens_q, lens_k))
    scale = d ** -0.5
    ours = grads(lambda a, b, c: flash_attention_varlen(a, b, c, cu_q, cu_k, max(lens_q), max(lens_k), causal,
                                                        return_lse=True, window_size=window), q, k, v, do)
    ref = grads(lambda a, b, c: _varlen_ref32(a, b, c, lens_q, lens_k, causal, window, scale, masked_reference),
                q, k, v, do)
    naive = grads(lambda a, b, c: _varlen_ref32(a, b, c, lens_q, lens_k, causal, window, scale, _naive), q, k, v, do)
    fin = torch.isfinite(ref[1])
    assert ours[1].shape == (H, sum(lens_q)) and torch.equal(torch.isinf(ours[1]), ~fin)
    assert (ours[1][fin] - ref[1][fin]).abs().max().item() < 1e-2
    for i, name in ((0, "o"), (2, "dq"), (3, "dk"), (4, "dv")):
        _fa_rule(name, ours[i], naive[i], ref[i])


def _varlen_ref32(q, k, v, lens_q, lens_k, causal, window, scale, attend):
    """varlen_reference on the GPU with `attend` (fp32 reference or the naive bf16 one)."""
    outs, lses = [], []
    cq = ck = 0
    for sq, sk in zip(lens_q, lens_k):
        qs, ks, vs = (t[a:a + n].transpose(0, 1)[None] for t, a, n in ((q, cq, sq), (k, ck, sk), (v, ck, sk)))
        keep = window_mask(sq, sk, *window, causal, device=q.device)
        if attend is masked_reference:
            o, lse = masked_reference(qs, ks, vs, keep, scale, torch.float32)
        else:
            o, lse = attend(qs, ks, vs, keep, scale)
        outs.append(o[0].transpose(0, 1).to(q.dtype) if attend is not masked_reference else o[0].transpose(0, 1))
        lses.append(lse[0].float())
        cq, ck = cq + sq, ck + sk
    return torch.cat(outs, 0), torch.cat(lses, 1)


@pytest.mark.gpu
def test_gpu_window_skips_the_gluon_kernels(monkeypatch):
    """A windowed call never reaches the Gluon kernels (they have no window), and the unwindowed
    default still may: the dispatch plans see only unwindowed calls."""
    from drill.kernels import dispatch

    calls = []
    monkeypatch.setattr(dispatch, "_gluon_forward", lambda *a, **kw: calls.append(a) or None)
    q = torch.randn(1, 4, 1024, 128, device="cuda", dtype=torch.bfloat16)
    flash_attention(q, q, q, causal=True, window_size=(128, 0))
    assert calls == []
    flash_attention(q, q, q, causal=True)
    assert len(calls) == 1
