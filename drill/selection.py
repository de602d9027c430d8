"""`drill check -k EXPR`: which checks a learner's words select.

A check is selected by the words of the name the learner sees in the report
("Causal: query i sees keys j <= i + (sk - sq) [sq == sk]"), whole words only and in
any case: `-k causal` selects that check but not "... [non-causal]". Words combine with
and, or, not and parentheses, as in pytest's -k; words written side by side
(`-k "peak memory"`) must appear side by side in the name.

Standard library only: the trusted grading process imports it too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# A word of a check's name: anything between spaces, brackets, parentheses and commas,
# with sentence punctuation at its end dropped ("Causal:" is the word "causal").
_WORD = re.compile(r"[^\s\[\](),]+")
_TRAILING = ":;.!?"
OPERATORS = ("and", "or", "not")


def words(text: str) -> list[str]:
    """The words of a check's name (or of a -k phrase), in lower case."""
    found = (w.rstrip(_TRAILING).lower() for w in _WORD.findall(text))
    return [w for w in found if w]


class SelectionError(ValueError):
    """The -k expression cannot be read; the message says why in words."""


@dataclass(frozen=True)
class Expression:
    source: str
    tree: tuple

    def matches(self, name: str) -> bool:
        return _evaluate(self.tree, words(name))


def parse(source: str) -> Expression:
    """Read a -k expression; SelectionError when it is empty or malformed."""
    tokens = _tokens(source)
    if not tokens:
        raise SelectionError("-k needs a word of a check's name, for example -k causal")
    parser = _Parser(tokens, source)
    tree = parser.expression()
    if parser.position != len(tokens):
        raise SelectionError(f"-k {source!r}: unexpected {tokens[parser.position]!r}; "
                             "join words with and, or, not")
    return Expression(source, tree)


def _tokens(source: str) -> list[str]:
    return re.findall(r"\(|\)|[^\s()]+", source)


class _Parser:
    def __init__(self, tokens: list[str], source: str):
        self.tokens, self.source, self.position = tokens, source, 0

    def peek(self) -> str | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def take(self) -> str:
        token = self.tokens[self.position]
        self.position += 1
        return token

    def expression(self) -> tuple:
        left = self.conjunction()
        while (self.peek() or "").lower() == "or":
            self.take()
            left = ("or", left, self.conjunction())
        return left

    def conjunction(self) -> tuple:
        left = self.negation()
        while (self.peek() or "").lower() == "and":
            self.take()
            left = ("and", left, self.negation())
        return left

    def negation(self) -> tuple:
        if (self.peek() or "").lower() == "not":
            self.take()
            return ("not", self.negation())
        return self.primary()

    def primary(self) -> tuple:
        token = self.peek()
        if token is None:
            raise SelectionError(f"-k {self.source!r} ends too early: a word must follow "
                                 f"{self.tokens[-1]!r}")
        if token == "(":
            self.take()
            inner = self.expression()
            if self.peek() != ")":
                raise SelectionError(f"-k {self.source!r}: a '(' is never closed")
            self.take()
            return inner
        if token == ")" or token.lower() in OPERATORS:
            raise SelectionError(f"-k {self.source!r}: expected a word where {token!r} is")
        phrase = []
        while self.peek() is not None and self.peek() not in ("(", ")") \
                and self.peek().lower() not in OPERATORS:
            phrase += words(self.take())
        if not phrase:
            raise SelectionError(f"-k {self.source!r}: {token!r} is not a word of any check's name")
        return ("phrase", tuple(phrase))


def _evaluate(tree: tuple, name_words: list[str]) -> bool:
    kind = tree[0]
    if kind == "phrase":
        phrase = list(tree[1])
        n = len(phrase)
        return any(name_words[i:i + n] == phrase for i in range(len(name_words) - n + 1))
    if kind == "not":
        return not _evaluate(tree[1], name_words)
    if kind == "and":
        return _evaluate(tree[1], name_words) and _evaluate(tree[2], name_words)
    return _evaluate(tree[1], name_words) or _evaluate(tree[2], name_words)
