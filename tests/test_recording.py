"""What the subject's recording arrays log: rows read, and with "views" each use of a slice."""

from __future__ import annotations

import numpy as np

from drill.grader import recording


def _log_of(names, fn):
    (arr,), log = recording.wrap([np.arange(40.0).reshape(20, 2)], {"0": names})
    fn(arr)
    return [entry[:4] for entry in log]


def test_plain_recording_logs_each_slice_once():
    log = _log_of("c", lambda c: [c[0:5] @ np.ones(2) for _ in range(3)])
    assert log == [("c", 0, 5, 5)] * 3


def test_a_slice_used_whole_again_and_again_shows_every_use_when_recorded_as_views():
    def per_head(c):
        prefix = c[:12]  # sliced once
        for _ in range(3):
            prefix @ np.ones(2)  # then used whole three times

    assert _log_of("c", per_head) == [("c", 0, 12, 12)]  # plain recording: one read, the uses unseen
    assert _log_of(["c", "views"], per_head) == [("c", 0, 12, 12)] * 3


def test_views_of_views_log_rows_of_the_recorded_input():
    def blocks(c):
        prefix = c[2:18]
        for start in range(0, 16, 8):
            block = prefix[start:start + 8]
            block.T @ np.ones(8)  # a use, in the input's own row numbers
            _ = block[1]

    assert _log_of(["c", "views"], blocks) == [("c", 2, 10, 8), ("c", 3, 4, 1), ("c", 10, 18, 8), ("c", 11, 12, 1)]


def test_a_conversion_logs_nothing():
    assert _log_of(["c", "views"], lambda c: np.asarray(c)[:5] @ np.ones(2)) == []


def test_a_float_input_hands_out_its_values_only_through_logged_paths():
    real = np.arange(40.0).reshape(20, 2)
    (arr,), log = recording.wrap([real.copy()], {"0": "c"})
    assert np.isnan(np.asarray(arr)).all()  # the memory itself: placeholders
    assert np.array_equal(arr[3:5], real[3:5]) and np.array_equal(arr.T, real.T)
    assert np.array_equal(arr.copy(), real) and np.array_equal(arr.astype(np.float32), real.astype(np.float32))
    assert np.array_equal(arr * 2, real * 2) and np.array_equal(np.max(arr, axis=1), real.max(axis=1))
    assert float(arr.sum()) == float(real.sum()) and arr.tolist() == real.tolist()
    assert [entry[1:3] for entry in log][:2] == [(3, 5), (0, 20)]


def test_methods_written_in_c_and_copies_see_the_values_not_the_placeholders():
    import copy

    real = np.random.default_rng(0).normal(size=(20, 3))
    (arr,), _ = recording.wrap([real.copy()], {"0": "c"})
    assert arr.argmax() == real.argmax() and np.array_equal(arr.argsort(axis=1), real.argsort(axis=1))
    assert np.array_equal(copy.deepcopy(arr), real) and np.array_equal(copy.copy(arr), real)
    assert np.array_equal(arr.take([1, 4], axis=0), real[[1, 4]]) and arr.trace() == real.trace()
    assert not hasattr(arr, "_values")  # the values are not an attribute of the array


def test_a_long_log_of_repeated_uses_comes_back_whole_and_costs_the_subject_little(tmp_path):
    # 40k uses of 20 views: every use comes back, in order, while the log travels as its distinct
    # entries and an index, so the memory measured around the call stays near the arrays' own.
    from drill.grader.proxy import Subject

    user = tmp_path / "uses.py"
    user.write_text("import numpy as np\n"
                    "def uses(c, n):\n"
                    "    w = np.ones((2, 2))\n"
                    "    for i in range(n):\n"
                    "        b = c[(i % 20) * 10:(i % 20) * 10 + 10]\n"
                    "        b @ w\n"
                    "    return 0.0\n")
    subject = Subject(user, ["uses"], scratch_root=tmp_path / "scratch", hidden=[], memory_mb=2048)
    subject.start()
    try:
        outcome = subject.call("uses", [np.zeros((200, 2)), 40_000], {}, record={"0": ["c", "views"]},
                               measure_memory=True)
    finally:
        subject.close()
    assert len(outcome.reads) == 40_000
    assert [tuple(r[:4]) for r in outcome.reads[:21]] == [("c", (i % 20) * 10, (i % 20) * 10 + 10, 10)
                                                          for i in range(21)]
    assert outcome.peak_bytes < 4 * 2**20, outcome.peak_bytes  # one list per use was ~10 MiB


def test_a_read_record_that_does_not_decode_breaks_the_protocol():
    import pytest

    from drill.grader.proxy import SubjectGone, _unpacked_reads

    assert _unpacked_reads(None) is None
    for forged in ([["c", 0, 1, 1, "rows"]], {"entries": [["c", 0, 1, 1, "rows"]], "order": "AQAAAA=="},
                   {"entries": [], "order": "not base64!"}, {"order": ""}):
        with pytest.raises(SubjectGone, match="did not decode"):
            _unpacked_reads(forged)


def test_np_split_along_rows_is_logged_as_the_slices_it_stands_for():
    log = _log_of("K", lambda k: [piece @ np.ones(2) for piece in np.split(k, range(8, 20, 8))])
    assert log == [("K", 0, 8, 8), ("K", 8, 16, 8), ("K", 16, 20, 4)]
    assert _log_of("K", lambda k: np.array_split(k, 3)) == [("K", 0, 7, 7), ("K", 7, 14, 7), ("K", 14, 20, 6)]
    assert _log_of("K", lambda k: np.split(k, 2, axis=1)) == [("K", 0, 20, 20)]  # columns: a whole read


def test_take_along_rows_is_logged_as_the_rows_it_names():
    def clamped(k):
        tile = np.take(k, np.arange(16, 24), axis=0, mode="clip")  # rows 16..19, the last one repeated
        assert (tile[4:] == np.arange(38.0, 40.0)).all()  # the values, not the placeholders
    assert _log_of("K", clamped) == [("K", 16, 20, 4)]
    assert _log_of("K", lambda k: k.take([3, 5], axis=0)) == [("K", 3, 6, 2)]
    assert _log_of("K", lambda k: np.take(k, [1], axis=1)) == [("K", 0, 20, 20)]  # a column: a whole read
    assert _log_of("K", lambda k: k.take([1, 2])) == [("K", 0, 20, 20)]  # flattened: a whole read


def test_a_transpose_logs_the_rows_its_column_slices_take():
    def streamed(k):
        kt = k.T
        assert (kt[:, 4:6] == np.arange(8.0, 12.0).reshape(2, 2).T).all()  # the values, not the placeholders
        kt[:, 19]
        assert (np.asarray(kt) != np.asarray(kt)).all()  # a conversion still sees only placeholders
    assert _log_of("K", streamed) == [("K", 4, 6, 2), ("K", 19, 20, 1)]
    assert _log_of("K", lambda k: k.T @ np.ones(20)) == [("K", 0, 20, 20)]  # used whole: every row
    assert _log_of("K", lambda k: k.T[0]) == [("K", 0, 20, 20)]  # one column of K: every row
    assert _log_of("K", lambda k: k.transpose().T[3:5]) == [("K", 3, 5, 2)]
    assert _log_of("K", lambda k: np.split(k.T, 2, axis=1)) == [("K", 0, 20, 20)]
