"""Files a subject leaves for the grader are read only as regular files, capped, without pickle."""

from __future__ import annotations

import os

import numpy as np

from drill.grader.proxy import load_array, read_regular


def test_regular_file_is_read(tmp_path):
    path = tmp_path / "a.npy"
    np.save(path, np.arange(4.0))
    assert np.array_equal(load_array(path, 1 << 20), np.arange(4.0))


def test_fifo_link_device_and_oversize_are_refused_without_blocking(tmp_path):
    fifo = tmp_path / "fifo.npy"
    os.mkfifo(fifo)
    link = tmp_path / "link.npy"
    link.symlink_to("/dev/zero")
    big = tmp_path / "big.npy"
    np.save(big, np.zeros(1000))
    assert read_regular(fifo, 1 << 20) is None  # would block forever if opened for a plain read
    assert read_regular(link, 1 << 20) is None
    assert read_regular(tmp_path / "missing.npy", 1 << 20) is None
    assert read_regular(big, 100) is None


def test_pickled_and_malformed_arrays_are_refused(tmp_path):
    objects = tmp_path / "objects.npy"
    np.save(objects, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    short = tmp_path / "short.npy"
    np.save(short, np.zeros(100))
    short.write_bytes(short.read_bytes()[:-8])
    assert load_array(objects, 1 << 20) is None
    assert load_array(short, 1 << 20) is None
