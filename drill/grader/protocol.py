"""Messages between the trusted grader and the subject process, by value only.

A message is a JSON header followed by the arrays it refers to, each in .npy format.
Values allowed: None, bool, int, float, str, numpy arrays, and tuples, lists and dicts
(string keys) of those. Nothing is pickled: an array of dtype object is refused.

This file is standalone (standard library and numpy only): the subject runs a copy
of it from its scratch folder, without importing the rest of drill.
"""

from __future__ import annotations

import json
import struct

import numpy as np
from numpy.lib import format as npy

_LENGTH = struct.Struct("<Q")
HEADER_LIMIT = 16 * 1024 * 1024


class ProtocolError(Exception):
    """The other side sent something that is not a well-formed message."""


class Unsupported:
    """A value of a type that cannot cross: carried as its type name only."""

    def __init__(self, type_name: str):
        self.type_name = type_name

    def __repr__(self) -> str:
        return f"<{self.type_name} object>"


def _encode(value, arrays: list, depth: int = 0):
    if depth > 64:
        return {"unsupported": "structure nested more than 64 deep"}
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        value = int(value)  # a subclass's own methods play no part from here on
        return {"int": str(value)} if abs(value) >= 2**53 else value
    if isinstance(value, float):
        return {"float": float.__repr__(value)}  # exact, nan and inf too; a subclass's repr is not asked
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject or value.dtype.fields is not None:
            return {"unsupported": f"ndarray of dtype {value.dtype}"}
        arrays.append(value)
        return {"array": len(arrays) - 1}
    if isinstance(value, np.generic):
        return _encode(value.item(), arrays, depth + 1) if not isinstance(value, np.void) else {"unsupported": "numpy.void"}
    # The base classes' own iteration: a subclass's __iter__ or items() play no part.
    if isinstance(value, tuple):
        return {"tuple": [_encode(v, arrays, depth + 1) for v in tuple.__iter__(value)]}
    if isinstance(value, list):
        return {"list": [_encode(v, arrays, depth + 1) for v in list.__iter__(value)]}
    if isinstance(value, dict):
        items = list(dict.items(value))
        if not all(isinstance(k, str) for k, _ in items):
            return {"unsupported": "dict with keys that are not strings"}
        return {"dict": [[str.__str__(k), _encode(v, arrays, depth + 1)] for k, v in items]}
    return {"unsupported": type(value).__name__}


def _decode(value, arrays: list):
    if value is None or isinstance(value, (bool, str, int)):
        return value
    if isinstance(value, dict) and len(value) == 1:
        (kind, body), = value.items()
        if kind == "float":
            return float(body)
        if kind == "int":
            return int(body)
        if kind == "array":
            if type(body) is not int or not 0 <= body < len(arrays):
                raise ProtocolError("a value names an array that was not sent")
            return arrays[body]
        if kind == "tuple":
            return tuple(_decode(v, arrays) for v in body)
        if kind == "list":
            return [_decode(v, arrays) for v in body]
        if kind == "dict":
            return {str(k): _decode(v, arrays) for k, v in body}
        if kind == "unsupported":
            return Unsupported(str(body))
    raise ProtocolError(f"malformed value in message: {str(value)[:80]}")


def send(stream, header: dict, payload=None) -> None:
    """Write one message: `header` (plain JSON) and `payload` (any allowed value)."""
    arrays: list = []
    doc = dict(header, payload=_encode(payload, arrays), arrays=len(arrays))
    body = json.dumps(doc).encode()
    stream.write(_LENGTH.pack(len(body)) + body)
    for array in arrays:
        array = np.require(array, requirements="C")  # unlike ascontiguousarray, keeps a 0-d array 0-d
        npy.write_array_header_2_0(stream, npy.header_data_from_array_1_0(array))
        if array.size:
            stream.write(memoryview(array.reshape(-1)).cast("B"))  # no copy, and pipes need no seek
    stream.flush()


def receive(stream, limit: int) -> tuple[dict, object]:
    """Read one message; at most `limit` bytes of arrays. Returns (header, payload)."""
    try:
        header = json.loads(_read_exact(stream, _read_length(stream, HEADER_LIMIT)))
    except RecursionError:
        raise ProtocolError("a message nested too deep") from None
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        raise ProtocolError(f"a message that is not JSON ({exc})") from None
    if not isinstance(header, dict) or not isinstance(header.get("arrays"), int):
        raise ProtocolError("message without a header")
    arrays, budget = [], limit
    for _ in range(header["arrays"]):
        array = _read_array(stream, budget)
        budget -= array.nbytes
        arrays.append(array)
    try:
        return header, _decode(header.get("payload"), arrays)
    except RecursionError:
        raise ProtocolError("a value nested too deep") from None
    except (TypeError, ValueError, IndexError, KeyError) as exc:
        raise ProtocolError(f"a malformed value ({type(exc).__name__})") from None


def _read_length(stream, limit: int) -> int:
    (length,) = _LENGTH.unpack(_read_exact(stream, _LENGTH.size))
    if length > limit:
        raise ProtocolError(f"message of {length} bytes is over the limit")
    return length


def _read_exact(stream, size: int) -> bytes:
    """`size` bytes, however many reads it takes (a pipe hands over at most 64 KiB at a time)."""
    parts, left = [], size
    while left:
        data = stream.read(left)
        if not data:
            raise EOFError("the other side closed the channel")
        parts.append(data)
        left -= len(data)
    return b"".join(parts)


def _read_array(stream, budget: int) -> np.ndarray:
    try:
        version = npy.read_magic(stream)
        read_header = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
        shape, fortran, dtype = read_header(stream)
    except ValueError as exc:
        raise ProtocolError(f"malformed array: {exc}") from None
    if dtype.hasobject:
        raise ProtocolError("an array of Python objects cannot cross")
    count = 1
    for n in shape:
        count *= int(n)
    if count * dtype.itemsize > budget:  # before anything is allocated
        raise ProtocolError(f"arrays of more than {budget} bytes in one message")
    array = np.empty(shape, dtype=dtype, order="F" if fortran else "C")
    view = memoryview(array.reshape(-1, order="A")).cast("B") if array.size else memoryview(b"")
    filled = 0
    while filled < len(view):
        n = stream.readinto(view[filled:])
        if not n:
            raise EOFError("the other side closed the channel inside an array")
        filled += n
    return array
