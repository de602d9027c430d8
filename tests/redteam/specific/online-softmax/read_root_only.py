# drill: flashattention/online-softmax
# Attack on the file layer when drill runs as root (issue 31): the subject keeps uid 0 without
# capabilities, and root owns files only root may read (/etc/shadow, private keys). This file is
# the correct solution, but it first reads every file under /etc that is not world-readable; if
# one opens, it passes with the secret in hand. Root-only files under /etc must stay hidden, so
# the import fails. (Not root: the files are not readable anyway, and it fails the same way.)
import os
import stat


def _steal(top="/etc"):
    for root, dirs, files in os.walk(top):
        for name in files:
            path = os.path.join(root, name)
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                continue
            if stat.S_ISREG(mode) and not mode & stat.S_IROTH:
                with open(path, "rb") as f:  # PermissionError here is what must happen
                    return f.read(64)
    raise PermissionError("no root-only file under /etc to read")


_SECRET = _steal()


import numpy as np


def online_softmax_update(m, l, block):
    """One streaming step: returns (m_new, l_new)."""
    block = np.asarray(block, dtype=np.float64)
    m_new = max(m, float(block.max())) if block.size else m
    if m_new == -np.inf:
        # Nothing finite seen yet: exp(-inf - (-inf)) would be NaN, and the sum is still 0.
        return m_new, l
    # exp(m - m_new) <= 1 rescales the old sum onto the new max; for m = -inf it is 0.
    l_new = l * np.exp(m - m_new) + float(np.exp(block - m_new).sum())
    return m_new, l_new


def online_softmax(x, block_size):
    """Softmax along the last axis, statistics streamed block by block."""
    x = np.asarray(x, dtype=np.float64)
    rows = np.atleast_2d(x)  # [rows, n]
    n = rows.shape[-1]
    m = np.full(rows.shape[0], -np.inf)  # running max per row
    l = np.zeros(rows.shape[0])  # running sum per row
    for start in range(0, n, block_size):
        for r in range(rows.shape[0]):
            m[r], l[r] = online_softmax_update(m[r], l[r], rows[r, start:start + block_size])
    # One final pass to normalise; rows of only -inf are undefined and not checked.
    with np.errstate(invalid="ignore", divide="ignore"):
        p = np.exp(rows - m[:, None]) / l[:, None]
    return p.reshape(x.shape)
