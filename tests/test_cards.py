"""Deck lint: the follow-up cards load, read well in both languages, and their numbers are right."""

from __future__ import annotations

import itertools
import math

import pytest

from drill import cards, mathtext

TOPIC = "flashattention"
EXERCISE_IDS = {
    "online-softmax", "tiling-shapes", "flash-forward", "lse-merge",
    "flash-backward", "ring-attention", "triton-forward",
}
MAIN_QUESTIONS = {
    "main-explain-flashattention", "main-online-softmax", "main-why-faster", "main-ring-lse-merge",
}


@pytest.fixture(scope="module")
def deck() -> cards.Deck:
    return cards.load_deck(TOPIC)


def _online_softmax_l(row, blocks):
    m, l = -math.inf, 0.0
    for block in blocks:
        chunk = row[block]
        m_new = max(m, max(chunk))
        l = l * math.exp(m - m_new) + sum(math.exp(x - m_new) for x in chunk)
        m = m_new
    return l


def _block_sizes(M, d):
    bc = math.ceil(M / (4 * d))
    return min(bc, d), bc


def _logaddexp(a, b):
    return max(a, b) + math.log1p(math.exp(-abs(a - b)))


def _bottom_right_visible(i, sq, sk):
    return sum(1 for j in range(sk) if j <= i + (sk - sq))


H100_M = 228 * 1024 // 2  # 228 KB of SRAM holding 2-byte elements
H100_SMS = 132  # H100 SXM


def _kv_bytes_per_token(layers, kv_heads, head_dim, dtype_bytes):
    return 2 * layers * kv_heads * head_dim * dtype_bytes


def _logsumexp(values):
    top = max(values)
    return top + math.log(sum(math.exp(v - top) for v in values))


def _window_blocks(first_row, block, window):
    """Key blocks a causal sliding-window query block touches: keys i - window < j <= i."""
    rows = range(first_row, first_row + block)
    keys = {j for i in rows for j in range(max(0, i - window + 1), i + 1)}
    return len({j // block for j in keys})


def _flash_intensity(s, d, br, dtype_bytes):
    """FLOPs per HBM byte of a FlashAttention-2 forward if every K/V re-read went to HBM."""
    from drill import iocount

    return iocount.flops(s, d) / (iocount.flash_elements(s, d, br) * dtype_bytes)

# Every number that follows from a formula, recomputed here rather than trusted.
DERIVED = {
    "fig2-hbm-ratio": 40.3 / 4.4,
    "fig2-speedup": 41.7 / 7.3,
    "score-matrix-size": 4096**2 / 1e6,
    "score-matrix-bytes": 4096**2 * 2 / 1e6,
    "block-size-h100-bc": _block_sizes(H100_M, 128)[1],
    "block-size-h100-br": _block_sizes(H100_M, 128)[0],
    "block-size-h100-d64": _block_sizes(H100_M, 64)[1],
    "num-blocks-ragged": 1000 - (math.ceil(1000 / 64) - 1) * 64,
    "online-example-first-block": _online_softmax_l([1, 3, 2, 5], [slice(0, 2)]),
    "online-example-second-block": _online_softmax_l([1, 3, 2, 5], [slice(0, 2), slice(2, 4)]),
    "causal-skipped-blocks": sum(1 for i in range(32) for j in range(32) if j > i),
    "causal-alignment-count": _bottom_right_visible(0, 2, 5),
    "ring-merge-worked": _logaddexp(1.0, 3.0),
    "exp2-convert": 10 * math.log(2),
    "attention-flops-formula": 4 * 1 * 32 * 4096**2 * 128 / 1e9,
    "attention-tflops-rate": 4 * 1 * 32 * 4096**2 * 128 / 0.5e-3 / 1e12,
    "h200-sdpa-fraction": 624 / 794 * 100,
    # Hopper, decoding, serving
    "fa3-exp-bottleneck": 989 / (3.9 * 4 * 128) * 100,
    "fa3-utilisation": 740 / 989 * 100,
    "decode-kv-cache-size": _kv_bytes_per_token(80, 8, 128, 2) / 1024,
    "decode-kv-read-time": _kv_bytes_per_token(80, 8, 128, 2) * 32768 / 4.8e12 * 1e3,
    "decode-one-row-parallelism": 1 * 32 * 1 / H100_SMS * 100,
    "flashdecoding-merge": _logsumexp([1.0, 2.0, 3.0]),
    "paged-page-lookup": 100 // 16,
    "paged-last-page-waste": math.ceil(1000 / 16) * 16 - 1000,
    "gqa-head-mapping": 13 // (32 // 8),
    "gqa-kv-cache-saving": 64 / 8,
    "varlen-padding-waste": (3 * 5 - (3 + 5 + 2)) / (3 * 5) * 100,
    "sliding-window-blocks": _window_blocks(5120, 128, 1024),
    "fused-intensity-no-l2": _flash_intensity(16384, 128, 128, 2),
    "ring-min-block-size": 312e12 / 300e9,
}
# Figures quoted from the papers or spec sheets (nothing to derive).
QUOTED = {"fig2-gflops-after": 75.2, "sram-per-sm": 228}


def test_deck_loads_with_enough_cards(deck):
    assert len(deck.cards) >= 40
    assert len({card.id for card in deck.cards}) == len(deck.cards)


def test_every_card_has_both_languages(deck):
    for card in deck.cards:
        for text in (card.q_en, card.q_zh, card.a_en, card.a_zh):
            assert text.strip(), card.id
        assert any("\u4e00" <= ch <= "\u9fff" for ch in card.q_zh + card.a_zh), card.id
        assert card.kind in cards.KINDS


def test_numeric_cards_match_their_formulas(deck):
    numeric = {card.id: card for card in deck.cards if card.kind == "numeric"}
    assert set(numeric) == set(DERIVED) | set(QUOTED), "add the new card's formula to DERIVED"
    for card_id, expected in {**DERIVED, **QUOTED}.items():
        card = numeric[card_id]
        assert card.accepts(expected), f"{card_id}: card says {card.answer}, formula gives {expected}"


def test_worked_numbers_quoted_in_answers(deck):
    # The explanations quote the same figures; keep them in step with the formulas.
    quoted = {
        "block-size-h100-bc": f"{H100_M}",
        "online-example-first-block": f"{DERIVED['online-example-first-block']:.4f}",
        "online-example-second-block": f"{DERIVED['online-example-second-block']:.4f}",
        "ring-merge-worked": f"{DERIVED['ring-merge-worked']:.4f}",
        "exp2-convert": f"{DERIVED['exp2-convert']:.4f}",
        "causal-skipped-blocks": f"{DERIVED['causal-skipped-blocks']}",
    }
    by_id = {card.id: card for card in deck.cards}
    for card_id, text in quoted.items():
        assert text in by_id[card_id].a_en, (card_id, text)
    assert "16,777,216" in mathtext.render(by_id["score-matrix-size"].a_en)
    assert "327,680" in mathtext.render(by_id["decode-kv-cache-size"].a_en)
    assert f"{DERIVED['flashdecoding-merge']:.4f}" in by_id["flashdecoding-merge"].a_en
    assert "[0, 3, 8, 10]" in by_id["varlen-cu-seqlens"].a_en
    assert list(itertools.accumulate([3, 5, 2], initial=0)) == [0, 3, 8, 10]
    assert f"{4096**2:,}" == "16,777,216"


def test_choice_cards_are_well_formed(deck):
    for card in deck.cards:
        if card.kind == "choice":
            assert len(card.choices_en) == len(card.choices_zh) >= 2
            assert 0 <= card.correct < len(card.choices_en)


def _all_texts(card):
    yield from (card.q_en, card.q_zh, card.a_en, card.a_zh, *card.choices_en, *card.choices_zh)
    for point in card.keypoints:
        yield point.en
        yield point.zh


def test_no_raw_tex_after_rendering(deck):
    for card in deck.cards:
        for text in _all_texts(card):
            assert not mathtext.raw_commands(text), (card.id, mathtext.render(text))
            assert "\\(" not in mathtext.render(text), (card.id, text)


def test_main_questions_have_keypoints(deck):
    main = {card.id: card for card in deck.cards if "main" in card.tags}
    assert set(main) == MAIN_QUESTIONS
    for card in main.values():
        assert card.kind == "recall"
        assert len(card.keypoints) >= 4, card.id


def test_every_exercise_links_cards():
    # The links live in the catalog only (each exercise's `cards`); the deck names no exercise.
    from drill import catalog

    listed = {ex.id: ex.cards for ex in catalog.load_topic(TOPIC).exercises}
    assert EXERCISE_IDS <= set(listed)
    assert not [exercise_id for exercise_id, ids in listed.items() if not ids], "exercises without cards"


def test_deck_covers_the_facts(deck):
    # One probe per fact the deck must teach; a missing one means a card was lost.
    text = " ".join(mathtext.render(t) for card in deck.cards for t in _all_texts(card))
    for probe in [
        "66.6", "75.2", "40.3", "4.4 GB", "41.7", "7.3 ms", "A100", "GPT-2 medium",
        "228 KB", "3.35 TB/s", "4.8 TB/s", "Θ(sd + s²)", "Θ(s² d²/M)", "d² ≪ M", "lower bound",
        "⌈M/(4d)⌉", "1.1353", "1.2034", "16.8 million", "L = m + log ℓ", "rowsum(dO ∘ O)",
        "log1p", "logsigmoid", "bottom-right", "top-left", "is_causal", "ln 2", "log₂ e",
        "fp32", "twice", "atomic", "O(s)", "O(s² d)", "other=0", "about half",
        "Milakov", "send/recv", "non-matmul",
    ]:
        assert probe in text, probe


def test_mathtext_renders_the_usual_suspects():
    rendered = mathtext.render(
        r"\(\tilde P_{ij} = e^{S_{ij} - m'}\), \(\ell\), \(\lceil M/(4d)\rceil\), "
        r"\(\operatorname{rowsum}\), \(\mathrm{softmax}(S)\), \(QK^\top\), \(d^2 \ll M\), \(\Theta(s)\)"
    )
    assert rendered == "P̃ᵢⱼ = e^(Sᵢⱼ - m'), ℓ, ⌈M/(4d)⌉, rowsum, softmax(S), QKᵀ, d² ≪ M, Θ(s)"
    assert mathtext.render("no math here") == "no math here"


def test_unknown_keys_and_bad_versions_are_rejected():
    good = 'format = 1\n[[card]]\nid = "a"\ntags = ["t"]\nkind = "recall"\nq_en = "q"\nq_zh = "问"\na_en = "a"\na_zh = "答"\nsource = "FlashAttention §3.1"\n'
    assert cards.parse_deck(good, "x").cards[0].id == "a"
    with pytest.raises(cards.DeckError, match="unknown keys"):
        cards.parse_deck(good + 'colour = "red"\n', "x")
    with pytest.raises(cards.DeckError, match="format"):
        cards.parse_deck(good.replace("format = 1", "format = 2"), "x")
    with pytest.raises(cards.DeckError, match="kind"):
        cards.parse_deck(good.replace('"recall"', '"essay"'), "x")
    with pytest.raises(cards.DeckError, match="numeric"):
        cards.parse_deck(good + "answer = 3\n", "x")
    with pytest.raises(cards.DeckError, match="duplicate"):
        cards.parse_deck(good + good.split("\n", 1)[1], "x")
    with pytest.raises(cards.DeckError, match="source"):
        cards.parse_deck(good.replace('source = "FlashAttention §3.1"\n', ""), "x")
    with pytest.raises(cards.DeckError, match="source"):
        cards.parse_deck(good.replace('"FlashAttention §3.1"', '"  "'), "x")


def test_every_card_names_its_source(deck):
    # A paper with a section, figure, equation, algorithm or table; or a measurement here.
    where = ("§", "Fig.", "Algorithm", "Theorem", "Proposition", "Appendix", "Eq.", "Table",
             "measured:", "source", "docs", "datasheet", "Guide", "README", "tests/", ".py", "worked by hand",
             "identity", "change of base", "abstract", "arithmetic", "repository", "blog")
    for card in deck.cards:
        assert card.source, card.id
        assert any(word in card.source for word in where), (card.id, card.source)


def test_catalog_card_lists_match_the_deck(deck):
    from drill import catalog

    topic = catalog.load_topic(TOPIC)
    listed = {ex.id: set(ex.cards) for ex in topic.exercises}
    deck_ids = {card.id for card in deck.cards}
    for exercise_id, ids in listed.items():
        assert ids <= deck_ids, f"{exercise_id} lists unknown cards {ids - deck_ids}"


# Exercises 08-10 (decoding, paging, GQA) link these ids from their catalog entries.
INFERENCE_CARDS = {
    "decode-kv-cache-size", "decode-one-row-parallelism", "flashdecoding-split-kv", "flashdecoding-merge",
    "paged-block-table", "paged-fragmentation", "paged-prefix-sharing", "gqa-head-mapping",
    "gqa-kv-cache-saving", "gqa-backward-sum", "mqa-vs-gqa", "decode-bandwidth-bound",
}


def test_inference_card_ids_stay_put(deck):
    assert INFERENCE_CARDS <= {card.id for card in deck.cards}


def test_deck_covers_the_2026_canon(deck):
    # One probe per topic of issue 14's list; a missing one means a card was lost.
    text = " ".join(mathtext.render(t) for card in deck.cards for t in _all_texts(card))
    for probe in [
        "TMA", "WGMMA", "producer", "setmaxnreg", "ping-pong", "Inside one warpgroup", "Block quantisation",
        "Hadamard", "740", "75 %", "1.5–2.0×", "35 %", "989", "3.9 TFLOP/s", "327,680", "split", "LSE",
        "block table", "copy-on-write", "under 4 %", "60–80 %", "2–4×", "h ÷ (H/G)", "5 %", "Philox",
        "cu_seqlens", "window_size", "block-sparse", "registers", "255", "c ≥ F / B", "zigzag", "Striped",
        "Ulysses", "all-to-all", "dK and dV buffers", "L2", "compute-bound", "624",
    ]:
        assert probe in text, probe
