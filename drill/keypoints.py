"""Does a spoken-style answer make a key point? The offline matcher behind `drill mock`.

Three kinds of synonym, matched three ways:
  words     ("running max", "rescaling")  as whole words after stemming, so "ring" never
            matches "during" and "rescaling" covers "rescale"
  formulas  ("s^2", "O(s)", "log(e^L1+e^L2)")  as substrings of a normalised formula form
            in which s² = s^2 = s**2, N = s, Θ(·) = O(·), M⁻¹ = /M, exp(x) = e^x, N×N = s x s,
            s·d = s*d = sd, log(1+e^x) = log1p(exp(x)) = softplus(x)
  Chinese   ("分块", "重新计算")  as substrings of the whole answer: Chinese has no word
            boundaries
Polarity. A match counts only when the answer says it the way the key point does. Negation
is found by scope, not by a fixed window: a negator ("not", "never", "without", "avoids",
"instead of", "rather than", "unlike", "no longer"; "不", "没有", "不需要", "不用", "无需",
"避免", "而不是") reaches from where it stands to the end of its clause or to the next
connective ("and", "but", "so", "because", "which"; "而是", "但是", "所以"), and a verdict
after the words ("recomputation is irrelevant", "is not needed", "重算是不需要的") negates
them too. The key point's own text sets the polarity each synonym needs: in "so nothing
overflows" the word "overflow" is said negated, so "nothing overflows" makes the point and
"it overflows" contradicts it; "never written" carries its own negation and must not be
negated again ("it is not true that S is never written"). Formulas count in an un-negated
scope only.

An answer must also read as an explanation. A keyword list covers nothing: one with few
function words ("the, is, so, when", "的、是、把、时"), or one whose content is almost all
key-point vocabulary ("running max and running sum and rescale"). A word synonym counts
only in a clause long enough to say something about it.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache

import snowballstemmer

_STEMMER = snowballstemmer.stemmer("english")
_CJK = re.compile(r"[\u3400-\u9fff]")
_WORD = re.compile(r"\d+(?:\.\d+)?|[a-z]+(?:'[a-z]+)?")
_BRITISH = re.compile(r"^(\w{3,})is(e|es|ed|ing|ation|ations|er|ers)$")  # normalise → normalize
_CLAUSE = re.compile(r"[;!?。;!?\n,,、::]|\.(?=\s|$)")
_FOLD = str.maketrans({"×": "x", "−": "-", "–": "-", "—": "-", "’": "'", "‘": "'", "θ": "o", "ω": "o",
                       "{": "(", "}": ")", "[": "(", "]": ")", "ℓ": "l"})

FUNCTION_WORDS = frozenset("""
a an the is are was were be been being it its this that these those there then than so because since
as when while whenever once until after before if of to in on at by for with from into per each every
and or but nor not no never which who what how why where we you i they he she one our your their them
can could will would must should may might do does did done has have had only also just even instead
rather both all any some more most less fewer same other another again still already
""".split())
NEGATIONS = frozenset("""
not no never nothing none without cannot neither nor avoid avoids avoided avoiding unlike lacks lacking
hardly barely scarcely
""".split())
# Two-word negators: "instead of X", "rather than X", "no longer X"; "not only" negates nothing.
NEGATION_PAIRS = {("instead", "of"), ("rather", "than"), ("no", "longer")}
NOT_NEGATIONS = {("not", "only"), ("no", "matter")}
# A negation stops at a connective: "it does not write S to HBM and keeps it in SRAM".
SCOPE_BREAKS = frozenset("and but so because since while whereas which then yet although though thus hence".split())
# A verdict after the words negates them: "recomputation is irrelevant", "is not needed".
VERDICTS = frozenset("irrelevant unnecessary unneeded needless pointless useless avoided wrong false".split())
AUXILIARIES = frozenset("is are was were be been being does do did has have had can could will would "
                        "need needs needed must should it this that".split())
# Characters and pairs that carry Chinese grammar rather than content.
ZH_FUNCTION = ("的", "了", "是", "在", "把", "就", "和", "与", "要", "会", "用", "每", "时", "再", "都", "也",
               "而", "所以", "因为", "这", "那", "个", "只", "先", "然后", "才", "让", "被", "对", "从", "到",
               "里", "后", "当", "如果", "还", "并", "即", "等于", "得", "地", "着", "过", "又", "于", "它", "但",
               "可以", "一种", "其实", "之", "为", "能")
ZH_NEGATIONS = ("不是", "并非", "没有", "不用", "不需要", "无需", "不必", "避免", "不", "没", "非", "无", "未")
# Characters that look like a negation but are not one here ("different", "keeps on", "no matter").
ZH_NOT_NEGATIONS = ("不同", "不断", "不仅", "不管", "不论", "不少", "不过", "不停", "无论", "非常", "不变", "除非")
ZH_SCOPE_BREAKS = ("而是", "但是", "但", "所以", "因此", "并且", "然后", "于是", "而且", "同时")
ZH_VERDICTS = ("不需要", "不用", "不必", "没必要", "无关", "不重要", "多余", "用不着", "不需", "没用", "没有用",
               "没关系", "没有关系", "没什么关系", "无所谓", "不相干")
_SENTENCE = re.compile(r"[;!?\n\u3002\uff1b\uff01\uff1f\uff0c]|\.(?=\s|$)")
_SCOPE_SPLIT = re.compile(r"\b(?:and|but|so|because|since|while|whereas|which|then|yet|although|though|thus|hence)\b|而是|但是|所以|因此|并且|然后", re.I)
_ZH_CLAUSE = re.compile(r"[;!?:,\n\u3002\uff1b\uff01\uff1f\uff0c\uff1a]|\.(?=\s|$)")

MIN_FUNCTION_SHARE = 0.15  # prose runs at 0.3-0.5; a keyword list near 0
MAX_KEYWORD_SHARE = 0.75  # explanations run at 0.1-0.55 (short Chinese ones near 0.7); lists near 1
MIN_WORDS_FOR_SHARE = 6
MIN_CLAUSE_UNITS = 3  # words, counting two Chinese characters as one word


def stem_words(text: str) -> list[str]:
    folded = unicodedata.normalize("NFKC", text).casefold().translate(_FOLD)
    return [_stem(token) for token in _WORD.findall(folded)]


@lru_cache(maxsize=4096)
def _stem(token: str) -> str:
    if token[0].isdigit():
        return token
    return _STEMMER.stemWord(_BRITISH.sub(r"\1iz\2", token))


def formula_form(text: str) -> str:
    """One spelling per formula: lower case, no spaces, ^ and product dots dropped, × as x."""
    s = unicodedata.normalize("NFKC", text).casefold()
    s = re.sub(r"(?<![a-z])n(?![a-z])", "s", s).translate(_FOLD)  # papers write N for the length
    s = re.sub(r"\s+", "", s)
    s = s.replace("**", "^").replace("_", "")
    s = re.sub(r"exp\(([^()]*)\)", r"e^(\1)", s)
    s = re.sub(r"\^\(([^()]*)\)", r"^\1", s)  # e^(l1) = e^l1
    s = re.sub(r"log(?:1p\(|\(1\+)e\^", "softplus(", s)  # log(1+e^x) = log1p(exp(x)) = softplus(x)
    s = re.sub(r"\^?(?:\(-1\)|-1)(?![\d.])", "⁻", s)  # M⁻¹, M^-1, M^(-1) ...
    s = re.sub(r"([a-z0-9)])⁻", r"/\1", s)  # ... all become /M
    s = s.replace("⁻", "-1")
    s = s.replace("^", "")
    s = re.sub(r"(?<=[a-z0-9)])[*·∙⋅](?=[a-z0-9(])", "", s)  # s·d = s*d = sd; N×N stays sxs
    return s


def _compact(text: str) -> str:
    folded = unicodedata.normalize("NFKC", text).casefold().translate(_FOLD)
    return re.sub(r"\s+", "", folded)


@dataclass(frozen=True)
class Clause:
    stems: tuple[str, ...]
    explained: bool


@dataclass(frozen=True)
class Analysis:
    """An answer cut into clauses, with its formula form and whether it reads as prose."""

    clauses: tuple[Clause, ...]
    formulas: str
    compact: str
    prose: bool
    text: str = ""
    scopes: tuple[str, ...] = ()  # clauses cut again at connectives, where a negation ends


def analyse(answer: str) -> Analysis:
    clauses = tuple(_clause(part) for part in _CLAUSE.split(answer) if part.strip())
    words = _WORD.findall(unicodedata.normalize("NFKC", answer).casefold())
    cjk = "".join(_CJK.findall(answer))
    function = sum(1 for w in words if w in FUNCTION_WORDS) + sum(cjk.count(f) for f in ZH_FUNCTION)
    units = len(words) + len(cjk) / 2  # about two Chinese characters make a word
    prose = units > 0 and function / units >= MIN_FUNCTION_SHARE
    scopes = formula_scopes(answer)
    return Analysis(clauses, formula_form(answer), _compact(answer), prose, answer, scopes)


def formula_scopes(text: str) -> tuple[str, ...]:
    """Clauses cut again at connectives, where a negation ends; commas and colons inside
    brackets ("[B_r, d]", "(i, j)") belong to the formula, not to the sentence."""
    parts, depth, current = [], 0, []
    for ch in text:
        depth += ch in "([{" and 1 or (-1 if ch in ")]}" and depth > 0 else 0)
        if depth == 0 and (ch in ",:;!?\n\u3002\uff1b\uff01\uff1f\uff0c\uff1a"):
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return tuple(scope for part in parts for sentence in _SENTENCE.split(part)
                 for scope in _SCOPE_SPLIT.split(sentence) if scope.strip())


def _clause(text: str) -> Clause:
    words = _WORD.findall(unicodedata.normalize("NFKC", text).casefold())
    cjk = "".join(_CJK.findall(text))
    has_function = any(w in FUNCTION_WORDS for w in words) or any(f in cjk for f in ZH_FUNCTION)
    explained = len(words) + len(cjk) / 2 >= MIN_CLAUSE_UNITS and has_function
    return Clause(tuple(stem_words(text)), explained)


def keyword_share(answer: str, synonyms: tuple[str, ...]) -> float:
    """How much of the answer's content is the key points' own vocabulary.

    English: the share of content words (not function words, not numbers) whose stem
    occurs in a word synonym. Chinese: the share of Chinese characters inside a Chinese
    synonym. "running max and running sum and rescale" scores near 1; an explanation
    brings its own verbs and nouns and stays well below.
    """
    function = {_stem(word) for word in FUNCTION_WORDS}
    vocabulary = {stem for syn in synonyms if kind_of(syn) == "words" for stem in stem_words(syn)} - function
    content = [w for w in stem_words(answer) if w not in function and not w[0].isdigit()]
    text = _compact(answer)
    covered = [False] * len(text)
    for syn in synonyms:
        if kind_of(syn) == "zh":
            target = _compact(syn)
            start = text.find(target)
            while start != -1:
                covered[start:start + len(target)] = [True] * len(target)
                start = text.find(target, start + 1)
    grammar = {f for f in ZH_FUNCTION if len(f) == 1}
    cjk = [i for i, ch in enumerate(text) if _CJK.match(ch) and (covered[i] or ch not in grammar)]
    hits = sum(1 for w in content if w in vocabulary) + sum(1 for i in cjk if covered[i])
    units = len(content) + len(cjk) / 2
    # "I keep a running max." is short, not a list: too few words to judge by share.
    return hits / (len(content) + len(cjk)) if units >= MIN_WORDS_FOR_SHARE else 0.0


def is_keyword_list(answer: str, analysis: Analysis, synonyms: tuple[str, ...]) -> bool:
    """Terms strung together rather than explained: few function words, or little but key terms."""
    return bool(answer.strip()) and (not analysis.prose or keyword_share(answer, synonyms) > MAX_KEYWORD_SHARE)


def kind_of(synonym: str) -> str:
    if _CJK.search(synonym):
        return "zh"
    words = " ".join(_WORD.findall(unicodedata.normalize("NFKC", synonym).casefold()))
    plain = re.sub(r"[\s\-]+", " ", unicodedata.normalize("NFKC", synonym).casefold()).strip()
    return "words" if words and words == plain else "formula"


def matches(synonyms: tuple[str, ...], answer: Analysis | str, claim_en: str = "", claim_zh: str = "") -> bool:
    """True when the answer says one of the synonyms, in a sentence that explains something,
    with the polarity the key point (`claim_en`, `claim_zh`) gives it."""
    if isinstance(answer, str):
        answer = analyse(answer)
    if not answer.prose:
        return False
    return any(_says(synonym, answer, wants_negated(synonym, claim_en, claim_zh)) for synonym in synonyms)


def wants_negated(synonym: str, claim_en: str, claim_zh: str) -> bool:
    """Whether the key point says the synonym's words under a negation ("nothing overflows").

    Looked up in the point's own text in the synonym's language (Chinese phrases in the
    Chinese text, words and formulas in the English one); words the point does not contain
    are positive paraphrases.
    """
    return bool(claim_polarity(synonym, claim_en, claim_zh))


def claim_polarity(synonym: str, claim_en: str, claim_zh: str) -> bool | None:
    """True when the claim says the synonym negated, False when plainly, None when it does not say it."""
    kind = kind_of(synonym)
    if kind == "zh":
        found = _zh_polarities(_compact(synonym), claim_zh)
    elif kind == "formula":
        form = formula_form(synonym)
        found = [_scope_negated(scope) for scope in formula_scopes(claim_en) if form and form in formula_form(scope)]
    else:
        target = tuple(stem_words(synonym))
        found = [negated for clause in _CLAUSE.split(claim_en) if clause.strip()
                 for negated in _word_polarities(target, tuple(stem_words(clause)))]
    return all(found) if found else None


def says(synonym: str, answer: Analysis, negated: bool) -> bool:
    """The answer says the synonym, negated or not as asked, in a clause that explains something."""
    return answer.prose and _says(synonym, answer, negated)


def _says(synonym: str, answer: Analysis, negated: bool) -> bool:
    kind = kind_of(synonym)
    if kind == "formula":
        form = formula_form(synonym)
        return bool(form) and any(form in formula_form(scope) and _scope_negated(scope) == negated
                                  for scope in answer.scopes)
    if kind == "zh":
        return negated in _zh_polarities(_compact(synonym), answer.text)
    target = tuple(stem_words(synonym))
    bare = _compact(synonym).replace("-", "")
    if _CJK.search(answer.text) and bare in answer.compact.replace("-", ""):
        # English terms inside Chinese prose ("不是 memory-bound"): the negation is Chinese.
        return negated in _zh_polarities(bare, answer.text.replace("-", ""))
    return any(clause.explained and negated in _word_polarities(target, clause.stems)
               for clause in answer.clauses)


def _is_negator(stems: tuple[str, ...], i: int) -> int:
    """How many words from i on make one negator (0 when stems[i] is none)."""
    word, following = stems[i], stems[i + 1] if i + 1 < len(stems) else ""
    if (word, following) in _NOT_NEGATION_STEMS:
        return 0
    if (word, following) in _NEGATION_PAIR_STEMS:
        return 2
    return 1 if word in _NEGATION_STEMS or word.endswith("n't") else 0


def _word_polarities(target: tuple[str, ...], stems: tuple[str, ...]) -> list[bool]:
    """For each place the target words occur in one clause: are they negated there?"""
    n = len(target)
    found = []
    for start in range(len(stems) - n + 1):
        if stems[start:start + n] != target:
            continue
        # Negators in the target itself ("never written") are part of what it says.
        count, i = 0, start - 1
        while i >= 0 and stems[i] not in _BREAK_STEMS:
            i -= 1
        i += 1
        while i < start:
            width = _is_negator(stems, i)
            count += 1 if width else 0
            i += max(width, 1)
        count += _verdict_after(stems, start + n)
        found.append(count % 2 == 1)
    return found


def _verdict_after(stems: tuple[str, ...], end: int) -> int:
    """1 when the words after a match judge it away: "is irrelevant", "is not needed"."""
    i = end
    while i < len(stems) and i < end + 4 and stems[i] in _AUX_STEMS:
        i += 1
    if i < len(stems) and stems[i] in _VERDICT_STEMS:
        return 1
    if i > end and i < len(stems) and _is_negator(stems, i):
        return 1
    if end < len(stems) and _is_negator(stems, end) and any(
            stem in _RELEVANCE_STEMS for stem in stems[end + 1:end + 3]):
        return 1  # "bandwidth hardly matters", "the logsumexp never counts"
    return 0


def _scope_negated(scope: str) -> bool:
    """A formula's scope (a clause up to the next connective) holds an odd number of negators."""
    stems = tuple(stem_words(scope))
    count, i = 0, 0
    while i < len(stems):
        width = _is_negator(stems, i)
        count += 1 if width else 0
        i += max(width, 1)
    if _CJK.search(scope):
        count += _zh_negators(_compact(scope))
    return count % 2 == 1


def _zh_negators(text: str) -> int:
    """Negators in a stretch of Chinese, not counting look-alikes (不同, 无论) and overlaps."""
    count, i = 0, 0
    while i < len(text):
        if text.startswith(ZH_NOT_NEGATIONS, i):
            i += 2
            continue
        hit = next((n for n in ZH_NEGATIONS if text.startswith(n, i)), None)
        if hit:
            count += 1
            i += len(hit)
        else:
            i += 1
    return count


def _zh_polarities(target: str, text: str) -> list[bool]:
    """For each place a Chinese (or mixed) phrase occurs: is it negated in its clause?"""
    found = []
    own = _zh_negators(target)
    for clause in _ZH_CLAUSE.split(_compact(text)):
        start = clause.find(target)
        while start != -1:
            before = clause[:start]
            cut = max((before.rfind(b) + len(b) for b in ZH_SCOPE_BREAKS if b in before), default=0)
            count = _zh_negators(before[cut:])
            after = clause[start + len(target):start + len(target) + 6]
            if own == 0 and any(v in after for v in ZH_VERDICTS):
                count += 1
            found.append(count % 2 == 1)
            start = clause.find(target, start + 1)
    return found


_NEGATION_STEMS = frozenset(_stem(w) for w in NEGATIONS)
_NEGATION_PAIR_STEMS = frozenset((_stem(a), _stem(b)) for a, b in NEGATION_PAIRS)
_NOT_NEGATION_STEMS = frozenset((_stem(a), _stem(b)) for a, b in NOT_NEGATIONS)
_BREAK_STEMS = frozenset(_stem(w) for w in SCOPE_BREAKS)
_VERDICT_STEMS = frozenset(_stem(w) for w in VERDICTS)
_AUX_STEMS = frozenset(_stem(w) for w in AUXILIARIES)
_RELEVANCE_STEMS = frozenset(_stem(w) for w in "matter matters count counts help helps apply applies".split())


def without_clauses(answer: str, stated) -> str:
    """The answer with the clauses in which `stated(clause)` is true blanked out, every other
    character kept in place (so "[B_r, d]" in a kept clause stays one formula). A clause that
    states a misconception credits nothing else: "it still writes the s×s matrix to HBM" does
    not show that the speaker knows unfused attention round-trips it."""
    pieces = re.split(f"({_CLAUSE.pattern})", answer)
    return "".join(piece if i % 2 or not piece.strip() or not stated(piece) else " " * len(piece)
                   for i, piece in enumerate(pieces))
