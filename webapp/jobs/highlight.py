"""Syntax highlighting of candidate code (Python, C++, CUDA) on the server, with no CDN and no
browser-side library: Pygments splits the text into tokens and this module returns them as
plain data, one list of `(css class, text)` segments per line. Templates render the segments
with autoescaping, so code the model wrote stays text whatever it contains; the class names come
from Pygments' fixed token table, never from the input.

Highlighting a whole file at once (not line by line) keeps multi-line strings and block comments
right; the token stream is then cut at newlines.
"""

from __future__ import annotations

import time
from functools import lru_cache

from pygments.formatters import HtmlFormatter
from pygments.lexer import Lexer
from pygments.lexers import get_lexer_by_name
from pygments.token import STANDARD_TYPES, Token, _TokenType

Segment = tuple[str, str]  # (css class or "", text)
Line = list[Segment]

LANGUAGES = {
    ".py": "python",
    ".cpp": "cpp",
    ".cc": "cpp",
    ".cxx": "cpp",
    ".c": "cpp",
    ".h": "cpp",
    ".hpp": "cpp",
    ".cu": "cuda",
    ".cuh": "cuda",
}
# Lexing is regex work: a huge file (or a pathological one) is shown as plain text instead.
MAX_HIGHLIGHT_CHARS = 200_000
# ... and so is one that costs more than this to lex. Some lexer rules are quadratic on hostile
# text (the C++/CUDA raw-string rule scans to the end of the file at every `R"(`: 100 KB of them
# took 15 s); the work between two tokens is one such scan, so checking the clock per token
# bounds a text's cost to about this budget.
HIGHLIGHT_BUDGET_S = 0.5


def language_for(path: str | None) -> str | None:
    if not path:
        return None
    name = path.rsplit("/", 1)[-1]
    return LANGUAGES.get(name[name.rfind(".") :].lower()) if "." in name else None


@lru_cache(maxsize=8)
def _lexer(language: str) -> Lexer:
    # stripnl/ensurenl off: the token stream must give back exactly the lines of the input.
    return get_lexer_by_name(language, stripnl=False, stripall=False, ensurenl=False)


@lru_cache(maxsize=256)
def _css_class(ttype: _TokenType) -> str:
    while ttype is not Token:
        cls = STANDARD_TYPES.get(ttype)
        if cls is not None:
            return cls
        ttype = ttype.parent
    return ""


def plain_lines(text: str) -> list[Line]:
    return [[("", line)] if line else [] for line in text.split("\n")]


def highlight_lines(text: str | None, language: str | None) -> list[Line]:
    """The lines of `text` (split at "\\n", like `str.split`) as highlighted segments.

    Adjacent tokens of one class are merged, and whitespace-only tokens carry no class, so a
    typical line is a handful of spans. Unknown languages, very large texts and texts that take
    longer than HIGHLIGHT_BUDGET_S to lex come back plain.
    """
    text = text or ""
    if not language or len(text) > MAX_HIGHLIGHT_CHARS:
        return plain_lines(text)
    lines: list[Line] = [[]]
    deadline = time.monotonic() + HIGHLIGHT_BUDGET_S
    for ttype, value in _lexer(language).get_tokens(text):
        if time.monotonic() > deadline:
            return plain_lines(text)
        cls = _css_class(ttype)
        parts = value.split("\n")
        for i, part in enumerate(parts):
            if i:
                lines.append([])
            if not part:
                continue
            seg_cls = "" if part.isspace() else cls
            line = lines[-1]
            if line and line[-1][0] == seg_cls:
                line[-1] = (seg_cls, line[-1][1] + part)
            else:
                line.append((seg_cls, part))
    # Pygments may add or drop a final newline: the line count must match the input's.
    want = text.count("\n") + 1
    if len(lines) > want:
        lines = lines[:want]
    while len(lines) < want:
        lines.append([])
    return lines


def highlight_path(text: str | None, path: str | None) -> list[Line]:
    return highlight_lines(text, language_for(path))


def stylesheet(scope: str = ".hl") -> str:
    """The CSS for the token classes (written to static/jobs/highlight.css by `python -m
    webapp.jobs.highlight`; the pages load that file, nothing is fetched from elsewhere)."""
    return "\n".join(HtmlFormatter(style="default").get_token_style_defs(scope)) + "\n"


if __name__ == "__main__":
    print(stylesheet(), end="")
