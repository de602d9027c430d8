"""The subject's channel carries plain values only, whatever the user's objects claim to be."""

from __future__ import annotations

import importlib.util
import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from drill.grader import protocol, usertrace

# subject.py runs as a script beside copies of protocol.py and usertrace.py; load it the same way here.
sys.modules.setdefault("protocol", protocol)
sys.modules.setdefault("usertrace", usertrace)
_spec = importlib.util.spec_from_file_location("drill_subject", Path(protocol.__file__).with_name("subject.py"))
subject = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(subject)


def _roundtrip(value):
    stream = io.BytesIO()
    protocol.send(stream, {"event": "x"}, value)
    stream.seek(0)
    return protocol.receive(stream, limit=1 << 30)[1]


def test_plain_values_cross_exactly():
    value = {"a": (1, 2.5, float("nan"), float("-inf"), None, True, "s", 2**70),
             "b": [np.arange(6.0).reshape(2, 3), np.array([1, 2], dtype=np.int32), np.float64(3.5)]}
    back = _roundtrip(value)
    assert back["a"][0] == 1 and back["a"][1] == 2.5 and np.isnan(back["a"][2]) and back["a"][3] == -np.inf
    assert back["a"][4:] == (None, True, "s", 2**70)
    np.testing.assert_array_equal(back["b"][0], np.arange(6.0).reshape(2, 3))
    assert back["b"][1].dtype == np.int32 and back["b"][2] == 3.5
    assert back["b"][0].flags.writeable


def test_lying_objects_arrive_as_what_they_are():
    class Liar(float):
        def __eq__(self, other):
            return True

        def __repr__(self):
            return "1e999"

    class Tricky(tuple):
        def __iter__(self):
            return iter((Tricky(), Tricky()))

    class Anything:
        pass

    back = _roundtrip([Liar(0.25), Tricky((1, 2)), Anything(), np.array([object()])])
    assert type(back[0]) is float and back[0] == 0.25
    assert back[1] == (1, 2) and type(back[1]) is tuple
    assert isinstance(back[2], protocol.Unsupported) and back[2].type_name == "Anything"
    assert isinstance(back[3], protocol.Unsupported)


def test_deep_nesting_and_oversized_arrays_are_refused():
    deep = []
    for _ in range(100):
        deep = [deep]
    assert isinstance(_roundtrip(deep)[0][0][0][0][0][0][0][0], (list, protocol.Unsupported))
    stream = io.BytesIO()
    protocol.send(stream, {"event": "x"}, np.zeros(1000))
    stream.seek(0)
    with pytest.raises(protocol.ProtocolError):
        protocol.receive(stream, limit=100)


def test_a_triton_compile_error_keeps_the_compilers_message():
    class CompilationError(Exception):
        pass

    error = CompilationError("at 46:37:\n    acc += tl.dot(p, v)\n           ^\nValueError('shapes do not match')")
    text = subject._first_line(error)
    assert text.startswith("ValueError('shapes do not match')") and "46:37" in text and "tl.dot" in text


def test_a_triton_compile_error_in_a_helper_names_the_helpers_line_and_the_cause():
    """Triton wraps an error inside a called @triton.jit helper once per call level; the outer
    wrapper ends at the call's caret. The message must come from the innermost one."""
    class CompilationError(Exception):
        pass

    inner = CompilationError("at 12:8:\ndef _step(q, k):\n    s = tl.dot(q, tl.trans(k))\n        ^\n"
                             "Both operands must be same dtype. Got fp32 and bf16")
    inner.__cause__ = AssertionError("Both operands must be same dtype. Got fp32 and bf16")
    outer = CompilationError("at 44:21:\n    for start_m in range(0, S, BLOCK_M):\n"
                             "        dk, dv = _step(q, k)\n                 ^")
    outer.__cause__ = inner
    text = subject._first_line(outer)
    assert text.startswith("Both operands must be same dtype. Got fp32 and bf16"), text
    assert "at 12:8" in text and "tl.dot(q, tl.trans(k))" in text, text
    bare = CompilationError("at 3:4:\n    x = f(y)\n    ^")  # no message: the cause has it
    bare.__cause__ = TypeError("f() takes 0 positional arguments")
    assert subject._first_line(bare).startswith("f() takes 0 positional arguments"), subject._first_line(bare)


def test_a_real_nested_triton_compile_error_reads_as_its_cause():
    """The same with Triton's own exception, compiled for sm_90 (no GPU needed) in a child process
    without TRITON_INTERPRET: a bf16 tile times an fp32 one inside a helper."""
    pytest.importorskip("triton")
    kernel = Path(__file__).with_name("triton_nested_error_kernel.py")
    env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_DEFAULT_FP_FUSION": "1"}
    proc = subprocess.run([sys.executable, str(kernel), str(_spec.origin)], capture_output=True, text=True,
                          env=env, timeout=300)
    text = proc.stdout.strip()
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert text.startswith("Both operands must be same dtype") and "tl.dot" in text, text


class _Trickle(io.RawIOBase):
    """A pipe that hands over a few bytes per read, as a real pipe does past 64 KiB."""

    def __init__(self, data: bytes, step: int = 4096):
        self.data, self.step = data, step

    def readable(self):
        return True

    def readinto(self, buffer):
        n = min(len(buffer), self.step, len(self.data))
        buffer[:n], self.data = self.data[:n], self.data[n:]
        return n


def _raw(header: dict) -> bytes:
    import json
    import struct

    body = json.dumps(header).encode()
    return struct.pack("<Q", len(body)) + body


def test_short_reads_are_read_until_every_byte_arrives():
    big = {"text": "x" * 300_000, "array": np.arange(500_000.0)}
    stream = io.BytesIO()
    protocol.send(stream, {"event": "x"}, big)
    _, back = protocol.receive(_Trickle(stream.getvalue()), limit=1 << 30)
    assert back["text"] == big["text"]
    np.testing.assert_array_equal(back["array"], big["array"])


def test_zero_dimensional_arrays_keep_their_shape():
    back = _roundtrip(np.array(2.5))
    assert back.shape == () and float(back) == 2.5


def test_a_reply_nested_too_deep_is_a_protocol_error():
    deep = "[" * 100_000 + "]" * 100_000
    body = ('{"arrays": 0, "payload": ' + deep + "}").encode()
    import struct

    with pytest.raises(protocol.ProtocolError, match="deep|JSON"):
        protocol.receive(io.BytesIO(struct.pack("<Q", len(body)) + body), limit=1 << 20)
    nested = '{"list": [' * 5000 + "]}" * 5000  # valid JSON, but each level is a value to decode
    body = ('{"arrays": 0, "payload": ' + nested + "}").encode()
    with pytest.raises(protocol.ProtocolError):
        protocol.receive(io.BytesIO(struct.pack("<Q", len(body)) + body), limit=1 << 20)


@pytest.mark.parametrize("payload", [{"array": -1}, {"array": "0"}, {"dict": [[1]]}, {"tuple": 5}])
def test_malformed_values_are_protocol_errors(payload):
    with pytest.raises(protocol.ProtocolError):
        protocol.receive(io.BytesIO(_raw({"arrays": 0, "payload": payload})), limit=1 << 20)


def test_an_array_header_over_budget_is_refused_before_allocating():
    from numpy.lib import format as npy

    stream = io.BytesIO()
    stream.write(_raw({"arrays": 1, "payload": {"array": 0}}))
    npy.write_array_header_2_0(stream, {"descr": "<f8", "fortran_order": False, "shape": (1 << 20, 1 << 20)})
    stream.seek(0)
    with pytest.raises(protocol.ProtocolError, match="more than"):
        protocol.receive(stream, limit=1 << 20)


def test_repro_scripts_carry_names_as_literals_never_as_code(tmp_path):
    """A learner's file named with quotes and newlines must not become code in the --repro script."""
    import subprocess

    from drill.grader import repro

    bundle = tmp_path / "bundle.npz"
    assert repro.save(str(bundle), 'check "x"', "f", [np.arange(3.0)], {}, np.arange(3.0), seed=7)
    name = 'evil"; open("pwned", "w"); x = "\n.py'
    user_file = tmp_path / name
    user_file.write_text("def f(a):\n    return a\n")
    script = repro.write(bundle, user_file)
    run = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert not (tmp_path / "pwned").exists(), run.stdout + run.stderr
    assert run.returncode == 0 and "matches" in run.stdout, run.stdout + run.stderr
    assert "SEED = 7" in script.read_text()
