"""Subject-side helper for the block-mask checks (runs in the untrusted subject).

The grader copies this file beside subject.py. It runs one call of masked_flash_forward
with numpy.where watched: every call whose condition is a boolean array of a score tile's
shape is counted, and so is every one whose condition is all True (a mask applied to a tile
where every pair is visible). What it reports is advice: it can fail a check, never pass one.
"""

from __future__ import annotations

import numpy as np


def call(fn, args, kwargs, spec, user_file):
    Br, Bc = (int(x) for x in spec.get("tile", (0, 0)))
    seen = {"tile_masks": 0, "all_visible": 0}
    original = np.where

    def where(condition, *rest, **kw):
        if rest and isinstance(condition, np.ndarray) and condition.dtype == bool and condition.ndim == 2:
            rows, cols = condition.shape
            if 1 < rows <= Br and 1 < cols <= Bc:
                seen["tile_masks"] += 1
                if bool(condition.all()):
                    seen["all_visible"] += 1
        return original(condition, *rest, **kw)

    np.where = where
    try:
        result = fn(*args, **kwargs)
    finally:
        np.where = original
    return {"result": result, **seen}
