"""Subject-side helper for the block-mask checks (runs in the untrusted subject).

The grader copies this file beside subject.py. It runs one call of masked_flash_forward
with numpy.where watched: every call whose condition is a boolean array of a score tile's
shape is counted, and so is every one that masks no pair of its tile (a mask applied to a
tile where every pair is visible): a boolean condition all True, or a fill of -inf (or below
-1e6) that the condition gives to no pair, whichever way round the mask is written. A call
whose two values are both boolean composes a mask from masks (np.where(ok, same_doc, False))
and touches no score: it is not counted. What it reports is advice: it can fail a check,
never pass one.
"""

from __future__ import annotations

import numpy as np


def _is_fill(value) -> bool:
    """Is value a masking fill: -inf, or a finite stand-in at or below -1e6 (-1e9, finfo.min), everywhere?"""
    try:
        arr = np.asarray(value)
        return arr.size > 0 and arr.dtype.kind in "fi" and bool((arr <= -1e6).all())
    except Exception:
        return False


def _is_bool(value) -> bool:
    """A boolean value (array or Python bool): np.where over two of them composes a mask, it masks no score."""
    try:
        return np.asarray(value).dtype == bool
    except Exception:
        return False


def call(fn, args, kwargs, spec, user_file):
    Br, Bc = (int(x) for x in spec.get("tile", (0, 0)))
    seen = {"tile_masks": 0, "all_visible": 0}
    original = np.where

    def where(condition, *rest, **kw):
        if (len(rest) == 2 and isinstance(condition, np.ndarray) and condition.ndim == 2
                and not (_is_bool(rest[0]) and _is_bool(rest[1]))):
            rows, cols = condition.shape
            if 1 < rows <= Br and 1 < cols <= Bc:
                picked = condition.astype(bool)
                if condition.dtype == bool:
                    seen["tile_masks"] += 1
                    if bool(picked.all()):
                        seen["all_visible"] += 1
                # The mask written the other way round (np.where(hidden, -inf, s)) or with a 0/1
                # integer mask: a fill of -inf (or a huge negative stand-in) that no pair takes.
                elif _is_fill(rest[1]) and bool(picked.all()):
                    seen["all_visible"] += 1
                if _is_fill(rest[0]) and not bool(picked.any()):
                    seen["all_visible"] += 1
        return original(condition, *rest, **kw)

    np.where = where
    try:
        result = fn(*args, **kwargs)
    finally:
        np.where = original
    return {"result": result, **seen}
