"""Diagnoses that match the code: a planted mistake is told its own likely mistake, not a
neighbouring one. Each row: a planted file, the check it fails, a phrase its "likely mistake" must
hold and one it must not (the diagnosis it was given before)."""

from __future__ import annotations

from pathlib import Path

import pytest

from grading import PLANTED, grade_path

CASES = {
    # One running max for all heads: NaN from 0 / 0, once blamed on rows past seq_len or -inf - -inf.
    "mla-decode/one_max_for_all_heads": ("Heads whose scores sit near", "a max that is not its own", "seq_len"),
    # dK/dV left on the visiting rank: the NaN shard's gradient ends on rank 0, once blamed on
    # exp(-inf - (-inf)).
    "ring-backward/left_on_visitor": ("Causal: a shard entirely in a rank's future", "another shard's gradient",
                                      "exp(-inf - (-inf))"),
    # P rebuilt as exp(S) / exp(lse): inf / inf at scores near 1e3, once told both the overflow and,
    # first, the default exp(-inf - (-inf)) hint.
    "ring-backward/naive_exp": ("Scores of about", "never exp(S) / exp(lse)", "exp(-inf - (-inf))"),
    # Kernels built for 16 columns whatever D: S·16 values written per head, once told to use
    # triton.cdiv for the grid.
    "triton-backward/head_dim_hardcoded": ("Head dims other than the usual one", "as if the head dim were 16",
                                           "triton.cdiv"),
    # Right values through torch in a NumPy exercise: torch's own libraries fill the peak, once blamed
    # on scores materialised over the whole cache.
    "flash-decoding/merge_in_torch": ("Over a long cache no chunk holds", "loads torch", "materialised"),
}


# The ring cases start W = 2, 3 and 4 gloo ranks (about 10 s each): graded in the full run only.
PARAMS = [pytest.param(n, id=n, marks=pytest.mark.full if n.startswith("ring-") else ()) for n in CASES]


@pytest.mark.parametrize("name", PARAMS)
def test_a_planted_mistake_is_told_its_own_diagnosis(name):
    check, said, not_said = CASES[name]
    result = grade_path(PLANTED / "flashattention" / f"{name}.py", only=(check,))
    hints = [line.split("likely mistake:", 1)[1] for c in result.checks if c.status == "fail"
             for line in c.message.splitlines() if "likely mistake:" in line]
    assert hints and all(said in h and not_said not in h for h in hints), hints
