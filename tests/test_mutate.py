"""The mutation engine: each operator, source in and mutant source out."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from drill import mutate
from drill.paths import solutions_root


def sources(source: str, operator: str) -> list[str]:
    return [m.source for m in mutate.mutants(textwrap.dedent(source), [operator])]


def code(text: str) -> str:
    return textwrap.dedent(text)


def test_drop_factor_leaves_out_one_side_of_a_product():
    assert sources("l_new = alpha * l + s  # rescale\n", "drop-factor") == [
        "l_new = l + s  # rescale\n",
        "l_new = alpha + s  # rescale\n",
    ]


def test_drop_factor_keeps_constants_and_leaves_the_scale_to_its_own_operator():
    assert sources("y = 2 * x\nS = (Q @ K.T) * scale\n", "drop-factor") == ["y = x\nS = (Q @ K.T) * scale\n"]


def test_exp_base_swaps_exp_and_exp2_log_and_log2():
    assert sources("p = np.exp(s - m)\nL = m + np.log2(l)\n", "exp-base") == [
        "p = np.exp2(s - m)\nL = m + np.log2(l)\n",
        "p = np.exp(s - m)\nL = m + np.log(l)\n",
    ]


def test_shift_comparison_moves_the_boundary():
    assert sources("mask = col <= row + offset\nok = a > 0\n", "shift-comparison") == [
        "mask = col < row + offset\nok = a > 0\n",
        "mask = col <= row + offset\nok = a >= 0\n",
    ]


def test_init_value_swaps_minus_inf_and_zero_but_not_in_a_test():
    src = code("""\
        import numpy as np
        m = np.full(n, -np.inf)
        l = 0.0
        acc = np.zeros((n, d))
        if m_new == -np.inf:
            pass
        """)
    assert sources(src, "init-value") == [
        src.replace("np.full(n, -np.inf)", "np.full(n, 0.0)"),
        src.replace("l = 0.0", "l = -np.inf"),
        src.replace("np.zeros((n, d))", "np.full((n, d), -np.inf)"),
    ]


def test_init_value_without_numpy_uses_float():
    assert sources("total = 0\n", "init-value") == ["total = float('-inf')\n"]


def test_drop_scale_removes_the_softmax_scale():
    assert sources("S = Q @ K.T * scale\nx = y / np.sqrt(d)\n", "drop-scale") == [
        "S = Q @ K.T\nx = y / np.sqrt(d)\n",
        "S = Q @ K.T * scale\nx = y\n",
    ]


def test_reduction_axis_changes_the_axis_and_drops_keepdims():
    assert sources("m = S.max(axis=-1, keepdims=True)\n", "reduction-axis") == [
        "m = S.max(axis=0, keepdims=True)\n",
        "m = S.max(axis=-1)\n",
    ]
    assert sources("t = np.sum(x, axis=0)\n", "reduction-axis") == ["t = np.sum(x, axis=-1)\n"]


def test_block_bound_moves_a_range_by_its_step_and_a_slice_by_one():
    assert sources("for j in range(0, sk, Bc):\n    k = K[j:j + Bc]\n", "block-bound") == [
        "for j in range(0, sk - Bc, Bc):\n    k = K[j:j + Bc]\n",
        "for j in range(Bc, sk, Bc):\n    k = K[j:j + Bc]\n",
        "for j in range(0, sk, Bc):\n    k = K[j:j + Bc - 1]\n",
        "for j in range(0, sk, Bc):\n    k = K[j + 1:j + Bc]\n",
    ]


def test_delete_statement_drops_updates_writes_and_guards_not_first_bindings():
    src = code("""\
        def f(x, m):
            m_new = max(m, x)
            if m_new < 0:
                return 0
            acc += x
            out[0] = x
            m = m_new
            return m
        """)
    found = sources(src, "delete-statement")
    assert found == [
        src.replace("    if m_new < 0:\n        return 0\n", ""),
        src.replace("    acc += x\n", ""),
        src.replace("    out[0] = x\n", ""),
        src.replace("    m = m_new\n", ""),
    ]


def test_delete_statement_leaves_pass_in_an_otherwise_empty_block():
    assert sources("def f(o):\n    for i in r:\n        o[i] = 1\n", "delete-statement") == [
        "def f(o):\n    for i in r:\n        pass\n"]


def test_swap_operands_only_where_order_matters():
    assert sources("a = m - m_new\nb = x * y\nc = x - x\n", "swap-operands") == [
        "a = m_new - m\nb = x * y\nc = x - x\n"]


def test_a_replacement_that_needs_parentheses_gets_them():
    # Dropping `a` from a * (b + c) leaves b + c, which must stay grouped under the `* d`.
    assert "y = (b + c) * d\n" in sources("y = a * (b + c) * d\n", "drop-factor")


def test_every_mutant_is_one_hunk_that_parses_and_has_a_stable_unique_id():
    path = solutions_root() / "flashattention" / "03_flash_forward.py"
    source = path.read_text()
    first, again = mutate.mutants(source), mutate.mutants(source)
    assert len(first) >= 30
    assert [m.id for m in first] == [m.id for m in again]
    assert len({m.id for m in first}) == len(first)
    assert len({m.operator for m in first}) == len(mutate.OPERATORS)
    for m in first:
        ast.parse(m.source)
        assert sum(line.startswith("@@") for line in m.diff.splitlines()) == 1, m.diff  # a single hunk
        assert m.source != source


def test_an_edit_elsewhere_keeps_a_mutants_id():
    src = "def f(m, x):\n    return m - x\n"
    [before] = mutate.mutants(src, ["swap-operands"])
    [after] = mutate.mutants("# a comment on top\n\n" + src, ["swap-operands"])
    assert before.id == after.id and before.line + 2 == after.line


def test_spread_takes_every_operator_in_turn():
    found = mutate.mutants((solutions_root() / "flashattention" / "03_flash_forward.py").read_text())
    chosen = mutate.spread(found, 9)
    assert len(chosen) == 9 and len({m.operator for m in chosen}) == 9
    assert mutate.spread(found, None) == found


NUMPY = ["01", "02", "03", "04", "05", "08", "09", "13", "14"]


@pytest.mark.parametrize("number", NUMPY)
def test_the_numpy_solutions_and_two_variants_each_give_at_least_eight_mutants(number):
    from drill import catalog

    [path] = (solutions_root() / "flashattention").glob(f"{number}_*.py")
    assert len(mutate.mutants(path.read_text())) >= 8
    # The honest variants (tests/variants/) are mutated too: `drill dev mutants` grades them all.
    ex = catalog.resolve(number)
    variants = sorted((Path(__file__).parent / "variants" / ex.topic / ex.id).glob("*.py"))
    counts = {variant.name: len(mutate.mutants(variant.read_text())) for variant in variants}
    assert sum(n >= 8 for n in counts.values()) >= 2 and all(counts.values()), counts
