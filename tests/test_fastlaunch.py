"""kernels/fastlaunch.py: a compiled kernel is reused only for arguments Triton would compile
the same way; anything that could change Triton's specialisation goes back through its launcher.
A fake jit function stands in for Triton (no GPU here); the decode GPU tests run the real one."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from drill.kernels import fastlaunch  # noqa: E402


class FakeCompiled:
    function, packed_metadata = "fn-handle", "packed"

    def __init__(self, log):
        self.log = log

    def launch_metadata(self, grid, stream, *args):
        return "meta"

    def run(self, *call):
        self.log.append(("fast", call))


class FakeJit:
    def __init__(self):
        self.log = []

    @staticmethod
    def fn(x, n=16, scale=1.0, flag=False):  # the kernel's signature, as a jit function carries it
        pass

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.log.append(("jit", grid, args, kwargs))
            return FakeCompiled(self.log)
        return launch


@pytest.fixture
def launcher(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(fastlaunch, "_current_stream", lambda device: 77)
    monkeypatch.setattr(fastlaunch, "_current_device", lambda: 0)
    jit = FakeJit()
    return jit, fastlaunch.FastLaunch(jit)


def test_a_repeated_specialisation_skips_the_jit_and_passes_every_argument(launcher):
    jit, launch = launcher
    x, y = torch.zeros(64), torch.zeros(64)
    launch((4, 2), x, 128, 0.5, True, num_warps=8, num_stages=2)
    launch((4, 2), y, 128, 0.5, True, num_warps=8, num_stages=2)
    assert [e[0] for e in jit.log] == ["jit", "fast"]
    grid0, grid1, grid2, stream, fn, packed, meta, enter, leave, *args = jit.log[1][1]
    assert (grid0, grid1, grid2, stream, fn, packed) == (4, 2, 1, 77, "fn-handle", "packed")
    assert args[0] is y and args[1:] == [128, 0.5, True]
    assert launch.launches == {"jit": 1, "fast": 1}


def test_keywords_reach_the_launcher_in_signature_order_with_defaults_filled(launcher):
    jit, launch = launcher
    x, y = torch.zeros(64), torch.zeros(64)
    launch((2,), x, flag=True, n=32, num_warps=4, maxnreg=128)
    launch((2,), y, flag=True, n=32, num_warps=4, maxnreg=128)
    assert jit.log[0][2:] == ((x,), {"flag": True, "n": 32, "num_warps": 4, "maxnreg": 128})
    args = list(jit.log[1][1][9:])  # after grid, stream, function, metadata and hooks
    assert args[0] is y and args[1:] == [32, 1.0, True]


def _descriptor(t, block):
    from triton.tools.tensor_descriptor import TensorDescriptor

    return TensorDescriptor(t, list(t.shape), list(t.stride()), block)


def test_a_descriptor_of_the_same_dtype_and_block_shape_is_reused_whatever_its_tensor(launcher):
    """Triton compiles a host descriptor for its dtype and block shape; the base address, shape
    and strides go to the launcher, which encodes them on each call."""
    jit, launch = launcher
    a, b = torch.zeros(64, 32), torch.zeros(128, 32)
    launch((1,), _descriptor(a, [16, 32]), num_warps=4)
    launch((1,), _descriptor(b, [16, 32]), num_warps=4)
    assert [e[0] for e in jit.log] == ["jit", "fast"]
    assert jit.log[1][1][9].base is b


@pytest.mark.parametrize("change", ["int value", "misaligned pointer", "dtype", "constexpr", "warps",
                                    "launch option", "descriptor block", "descriptor dtype"])
def test_anything_triton_specialises_on_goes_back_through_the_jit(launcher, change):
    jit, launch = launcher
    base = torch.zeros(64)
    desc = _descriptor(torch.zeros(64, 32), [16, 32])
    launch((1,), base, 16, True, desc, num_warps=4, num_stages=3)
    args, opts = [base, 16, True, desc], {"num_warps": 4, "num_stages": 3}
    if change == "int value":
        args[1] = 17
    elif change == "misaligned pointer":
        args[0] = base[1:]  # 4 bytes past a 16-byte boundary
    elif change == "dtype":
        args[0] = torch.zeros(64, dtype=torch.float16)
    elif change == "constexpr":
        args[2] = False
    elif change == "warps":
        opts["num_warps"] = 8
    elif change == "launch option":
        opts["maxnreg"] = 128
    elif change == "descriptor block":
        args[3] = _descriptor(torch.zeros(64, 32), [32, 32])
    else:
        args[3] = _descriptor(torch.zeros(64, 32, dtype=torch.float16), [16, 32])
    launch((1,), *args, **opts)
    assert [e[0] for e in jit.log] == ["jit", "jit"]


def test_the_interpreter_and_the_switch_always_use_triton(launcher, monkeypatch):
    jit, launch = launcher
    x = torch.zeros(8)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    launch((1,), x, num_warps=4, num_stages=1)
    launch((1,), x, num_warps=4, num_stages=1)
    monkeypatch.delenv("TRITON_INTERPRET")
    monkeypatch.setattr(fastlaunch, "enabled", False)
    launch((1,), x, num_warps=4, num_stages=1)
    launch((1,), x, num_warps=4, num_stages=1)
    assert [e[0] for e in jit.log] == ["jit"] * 4


def test_a_launcher_with_another_signature_falls_back_to_triton_for_good(launcher, monkeypatch):
    """A future Triton may change the compiled launcher's arguments: the call must still run,
    through Triton's own path, and every later call too."""
    jit, launch = launcher
    monkeypatch.setattr(fastlaunch, "enabled", True)

    def refuse(*call):
        raise TypeError("run() takes 12 positional arguments")

    x = torch.zeros(8)
    launch((1,), x, num_warps=4, num_stages=1)
    next(iter(launch.compiled.values())).run = refuse
    launch((1,), x, num_warps=4, num_stages=1)
    launch((1,), x, num_warps=4, num_stages=1)
    assert [e[0] for e in jit.log] == ["jit"] * 3
    assert fastlaunch.enabled is False
