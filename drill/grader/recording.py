"""Arrays that remember which rows were read: how the subject watches the user's loops.

Runs in the subject (a copy sits beside subject.py; numpy only). A RecordingArray is an
ndarray, so slicing, `@` and numpy functions work as usual; every access is logged as a
range of rows (axis 0):
  * `K[j:j + Bc]`, `K[j]`, `K[i:i + Br, :]`: the rows indexed;
  * `np.take(K, idx, axis=0)` (any mode) and `K.take(idx, axis=0)`: the rows named, like `K[idx]`;
  * `Kt = K.T` (or `K.transpose()`) is a recording transpose: `Kt[:, j:j + Bc]` logs rows j..j + Bc;
  * anything that uses the whole array (`K.T @ x`, `np.max(K)`, `K.copy()`, iterating):
    every row; an elementwise ufunc over the whole array (`K * c`) is logged as one pass,
    which a kernel makes once ahead of its loop (drill/iocount.py counts it so).
A one-row access that repeats the one logged just before it for the same array is not
logged again (element-by-element gathers of a row would otherwise fill the log).
An array recorded with "views" (record={position: [name, "views"]}) logs uses, not slices:
`c[a:b]` is a recording view of rows a..b that logs nothing until it is used, so a prefix
sliced once and then used whole again and again shows every use.
A float input's own memory holds placeholders (NaN, read-only); its values are kept in this module, not
on the array, and reach the code only through the paths above, which log. A conversion that takes the memory itself
(`np.asarray(K)`, `np.array(K)`, a buffer) gets the placeholders, so work done on it behind
a loop of slices that fakes the log comes out NaN; the common methods that copy or reshape
(`K.T`, `copy`, `astype`, `reshape`, `ravel`, `dot`, `tolist`, ...) hand out the values, logged.
What is logged here informs the learner; it can fail a check, never pass one.
"""

from __future__ import annotations

import weakref

import numpy as np

LOG_LIMIT = 200_000
_NO_DATA = {np.zeros_like, np.ones_like, np.empty_like, np.full_like, np.shape, np.ndim, np.size,
            np.result_type}


class RecordingArray(np.ndarray):
    def __array_finalize__(self, parent):
        # A new array made from a recording one by C code the methods below do not cover: the
        # parent was read whole; the new array records nothing (and holds placeholders if sealed).
        log = getattr(parent, "_log", None)
        if log is not None:
            _whole(parent)
        self._log = None
        self._name = ""
        self._offset = 0  # the row of the recorded input where this view starts
        self._views = False
        self._axis = 0  # the axis along which the input's rows lie: 1 in its transpose (K.T)

    def __getitem__(self, key):
        values = _values(self)
        if self._log is not None and self._axis:
            _rows(self, key)  # a transpose logs the rows its columns take; its slices are plain
            return values[key]
        if self._log is not None:
            start = _row_slice(self, key)
            if self._views and start is not None:
                view = self.view(np.ndarray)[key].view(RecordingArray)
                view._log, view._name, view._views, view._offset = self._log, self._name, True, self._offset + start
                _seal(view, values[key])
                return view
            _rows(self, key)
        return values[key]

    def __setitem__(self, key, value):
        _values(self)[key] = value  # writes into the caller's copy: not traffic we count

    def __iter__(self):
        _whole(self)
        return iter(_values(self))

    def __repr__(self):
        return repr(_values(self))

    def __str__(self):
        return str(_values(self))

    # Methods that make a new array from the whole input: the values, logged as a whole read.
    @property
    def T(self):
        return _transposed(self)

    @property
    def mT(self):
        return _transposed(self)

    def transpose(self, *axes):
        if axes in ((), (1, 0), ((1, 0),)):
            return _transposed(self)
        return _plain(self).transpose(*axes)

    def reshape(self, *shape, **kwargs):
        return _plain(self).reshape(*shape, **kwargs)

    def copy(self, order="C"):
        return _plain(self).copy(order)

    def astype(self, *args, **kwargs):
        return _plain(self).astype(*args, **kwargs)

    def ravel(self, order="C"):
        return _plain(self).ravel(order)

    def flatten(self, order="C"):
        return _plain(self).flatten(order)

    def squeeze(self, axis=None):
        return _plain(self).squeeze(axis)

    def swapaxes(self, a, b):
        return _plain(self).swapaxes(a, b)

    def dot(self, other, out=None):
        return _plain(self).dot(_plain(other), out)

    def tolist(self):
        return _plain(self).tolist()

    def item(self, *args):
        return _plain(self).item(*args)

    @property
    def flat(self):
        return _plain(self).flat

    def __float__(self):
        return float(_plain(self))

    def __int__(self):
        return int(_plain(self))

    def __bool__(self):
        return bool(_plain(self))

    def __copy__(self):
        return _plain(self).copy()

    def __deepcopy__(self, memo):
        return _plain(self).copy()

    def __reduce__(self):
        return _plain(self).__reduce__()

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        kind = "pass" if ufunc is not np.matmul and method == "__call__" else "rows"
        inputs = tuple(_plain(x, kind=kind) for x in inputs)
        if "out" in kwargs:
            kwargs["out"] = tuple(_plain(x) for x in kwargs["out"])
        return getattr(ufunc, method)(*inputs, **kwargs)

    def take(self, indices, axis=None, out=None, mode="raise"):
        return _take(self, indices, axis, out, mode)

    def __array_function__(self, func, types, args, kwargs):
        if func in _ROW_SPLITS and args and args[0] is self and self._log is not None:
            pieces = _split_rows(self, func, args[1:], kwargs)
            if pieces is not None:
                return pieces
        if func is np.take and args and args[0] is self:
            return _take(self, *args[1:], **kwargs)
        reads = func not in _NO_DATA
        args = tuple(_plain(a, reads) for a in args)
        kwargs = {k: _plain(v, reads) for k, v in kwargs.items()}
        return func(*args, **kwargs)


_ROW_SPLITS = {np.split, np.array_split, np.vsplit}


def _take(array: RecordingArray, indices, axis=None, out=None, mode="raise"):
    """np.take (or .take) along axis 0 reads the rows it names, as array[indices] does; clipped or
    wrapped indices as the mode turns them. Along another axis, or flattened, it reads the whole array."""
    values = _plain(array, reads=False)
    taken = values.take(_plain(indices), axis=axis, out=_plain(out, reads=False), mode=mode)
    if array._log is not None:
        index = np.asarray(_plain(indices))
        n = array.shape[array._axis] if array.ndim else 0
        if n and axis is not None and axis % array.ndim == array._axis and index.dtype.kind in "iu":
            # Clamping repeats the last row (a masked load past the end): it is read once.
            _rows(array, np.unique(np.clip(index, 0, n - 1)) if mode == "clip" else index % n)
        else:
            _whole(array)
    return taken


def _split_rows(array: RecordingArray, func, rest: tuple, kwargs: dict):
    """np.split and its kin along axis 0, as the slices array[lo:hi] they stand for: each piece is
    logged (or, with "views", recorded on use) like a slice, not the whole array as one read. None
    for another axis, or a transpose, which falls back to a whole read."""
    if array._axis:
        return None
    axis = 0 if func is np.vsplit else (rest[1] if len(rest) > 1 else kwargs.get("axis", 0))
    if axis not in (0, -array.ndim) or not array.ndim or (func is np.vsplit and array.ndim < 2):
        return None
    split = np.array_split if func is np.array_split else np.split
    rows = split(np.arange(array.shape[0]), rest[0] if rest else kwargs["indices_or_sections"])
    return [array[int(r[0]):int(r[-1]) + 1] if len(r) else array[0:0] for r in rows]


def _transposed(array: RecordingArray):
    """array.T of a 2-D recording input (K.T, once, ahead of the loops): a recording transpose whose
    column slices log the rows of the input they take (K.T[:, j:j + Bc] reads rows j..j + Bc of K).
    An input recorded with "views" keeps a whole read here: its transposed slices log as they did."""
    if array._log is None or array.ndim != 2 or array._views:
        return _plain(array).T
    view = array.view(np.ndarray).T.view(RecordingArray)  # the placeholders, transposed, if sealed
    view._log, view._name, view._offset = array._log, array._name, array._offset
    view._axis = 1 - array._axis
    _seal(view, _values(array).T)
    return view


# Methods written in C that read the memory itself: on a sealed array they work on the values.
for _name in ("argmax", "argmin", "argsort", "argpartition", "nonzero", "searchsorted", "repeat",
              "compress", "diagonal", "trace", "cumprod", "ptp", "tobytes"):
    setattr(RecordingArray, _name, lambda self, *args, _name=_name, **kwargs: getattr(_plain(self), _name)(*args, **kwargs))

# The values behind sealed arrays, kept here rather than on the arrays: id -> (the array, its values).
_sealed: dict = {}


def _seal(array: RecordingArray, values: np.ndarray) -> None:
    key = id(array)
    _sealed[key] = (weakref.ref(array, lambda _, key=key: _sealed.pop(key, None)), values)


def _values(array: RecordingArray) -> np.ndarray:
    """The plain ndarray of the values behind a recording array (unlogged)."""
    entry = _sealed.get(id(array))
    return entry[1] if entry is not None and entry[0]() is array else array.view(np.ndarray)


def values_of(value):
    """What an argument holds, unlogged: a recorded input's values, not the placeholders in its
    memory (for the grader's look at the arguments after the call)."""
    return _values(value) if isinstance(value, RecordingArray) else value


def _plain(value, reads: bool = True, kind: str = "rows"):
    """The plain ndarray behind a recording one (logging a whole read); lists and tuples too."""
    if isinstance(value, RecordingArray):
        if reads and value._log is not None:
            _whole(value, "rows" if value._views else kind)  # a pass over a view is a pass over its rows only
        return _values(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v, reads, kind) for v in value)
    return value


_last: dict = {}  # id of an array's log and its name -> the entry logged last for it
# Equal entries share one tuple: a loop that uses the same few views again and again logs each
# use (they count as re-reads) at 8 bytes a use, not a new tuple of ~100 bytes. The log lives in
# the user's process, so its size counts in the peak memory the checks measure.
_interned: dict = {}


def _row_slice(array: RecordingArray, key) -> int | None:
    """The first row, if `key` takes a step-1 run of rows (and any columns): a view of rows."""
    first, rest = (key[0], key[1:]) if isinstance(key, tuple) and key else (key, ())
    if not (isinstance(first, slice) and array.ndim and all(isinstance(k, (slice, int, np.integer)) for k in rest)):
        return None
    start, _, step = first.indices(array.shape[0])
    return start if step == 1 else None


def _record(array: RecordingArray, start: int, stop: int, rows: int, kind: str = "rows") -> None:
    log = array._log
    start, stop = start + array._offset, stop + array._offset
    entry = (array._name, int(start), int(stop), int(rows), kind)
    key = (id(log), array._name)
    if rows == 1 and _last.get(key) == entry:  # one element after another of the same row
        return
    entry = _interned.setdefault(entry, entry)
    _last[key] = entry
    if len(log) < LOG_LIMIT:
        log.append(entry)
    elif len(log) == LOG_LIMIT:
        log.append(("", 0, 0, -1, "rows"))  # marks a log cut short


def _whole(array: RecordingArray, kind: str = "rows") -> None:
    n = array.shape[array._axis] if array.ndim else 1
    _record(array, 0, n, n, kind)


def _rows(array: RecordingArray, key) -> None:
    if array._axis:  # a transpose: the rows are its second index; without one, every row is read
        key = key[1] if isinstance(key, tuple) and len(key) == 2 and key[0] is not None else Ellipsis
    first = key[0] if isinstance(key, tuple) and key else key
    n = array.shape[array._axis] if array.ndim else 1
    if isinstance(first, (int, np.integer)):
        row = int(first) % n if n else 0
        _record(array, row, row + 1, 1)
    elif isinstance(first, slice):
        start, stop, step = first.indices(n)
        count = len(range(start, stop, step))
        if count:
            _record(array, start, stop if step == 1 else start + (count - 1) * step + 1, count)
    elif first is Ellipsis or first is None:
        _whole(array)
    else:
        index = np.asarray(first)
        if index.dtype == bool:
            index = np.flatnonzero(index)
        if index.size:
            _record(array, int(index.min()) % n, int(index.max()) % n + 1, int(index.size))


def _placeholders(values: np.ndarray) -> np.ndarray:
    """NaN of values' shape and dtype, in memory no one can write: a memory check subtracts the
    placeholders as the grader's own, so writable ones would be scratch space the code never pays
    for. Backed by bytes, the array cannot be made writable (nor can any view of it)."""
    nan = np.full(1, np.nan, dtype=values.dtype).tobytes() * values.size  # one allocation, no copy after
    return np.frombuffer(nan, dtype=values.dtype).reshape(values.shape)


def wrap(args: list, names: dict) -> tuple[list, list]:
    """Make the arguments at the given positions recording; returns (args, the shared log)."""
    log: list = []
    _interned.clear()  # the entries of earlier calls stay in their own logs
    wrapped = list(args)
    for position, name in names.items():
        i = int(position)
        name, *flags = name if isinstance(name, list) else [name]
        if i < len(wrapped) and isinstance(wrapped[i], np.ndarray):
            values = wrapped[i]
            if values.dtype.kind == "f":  # sealed: its own memory holds placeholders
                rec = _placeholders(values).view(RecordingArray)
                _seal(rec, values)
            else:
                rec = values.view(RecordingArray)
            rec._log = log
            rec._name = str(name)
            rec._views = "views" in flags
            wrapped[i] = rec
    return wrapped, log
