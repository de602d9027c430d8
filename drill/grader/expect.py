"""Assertions for hidden checks, written for the learner.

Comparison helpers are bound here, before the user's file is imported, so a
submission that patches numpy's comparison functions cannot change a verdict.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# Bound before any user code runs (see module docstring).
_asarray = np.asarray
_abs = np.abs
_isnan = np.isnan
_isfinite = np.isfinite
_max = np.max
_ndarray = np.ndarray
_array2string = np.array2string


class CheckFailure(AssertionError):
    """A check's verdict: what was called, what came back, what was expected, the likely mistake."""

    def __init__(self, summary: str, *, called: str = "", got: str = "", expected: str = "", hint: str = ""):
        self.summary = summary
        self.called = called
        self.got = got
        self.expected = expected
        self.hint = hint
        super().__init__(self.text())

    def text(self) -> str:
        lines = [self.summary]
        for label, value in (("called", self.called), ("yours", self.got), ("expected", self.expected)):
            if value:
                lines.append(f"{label}: {value}")
        if self.hint:
            lines.append(f"likely mistake: {self.hint}")
        return "\n".join(lines)

    def details(self) -> dict[str, str]:
        return {"called": self.called, "got": self.got, "expected": self.expected, "hint": self.hint}


def fail(summary: str, **fields: str) -> None:
    raise CheckFailure(summary, **fields)


_notes: list[str] = []


def note(text: str) -> None:
    """Attach a line of information (figures, not a verdict) to the running check.

    The recorder sends it with the check's event; the report prints it and --json carries
    it, in the check's `notes` and in the result's `notes`.
    """
    _notes.append(str(text))


def noted(text: str) -> bool:
    """Whether the running check has noted `text` so far."""
    return text in _notes


def take_notes() -> list[str]:
    """The notes made since the last call, cleared."""
    taken = list(_notes)
    _notes.clear()
    return taken


def show(value, limit: int = 6) -> str:
    """A short, readable rendering of a value for a failure message."""
    if isinstance(value, _ndarray):
        flat = value.reshape(-1)
        body = _array2string(flat[:limit], precision=5, separator=", ", max_line_width=200)
        more = f" … ({flat.size} values)" if flat.size > limit else ""
        return f"array{tuple(value.shape)} {body}{more}"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, tuple):
        return "(" + ", ".join(show(v, limit) for v in value) + ")"
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


@dataclass(frozen=True)
class Call:
    """Names a call for messages: Call('online_softmax', 'x[2x7], block_size=3')."""

    function: str
    arguments: str

    def __str__(self) -> str:
        return f"{self.function}({self.arguments})"


def array(value, call: Call | str, *, shape: tuple | None = None, what: str = "the result") -> np.ndarray:
    """Check that `value` is an ndarray of the right shape; return it as float64 (see no_nan for NaN)."""
    if not isinstance(value, _ndarray):
        fail(
            f"{call} returned {type(value).__name__} for {what}, not a numpy array",
            called=str(call),
            got=show(value),
            expected=f"np.ndarray of shape {shape}" if shape is not None else "np.ndarray",
        )
    if shape is not None and tuple(value.shape) != tuple(shape):
        fail(
            f"{what} has the wrong shape",
            called=str(call),
            got=f"shape {tuple(value.shape)}",
            expected=f"shape {tuple(shape)}",
        )
    out = _asarray(value, dtype=np.float64)
    return out


def no_nan(value: np.ndarray, call: Call | str, what: str = "the result", hint: str = "") -> None:
    if bool(_isnan(value).any()):
        fail(f"{what} contains NaN", called=str(call), got=show(value), hint=hint)


def max_error(got: np.ndarray, want: np.ndarray) -> float:
    """Largest |got - want| where both are finite; inf where finiteness differs or values differ in sign of inf."""
    got = _asarray(got, dtype=np.float64)
    want = _asarray(want, dtype=np.float64)
    fin_g, fin_w = _isfinite(got), _isfinite(want)
    if bool((fin_g != fin_w).any()):
        return math.inf
    nonfinite = ~fin_w
    if bool(nonfinite.any()) and bool((got[nonfinite] != want[nonfinite]).any()):
        return math.inf
    if not bool(fin_w.any()):
        return 0.0
    return float(_max(_abs(got[fin_w] - want[fin_w])))


NAN_HINT = "a block or row with no finite logit produced exp(-inf - (-inf)) = NaN"


def close(got, want, call: Call | str, *, atol: float, rtol: float = 0.0, what: str = "the result",
          hint: str = "", nan_hint: str = "") -> None:
    """Fail unless |got - want| <= atol + rtol*|want| everywhere (inf must match inf exactly).

    `hint` names the likely mistake for wrong values, `nan_hint` for a NaN in the result.
    """
    got = _asarray(got, dtype=np.float64)
    want = _asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        fail(f"{what} has the wrong shape", called=str(call), got=f"shape {got.shape}", expected=f"shape {want.shape}")
    no_nan(got, call, what, hint=nan_hint or hint or NAN_HINT)
    fin_w = _isfinite(want)
    bad = (_isfinite(got) != fin_w) | (~fin_w & (got != want))
    both = fin_w & _isfinite(got)
    tol = atol + rtol * _abs(want[both])
    bad_values = _abs(got[both] - want[both]) > tol
    if bool(bad.any()) or bool(bad_values.any()):
        err = max_error(got, want)
        where = _worst_index(got, want)
        fail(
            f"{what} is wrong (largest error {err:.3g}, allowed {atol:g} + {rtol:g}·|expected|)",
            called=str(call),
            got=f"{show(got)}; where the error is largest, index {where}: {float(got[where]):.10g}",
            expected=f"{show(want)}; at index {where}: {float(want[where]):.10g}",
            hint=hint,
        )


def _worst_index(got: np.ndarray, want: np.ndarray) -> tuple:
    """Where the error is largest: a finiteness mismatch first, else the largest |got - want|."""
    fin_g, fin_w = _isfinite(got), _isfinite(want)
    mismatch = (fin_g != fin_w) | (~fin_w & (got != want))
    if bool(mismatch.any()):
        flat = int(np.flatnonzero(mismatch.reshape(-1))[0])
    else:
        with np.errstate(invalid="ignore"):
            errors = np.where(fin_w, _abs(got - want), 0.0)
        flat = int(np.argmax(errors.reshape(-1)))
    return tuple(int(k) for k in np.unravel_index(flat, got.shape))


def matches(got, candidate, atol: float = 1e-9) -> bool:
    """True if the user's value equals a known-wrong variant (used to name the mistake)."""
    try:
        g = _asarray(got, dtype=np.float64)
        c = _asarray(candidate, dtype=np.float64)
    except (TypeError, ValueError):
        return False
    return g.shape == c.shape and max_error(g, c) <= atol
