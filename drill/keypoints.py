"""Does a spoken-style answer make a key point? The offline matcher behind `drill mock`.

Three kinds of synonym, matched three ways:
  words     ("running max", "rescaling")  as whole words after stemming, so "ring" never
            matches "during" and "rescaling" covers "rescale"; a negation just before the
            words ("not exact") cancels them unless the key point itself is a negation
  formulas  ("s^2", "O(s)", "log(e^L1+e^L2)")  as substrings of a normalised formula form
            in which s² = s^2 = s**2, N = s, Θ(·) = O(·), M⁻¹ = /M, exp(x) = e^x, N×N = s x s,
            s·d = s*d = sd, log(1+e^x) = log1p(exp(x)) = softplus(x)
  Chinese   ("分块", "重新计算")  as substrings of the whole answer: Chinese has no word
            boundaries
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
NEGATIONS = frozenset("not no never nothing without isn't doesn't don't cannot can't neither nor".split())
# Characters and pairs that carry Chinese grammar rather than content.
ZH_FUNCTION = ("的", "了", "是", "在", "把", "就", "和", "与", "要", "会", "用", "每", "时", "再", "都", "也",
               "而", "所以", "因为", "这", "那", "个", "只", "先", "然后", "才", "让", "被", "对", "从", "到",
               "里", "后", "当", "如果", "还", "并", "即", "等于", "得", "地", "着", "过", "又", "于", "它", "但",
               "可以", "一种", "其实", "之", "为", "能")
ZH_NEGATIONS = ("不是", "并非", "没有", "不用", "不需要", "不", "没", "非", "无", "未")

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


def analyse(answer: str) -> Analysis:
    clauses = tuple(_clause(part) for part in _CLAUSE.split(answer) if part.strip())
    words = _WORD.findall(unicodedata.normalize("NFKC", answer).casefold())
    cjk = "".join(_CJK.findall(answer))
    function = sum(1 for w in words if w in FUNCTION_WORDS) + sum(cjk.count(f) for f in ZH_FUNCTION)
    units = len(words) + len(cjk) / 2  # about two Chinese characters make a word
    prose = units > 0 and function / units >= MIN_FUNCTION_SHARE
    return Analysis(clauses, formula_form(answer), _compact(answer), prose)


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


def matches(synonyms: tuple[str, ...], answer: Analysis | str, negatable: bool = True) -> bool:
    """True when the answer says one of the synonyms, in a sentence that explains something."""
    if isinstance(answer, str):
        answer = analyse(answer)
    if not answer.prose:
        return False
    return any(_says(synonym, answer, negatable) for synonym in synonyms)


def _says(synonym: str, answer: Analysis, negatable: bool) -> bool:
    kind = kind_of(synonym)
    if kind == "formula":
        form = formula_form(synonym)
        return bool(form) and form in answer.formulas
    if kind == "zh":
        # Chinese clauses are short and lists use 、 within prose, so the whole answer is searched.
        return _zh_found(_compact(synonym), answer.compact, negatable)
    target = tuple(stem_words(synonym))
    return any(clause.explained and _words_found(target, clause.stems, negatable) for clause in answer.clauses)


def _words_found(target: tuple[str, ...], stems: tuple[str, ...], negatable: bool) -> bool:
    n = len(target)
    negations = {_stem(word) for word in NEGATIONS}
    for start in range(len(stems) - n + 1):
        if stems[start:start + n] == target:
            before = stems[max(0, start - 3):start]
            if negatable and target[0] not in negations and any(w in negations for w in before):
                continue
            return True
    return False


def _zh_found(target: str, text: str, negatable: bool) -> bool:
    start = text.find(target)
    while start != -1:
        before = text[max(0, start - 2):start]
        if not (negatable and not target.startswith(ZH_NEGATIONS) and any(n in before for n in ZH_NEGATIONS)):
            return True
        start = text.find(target, start + 1)
    return False
