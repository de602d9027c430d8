"""drill: practise ML-systems interview questions by writing real code."""

__version__ = "0.1.0"
