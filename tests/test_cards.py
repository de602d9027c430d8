"""Deck lint: the follow-up cards load, read well in both languages, and their numbers are right."""

from __future__ import annotations

import itertools
import re
import math
from pathlib import Path

import pytest

from drill import cards, mathtext

TOPIC = "flashattention"
EXERCISE_IDS = {
    "online-softmax", "tiling-shapes", "flash-forward", "lse-merge",
    "flash-backward", "ring-attention", "triton-forward", "triton-backward", "ring-backward",
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
    "bwd-flops-ratio": 5 / 2,
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
    "h200-sdpa-fraction": 610 / 989 * 100,  # BENCHMARKS.md cuDNN over the datasheet peak
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
    "mla-kv-cache-bytes": None,  # filled below from DeepSeek-V3's configuration
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
        "Ulysses", "all-to-all", "dK and dV buffers", "L2", "compute-bound", "610",
    ]:
        assert probe in text, probe


# --------------------------------------------------------------------------
# Measured figures come from the table that holds them
# --------------------------------------------------------------------------

BENCHMARKS = Path(__file__).resolve().parents[1] / "BENCHMARKS.md"
# Figures a card may quote beside a measurement without BENCHMARKS.md holding them: the
# datasheets (H100/H200 dense BF16 peak, HBM bandwidth) and the FlashAttention-3 paper.
NOT_MEASURED_HERE = {"989", "4.8", "3.35", "740"}
_QUOTED_SECTION = re.compile(r"measured: BENCHMARKS\.md '([^']+)'")
_RATE = re.compile(r"(\d+(?:\.\d+)?)(?:\s*[–-]\s*(\d+(?:\.\d+)?))?\s*(?:TFLOP/s|TB/s)")


def _benchmark_sections() -> dict[str, str]:
    """Each heading of BENCHMARKS.md with the text under it, up to the next heading of its level or above."""
    lines = BENCHMARKS.read_text(encoding="utf-8").splitlines()
    heads = [(i, len(line) - len(line.lstrip("#")), line.lstrip("#").strip())
             for i, line in enumerate(lines) if line.startswith("#")]
    sections = {}
    for n, (i, level, title) in enumerate(heads):
        end = next((j for j, lv, _ in heads[n + 1:] if lv <= level), len(lines))
        sections[title] = "\n".join(lines[i + 1:end])
    return sections


def _rates(text: str) -> set[str]:
    found = set()
    for match in _RATE.finditer(mathtext.render(text)):
        found.update(g for g in match.groups() if g)
    return found


def test_measured_sources_name_a_section_that_holds_the_numbers(deck):
    sections = _benchmark_sections()
    measured = [card for card in deck.cards if "BENCHMARKS.md" in card.source]
    assert len(measured) >= 3
    for card in measured:
        titles = _QUOTED_SECTION.findall(card.source)
        assert titles, f"{card.id}: say which table of BENCHMARKS.md, in quotes"
        bodies = []
        for title in titles:
            heading = [name for name in sections if name.startswith(title)]
            assert len(heading) == 1, f"{card.id}: no single BENCHMARKS.md heading starts with {title!r}"
            bodies.append(sections[heading[0]])
        body = "\n".join(bodies)
        for lang in ("en", "zh"):
            text = card.question(lang) + " " + card.answer_text(lang)
            for number in _rates(text) - NOT_MEASURED_HERE:
                assert re.search(rf"(?<![\d.]){re.escape(number)}(?![\d])", body), \
                    f"{card.id} ({lang}) quotes {number} but {titles} does not hold it"


def test_no_card_quotes_the_unrecorded_matmul_ceiling(deck):
    # 794 TFLOP/s (a bf16 matmul) and 624 (a cuDNN run) were never recorded in BENCHMARKS.md.
    assert "794" not in BENCHMARKS.read_text(encoding="utf-8")
    for card in deck.cards:
        for text in _all_texts(card):
            assert "794" not in text and "624" not in text, card.id


# --------------------------------------------------------------------------
# The content review's corrections, one probe each (en and zh where it applies)
# --------------------------------------------------------------------------

CORRECTIONS = {
    # card: (must say, must not say), on the English answer
    "fa3-intra-warpgroup-overlap": (["PV matmul of the previous block", "Algorithm 2"], ["matmul of block j+1"]),
    "paged-prefix-sharing": (["partly filled last block of the prompt is shared", "Fig. 8", "only full blocks"],
                             ["Only full pages are shared in practice"]),
    "fully-masked-rows": (["FlashAttention-2's CUDA kernels store", "FlashAttention-3 and -4", "_safe_softmax"],
                          ["FlashAttention's CUDA kernels store"]),
    "where-s-p-o-live": (["MmaPV_is_RS", "shared memory", "head dims 65–96", "head dim 64 without a causal"],
                         ["Nothing of S or P is written even to shared memory", "head dim ≤ 96"]),
    "flashmla-decode-kernel": (["about 128", "865 TFLOP/s"], ["64 or more"]),
    "mla-decode-intensity": (["258", "2 × 128 = 256"], []),
    # Audit 2026-12-05: hopper/heuristics.h should_pack_gqa has no causal/local rule and no 0.95.
    "pack-gqa": (["0.9 times", "always for varlen", "splits the KV"], ["0.95"]),
    "kv-l2-reuse": (["FlashAttention-2's", "FlashAttention-1 kept K and V outside"], ["794", "165"]),
    "fused-intensity-no-l2": (["989/4.8 ≈ 206"], ["794"]),
    "decode-bandwidth-bound": (["4.31–4.32 TB/s", "2.1 GB of K and V", "1.49 TB/s"], ["4.45", "half a gigabyte"]),
    "online-update-rule": (["FlashAttention-2's form", "block-local max"], []),
    "fa3-tma-wgmma": (["two thirds", "mma.sync"], ["only with WGMMA can a kernel approach"]),
    "fa2-changes": (["not a change", "both versions"], ["(6)"]),
    "fa3-pingpong": (["620–640", "8192"], ["about 620"]),
    "head-dim-256": (["FlashAttention-2", "512", "FlashMLA"], []),
    "fa4-polynomial-exp": (["degree 3", "8.0", "FP8", "sm_103"], []),
    "ring-backward": (["three times the bytes", "fp32"], []),
    "ring-vs-ulysses": (["in proportion"], ["constant few tensors"]),
    "hbm-vs-sram": (["256 KB", "228 KB"], []),
    "memory-bound-roofline": (["150–200"], []),
    "fig2-three-numbers": (["arXiv v2"], []),
}
SOURCE_CORRECTIONS = {
    # card: (source must say, source must not say)
    "ring-overlap-condition": (["Table 2"], ["Table 1"]),
    "ring-min-block-size": (["Table 2"], ["Table 1"]),
    "main-ring-lse-merge": (["FlashDecoding", "_update_out_and_lse"], []),
    "ring-merge-formula": (["FlashDecoding", "_update_out_and_lse"], ["Ring Attention"]),
    "ring-stable-lse": (["log-sum-exp identity"], ["_update_out_and_lse"]),
    "ring-sigmoid-form": (["_update_out_and_lse"], []),
    "online-update-rule": (["FlashAttention-2 (Dao 2023) §3.1.1 and Algorithm 1 lines 9–10 and 12–13"], []),
    "main-explain-flashattention": (["FlashAttention-2 (Dao 2023) §3.1.1"], []),
    "fa3-tma-wgmma": (["blog", "2402.13499"], []),
    "fa4-polynomial-exp": (["2603.05451", "utils.py"], []),
    "kv-l2-reuse": (["FlashAttention-2 (Dao 2023) §3.1, Algorithm 1"], ["FlashAttention (Dao et al. 2022) §3.2"]),
    "fully-masked-rows": (["hopper/softmax.h", "flash_attn/cute/softmax.py"], []),
    "where-s-p-o-live": (["tile_size.h"], []),
    # Audit 2026-12-05: only FlashAttention-2 stores +inf (csrc softmax.h); the facts sheet is not shipped.
    "bwd-no-key-rows": (["csrc/flash_attn/src/softmax.h", "hopper/softmax.h"], ["FLASHATTENTION-FACTS"]),
    "pack-gqa": (["get_pack_gqa"], ["0.95"]),
    "fig2-hbm-ratio": (["2205.14135v2"], []),
    "fig2-speedup": (["2205.14135v2"], []),
    "fig2-three-numbers": (["2205.14135v2"], []),
    "main-why-faster": (["2205.14135v2"], []),
}
CORRECTIONS_ZH = {
    "fa3-intra-warpgroup-overlap": ["上一块的 PV 矩阵乘"],
    "paged-prefix-sharing": ["没写满的最后一块也是共享的"],
    "fully-masked-rows": ["FlashAttention-2 的 CUDA kernel", "FlashAttention-3 和 -4"],
    "where-s-p-o-live": ["MmaPV_is_RS"],
    "fa2-changes": ["不算改动"],
    "fa3-pingpong": ["620–640"],
    "ring-backward": ["三倍"],
    "hbm-vs-sram": ["256 KB"],
}


def test_the_reviewed_cards_say_what_the_sources_say(deck):
    by_id = {card.id: card for card in deck.cards}
    for card_id, (say, never) in CORRECTIONS.items():
        text = mathtext.render(by_id[card_id].a_en)
        for phrase in say:
            assert phrase in text, (card_id, phrase)
        for phrase in never:
            assert phrase not in text, (card_id, phrase)
    for card_id, phrases in CORRECTIONS_ZH.items():
        text = mathtext.render(by_id[card_id].a_zh)
        for phrase in phrases:
            assert phrase in text, (card_id, phrase)
    for card_id, (say, never) in SOURCE_CORRECTIONS.items():
        source = by_id[card_id].source
        for phrase in say:
            assert phrase in source, (card_id, phrase)
        for phrase in never:
            assert phrase not in source, (card_id, phrase)


def test_the_reviewed_cards_numbers():
    # kv-l2-reuse: a 128-row tile at 127 FLOP/byte would be held near 425 TFLOP/s by an H100's HBM.
    intensity = _flash_intensity(16384, 128, 128, 2)
    assert round(intensity) == 127
    assert round(intensity * 3.35) == 425 < 740
    # The datasheet ridge of an H200 (kv-l2-reuse, fused-intensity-no-l2, drill show io).
    assert round(989 / 4.8) == 206
    # memory-bound-roofline: A100 80 GB and 40 GB; H100 SXM.
    assert (round(312 / 2.039), round(312 / 1.555), round(989 / 3.35)) == (153, 201, 295)
    # h200-sdpa-fraction: the same table's Triton kernel on that shape.
    assert round(612 / 989 * 100) == 62 and round(610 / 989 * 100) == 62
    # ring-backward: forward sends bf16 K and V; backward also sends fp32 dK and dV.
    assert (2 * 2 + 2 * 4) / (2 * 2) == 3
    # ring-min-block-size: the InfiniBand case of Table 2 (24.5K) from c = F / B.
    assert round(312e12 / 12.5e9, -3) == 25000
    # flashmla-decode-kernel, mla-decode-intensity: FlashMLA's deep dive, 865 TFLOP/s over 3.35 TB/s,
    # halved for its intensity of about 2·h_q·s_q, gives h_q·s_q ≈ 128 (not 64); exact intensity 241.8.
    assert round(865 / 3.35) == 258 and round(865 / 3.35 / 2) == 129 and 2 * 128 == 256
    assert round(128 * (576 + 512) / 576, 1) == 241.8
    # decode-bandwidth-bound: K + V of batch 64, 8k context, 8 KV heads of 128, bf16 (the table's 2147 MB).
    assert round(2 * 64 * 8192 * 8 * 128 * 2 / 1e6) == 2147 and round(2147 / 1e3, 1) == 2.1


def test_no_text_credits_every_flashattention_kernel_with_plus_inf(deck):
    # Only FlashAttention-2's CUDA kernels store L = +inf for a row that saw no key
    # (csrc/flash_attn/src/softmax.h); FA3 (hopper/softmax.h) and FA4 store -inf.
    from drill import catalog

    texts = [t for card in deck.cards for t in _all_texts(card)]
    texts += [h for ex in catalog.load_topic(TOPIC).exercises for h in ex.hints]
    for text in texts:
        rendered = mathtext.render(text)
        assert "FlashAttention's CUDA kernels store" not in rendered, rendered[:120]
        assert "FlashAttention 的 CUDA kernel 对这种行" not in rendered, rendered[:120]


# --------------------------------------------------------------------------
# MLA and masks: every number the new cards quote, computed here
# --------------------------------------------------------------------------

# DeepSeek-V3 §4.2: 61 layers, 128 heads of 128; MLA latent 512 and decoupled RoPE key 64.
V3 = {"layers": 61, "heads": 128, "head_dim": 128, "d_c": 512, "d_rope": 64}


def _cache_bytes(kind: str, dtype_bytes: int = 2, kv_heads: int = 8) -> int:
    """KV-cache bytes per token over all layers, by DeepSeek-V2 Table 1's formulas."""
    per_layer = {
        "mha": 2 * V3["heads"] * V3["head_dim"],
        "gqa": 2 * kv_heads * V3["head_dim"],
        "mqa": 2 * V3["head_dim"],
        "mla": V3["d_c"] + V3["d_rope"],
    }[kind]
    return per_layer * V3["layers"] * dtype_bytes


DERIVED["mla-kv-cache-bytes"] = _cache_bytes("mla")


def test_mla_cache_figures(deck):
    text = mathtext.render({card.id: card for card in deck.cards}["mla-kv-cache-bytes"].a_en)
    mha, gqa, mqa, mla = (_cache_bytes(k) for k in ("mha", "gqa", "mqa", "mla"))
    assert (mha, gqa, mqa, mla) == (3_997_696, 249_856, 31_232, 70_272)
    for figure in (f"{mla:,}", f"{mha:,}", f"{gqa:,}", f"{mqa:,}", f"{mla / 1024:.1f} KiB",
                   f"{mha / 2**20:.1f} MiB", f"{gqa // 1024} KiB", f"{mqa / 1024:.1f} KiB",
                   f"{mha / mla:.0f}×", f"{(V3['d_c'] + V3['d_rope']) / (2 * V3['head_dim']):.2f} groups",
                   f"{mla * 131072 / 1e9:.1f} GB", f"{mha * 131072 / 1e9:.0f} GB"):
        assert figure in text, figure
    assert mqa < mla < gqa
    # The absorbed shapes FlashMLA serves: a 576-wide key and a 512-wide value; 192 unabsorbed.
    absorbed = {c.id: mathtext.render(c.a_en) for c in deck.cards}["mla-absorbed-projections"]
    assert f"{V3['d_c'] + V3['d_rope']}-wide key" in absorbed and f"{V3['d_c']}-wide value" in absorbed
    assert f"{V3['head_dim'] + V3['d_rope']}-wide one" in absorbed


def _tile_kinds(q_doc, kv_doc, window, causal, br, bc):
    """0 empty, 1 partial, 2 full per (query tile, key tile): exercise 14's block_kinds, by brute force."""
    sq, sk = len(q_doc), len(kv_doc)

    def visible(i, j):
        shift = i + sk - sq
        ok = q_doc[i] == kv_doc[j]
        if causal or window is not None:
            ok = ok and j <= shift
        if window is not None:
            ok = ok and shift - j < window
        return ok

    kinds = []
    for r0 in range(0, sq, br):
        row = []
        for c0 in range(0, sk, bc):
            seen = [visible(i, j) for i in range(r0, min(r0 + br, sq)) for j in range(c0, min(c0 + bc, sk))]
            row.append(2 if all(seen) else 1 if any(seen) else 0)
        kinds.append(row)
    return kinds


def test_mask_cards_tile_counts(deck):
    by_id = {card.id: mathtext.render(card.a_en) for card in deck.cards}
    # flex-block-mask: causal, s = 1024, 128-wide tiles.
    causal = [k for row in _tile_kinds([0] * 1024, [0] * 1024, None, True, 128, 128) for k in row]
    counts = (len(causal), causal.count(0), causal.count(1), causal.count(2))
    assert counts == (64, 28, 8, 28)
    assert "8 × 8 = 64 tiles: 28 empty, 8 partial (the diagonal) and 28 full" in by_id["flex-block-mask"]
    # sliding-window-mask: w = 1024, 128-wide tiles, s = 8192, the query tile of rows 5120-5247
    # (only that tile's rows are built: its row of kinds is the same as in the full grid).
    rows = list(range(5120, 5248))
    visible = [[0 < i - j + 1 <= 1024 and j <= i for j in range(8192)] for i in rows]
    tiles = [[row[c:c + 128] for row in visible] for c in range(0, 8192, 128)]
    kinds = [2 if all(map(all, t)) else 1 if any(map(any, t)) else 0 for t in tiles]
    assert (len(kinds), kinds.count(1), kinds.count(2), kinds.count(0)) == (64, 2, 7, 55)
    assert kinds.count(1) + kinds.count(2) == 1024 // 128 + 1 == DERIVED["sliding-window-blocks"]
    text = by_id["sliding-window-mask"]
    assert "visits 9 of the 64 key tiles: 2 partial, 7 full, 55 skipped" in text
    assert f"about {32 * 4096 // 1000}k tokens" in text
    # document-mask-packing: documents of 3, 5 and 2 tokens.
    lens = [3, 5, 2]
    docs = [d for d, n in enumerate(lens) for _ in range(n)]
    pairs = sum(1 for a in docs for b in docs if a == b)
    assert pairs == sum(n * n for n in lens) == 38 and sum(lens) ** 2 == 100
    assert len(lens) * max(lens) == 15 and len(lens) * max(lens) ** 2 == 75
    text = by_id["document-mask-packing"]
    for figure in ("38 score pairs", "against 100", "15 token slots for 10", "75 pairs", "[0, 3, 8, 10]"):
        assert figure in text, figure
    # A small packed grid: tiles between documents are empty, and the mask is block-diagonal.
    grid = _tile_kinds(docs, docs, None, True, 2, 2)
    assert grid[4][0] == 0 and grid[0][0] == 1 and grid[3][2] == 2  # rows 8-9 vs keys 0-1; rows 6-7 vs 4-5


def test_new_cards_for_mla_and_masks_exist_and_are_sourced(deck):
    by_id = {card.id: card for card in deck.cards}
    wanted = {
        "mla-absorbed-projections": "DeepSeek-V2", "mla-kv-cache-bytes": "DeepSeek-V3",
        "mla-decoupled-rope": "DeepSeek-V2", "flex-block-mask": "FlexAttention",
        "document-mask-packing": "FlexAttention", "sliding-window-mask": "Mistral 7B",
    }
    for card_id, paper in wanted.items():
        assert paper in by_id[card_id].source, card_id
    assert "Longformer" in by_id["sliding-window-mask"].source
    assert "c_KV" in by_id["mla-absorbed-projections"].a_en and "k_R" in by_id["mla-absorbed-projections"].a_en


# --------------------------------------------------------------------------
# The 2026 canon: every figure the "canon" cards state, computed here
# --------------------------------------------------------------------------

def _split_heuristic(programs: int, sms: int, n_blocks: int, max_splits: int = 128) -> int:
    """flash-attention's num_splits_heuristic, re-derived: the smallest eligible split count
    whose wave efficiency is within 85 % of the best; 1 once the programs nearly fill the GPU."""
    if programs >= 0.8 * sms:
        return 1
    max_splits = min(max_splits, sms, n_blocks)

    def eligible(s):
        return s == 1 or math.ceil(n_blocks / s) != math.ceil(n_blocks / (s - 1))

    eff = {s: (w := programs * s / sms) / math.ceil(w) for s in range(1, max_splits + 1) if eligible(s)}
    best = max(eff.values())
    return min(s for s, e in eff.items() if e >= 0.85 * best)


def _greedy_makespan(costs, machines):
    """Each job in order goes to the machine that frees first (list scheduling)."""
    free = [0] * machines
    for cost in costs:
        free[free.index(min(free))] += cost
    return max(free)


def _tree_pairs(parents):
    """(node, visible node) pairs of a tree mask: each node sees itself and its ancestors."""
    pairs = 0
    for node in range(len(parents)):
        while node is not None:
            pairs += 1
            node = parents[node]
    return pairs


def _e4m3_max():
    # Exponent field 1111 is usable (no infinities); mantissa 111 there is NaN, so 110 is the top.
    return (1 + 6 / 8) * 2 ** (15 - 7)


TREE = [None, 0, 0, 1, 1, 2, 2]  # a root, 2 children, 4 grandchildren (breadth-first order)
CANON_DERIVED = {
    "mla-decode-intensity": 128 * 2 * (576 + 512) / (576 * 2),
    "window-size-keys": 1023 + 0 + 1,
    "rolling-buffer-slot": 10_000 % 4096,
    "rope-slowest-wavelength": 2 * math.pi / 10000 ** (-2 * (64 - 1) / 128),
    "alibi-slope-worked": 2 ** (-8 * 3 / 16),
    "softcap-worked": 50 * math.tanh(100 / 50),
    "sink-mass-worked": (math.e + math.e**2) / (math.e + 2 * math.e**2),
    "cascade-prefix-bytes": 64 * 4096 * _kv_bytes_per_token(32, 8, 128, 2) / 2**30,
    "chunked-prefill-pairs": 2048 * 4096 + 2048 * 2049 // 2,
    "kv-transfer-time": _kv_bytes_per_token(80, 8, 128, 2) * 4096 / 50e9 * 1e3,
    "tpot-worked": (5.2 - 0.4) / 240 * 1e3,
    "spec-expected-tokens": (1 - 0.8**5) / (1 - 0.8),
    "tree-mask-pairs": _tree_pairs(TREE),
    "pack-gqa-rows": 1 * 8 / 64 * 100,
    "split-count-heuristic": _split_heuristic(48, 108, 64),
    "lpt-makespan-worked": _greedy_makespan(range(8, 0, -1), 4),
    "backward-flops-ratio": (5 * 2) / (2 * 2),
    "tmem-capacity": 128 * 512 * 4 / 1024,
    "fa4-b200-utilisation": 1613 / 2250 * 100,
    "e4m3-max": _e4m3_max(),
    "nvfp4-bits-per-value": 4 + 8 / 16,
    "kv-cache-fp8": _kv_bytes_per_token(80, 8, 128, 1),
    "cp-load-balance": max(4 * r + 2 for r in range(4)) / (sum(4 * r + 2 for r in range(4)) / 4),
    "cute-layout-offset": 2 * 1 + 3 * 4,
    "ldmatrix-x4-elements": 4 * 8 * 8 // 32,
    "bank-conflict-ways": len({(128 * r // 4) % 32 for r in range(8)}) and max(
        sum(1 for r in range(8) if (128 * r // 4) % 32 == bank) for bank in range(32)),
}
DERIVED.update(CANON_DERIVED)


def _canon(deck):
    return [card for card in deck.cards if "canon" in card.tags]


def test_the_canon_block_is_large_bilingual_and_sourced(deck):
    canon = _canon(deck)
    assert len(canon) >= 64
    # The canon cards sit together at the end of the deck, apart from the older ones.
    ids = [card.id for card in deck.cards]
    first = ids.index(canon[0].id)
    assert ids[first:first + len(canon)] == [card.id for card in canon]
    for card in canon:
        assert any("\u4e00" <= ch <= "\u9fff" for ch in card.q_zh) and any("\u4e00" <= ch <= "\u9fff" for ch in card.a_zh), card.id
        assert not any("\u4e00" <= ch <= "\u9fff" for ch in card.q_en + card.a_en), card.id
        assert len(card.source) > 30 and any(w in card.source for w in ("§", "docs", "README", ".py", ".h", "Table", "abstract", "Guide", "blog", "Blog", "arithmetic")), card.id


def test_the_canon_covers_the_topics(deck):
    text = " ".join(mathtext.render(t) for card in _canon(deck) for t in _all_texts(card))
    for probe in [
        "FlashMLA", "576", "absorbed", "latent", "score_mod", "mask_mod", "create_block_mask",
        "sdpa_kernel", "CUDNN_ATTENTION", "causal_lower_right", "document_id", "window_size", "rolling buffer",
        "RoPE", "ALiBi", "alibi_slopes", "tanh", "soft", "sink", "prefix", "radix", "cascade", "chunk",
        "continuous", "Orca", "disaggregat", "TTFT", "TPOT", "speculative", "tree", "PackGQA",
        "split", "persistent", "longest", "TMA reduce-add", "semaphore",
        "TMEM", "tcgen05", "2-CTA", "polynomial", "E4M3", "NVFP4", "MXFP4", "KIVI", "SageAttention",
        "all-gather", "2 × CP", "NSA", "MoBA", "Rabe", "CuTe", "Triton", "Gluon", "ThunderKittens",
        "ldmatrix", "cp.async", "swizzl", "bank",
    ]:
        assert probe in text, probe


def test_the_canon_cards_quote_their_computed_figures(deck):
    by_id = {card.id: mathtext.render(card.a_en) + " " + mathtext.render(card.a_zh) for card in deck.cards}
    # Each worked figure appears, as computed, in the English and in the Chinese answer.
    quoted = {
        "mla-decode-intensity": ["278,528", "1152", f"{CANON_DERIVED['mla-decode-intensity']:.1f}"],
        "rolling-buffer-slot": ["1808", f"{10_000 - 4096}"],
        "rope-slowest-wavelength": ["54,410"],
        "alibi-slope-worked": [f"{CANON_DERIVED['alibi-slope-worked']:.4f}"],
        "softcap-worked": [f"{CANON_DERIVED['softcap-worked']:.2f}", f"{50 * math.tanh(0.1):.3f}",
                           f"{1 - math.tanh(2) ** 2:.3f}"],
        "sink-mass-worked": [f"{CANON_DERIVED['sink-mass-worked']:.4f}", f"{math.e + math.e**2:.3f}",
                             f"{math.e + 2 * math.e**2:.3f}"],
        "cascade-prefix-bytes": ["131,072", "512 MiB", "32 GiB"],
        "chunked-prefill-pairs": ["8,388,608", "2,098,176", "10,486,784", f"{8192 * 8193 // 2:,}"],
        "kv-transfer-time": ["1,342,177,280", f"{CANON_DERIVED['kv-transfer-time']:.1f} ms"],
        "spec-expected-tokens": [f"{CANON_DERIVED['spec-expected-tokens']:.3f}", f"{(1 - 0.8**9) / 0.2:.2f}"],
        "tree-mask-pairs": ["17", "49", "28", "11"],
        "tpot-worked": ["20 ms", "240"],
        "split-count-heuristic": ["0.44", "0.89", "0.67", "s = 9", "s = 2"],
        "lpt-makespan-worked": ["6, 8, 10, 12"],
        "tmem-capacity": ["262,144", "256 KiB"],
        "fa4-b200-utilisation": [f"{1613 / 2250 * 100:.1f}", f"{1605 / 2250 * 100:.1f}"],
        "nvfp4-bits-per-value": ["4.5", "4.25"],
        "kv-cache-fp8": ["163,840"],
        "cp-load-balance": ["2, 6, 10", "14", "1.75"],
        "cute-layout-offset": ["14", "19"],
        "bank-conflict-ways": ["8"],
        "pack-gqa-rows": ["12.5 %"],
        "window-size-keys": ["1024"],
    }
    for card_id, figures in quoted.items():
        en, zh = (mathtext.render(t) for t in ({c.id: c for c in deck.cards}[card_id].a_en,
                                               {c.id: c for c in deck.cards}[card_id].a_zh))
        zh = zh.replace("、", ", ")
        for figure in figures:
            assert figure in en and figure in zh, (card_id, figure)
    # The figures behind the words.
    assert round(1 - math.tanh(2) ** 2, 3) == 0.071
    assert _split_heuristic(48, 108, 64) == 2 and _split_heuristic(120, 132, 64) == 1
    assert [round(48 * s / 108 / math.ceil(48 * s / 108), 2) for s in (1, 2, 3, 9)] == [0.44, 0.89, 0.67, 1.0]
    assert _greedy_makespan(range(1, 9), 4) == 12 and sum(range(1, 9)) / 4 == 9
    assert sum(2048 * (2048 * c) + 2048 * 2049 // 2 for c in range(4)) == 8192 * 8193 // 2
    assert _tree_pairs(TREE) == 17 and len(TREE) * (len(TREE) + 1) // 2 - 17 == 11
    assert [(r + 0.5) + (7 - r + 0.5) for r in range(4)] == [8.0] * 4
    assert len({(((128 * r) // 16) ^ (r % 8)) * 16 // 4 % 32 for r in range(8)}) == 8  # swizzled: 8 distinct 4-bank groups
    assert 2 * 32 * 8 * 128 * 2 * 4096 == 512 * 2**20
    assert round(10000 ** (126 / 128)) == 8660
    assert round(2 * 70e9 * 4096 / 989e12, 1) == 0.6
    assert 8 * 4 * 128 / (2 * 128 * 2) == 8 and 4 * 128 / (2 * 128 * 2) == 1  # GQA-8 and MHA decode, FLOP/byte
    assert round(989 / 3.35) == 295


def test_the_canon_cards_are_linked_to_the_exercises_that_practise_them(deck):
    from drill import catalog

    listed = {ex.id: set(ex.cards) for ex in catalog.load_topic(TOPIC).exercises}
    for exercise_id, card_id in [("mla-decode", "flashmla-decode-kernel"), ("block-mask", "flex-score-mod-vs-mask-mod"),
                                 ("block-mask", "tree-attention-mask"), ("flash-forward", "chunked-prefill"),
                                 ("lse-merge", "cascade-attention"), ("flash-backward", "fa3-backward"),
                                 ("ring-attention", "llama3-allgather-cp"), ("flash-decoding", "split-count-heuristic"),
                                 ("paged-attention", "prefix-caching-hashes"), ("triton-decode", "pack-gqa-rows")]:
        assert card_id in listed[exercise_id], (exercise_id, card_id)
    linked = set().union(*listed.values())
    assert len([card for card in _canon(deck) if card.id in linked]) >= 40


def test_the_fp8_key_order_card_quotes_its_table(deck):
    # The card's instruction counts and ratios come from one BENCHMARKS.md table: keep them in step.
    card = next(c for c in deck.cards if c.id == "fp8-p-layout-by-key-order")
    body = next(text for title, text in _benchmark_sections().items() if title.startswith("FP8 P as packed words"))
    for figure in ("708", "465", "1.20–1.47", "1.38–1.47"):
        assert figure in card.answer_text("en") and figure in card.answer_text("zh"), figure
        assert figure in body, figure
