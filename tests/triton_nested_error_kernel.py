"""A Triton kernel that cannot compile for a GPU: its helper multiplies a bf16 tile by an fp32
one (the bf16 load times an fp32 scalar is fp32). The interpreter runs it; the compiler refuses
it inside the helper, which Triton reports wrapped in the caller's error (tests/test_protocol.py)."""

import triton
import triton.language as tl


@triton.jit
def _helper(X, scale, N: tl.constexpr):
    rows = tl.arange(0, N)
    x = tl.load(X + rows[:, None] * N + rows[None, :])
    y = x * scale
    return tl.dot(y, tl.trans(x))


@triton.jit
def outer(X, scale, N: tl.constexpr):
    acc = _helper(X, scale, N)
    tl.store(X + tl.arange(0, N)[:, None] * N + tl.arange(0, N)[None, :], acc.to(tl.bfloat16))


if __name__ == "__main__":  # python triton_nested_error_kernel.py PATH/TO/drill/grader/subject.py
    import importlib.util
    import sys

    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    sys.path.insert(0, sys.argv[1].rsplit("/", 1)[0])  # subject.py imports protocol.py and usertrace.py beside it
    spec = importlib.util.spec_from_file_location("drill_subject", sys.argv[1])
    subject = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(subject)
    try:
        triton.compile(ASTSource(outer, {"X": "*bf16", "scale": "fp32", "N": "constexpr"}, {"N": 16}),
                       target=GPUTarget("cuda", 90, 32))
    except Exception as exc:  # noqa: BLE001 - the error is what this prints
        print(subject._first_line(exc))
    else:
        sys.exit("compiled: the kernel was meant not to")
