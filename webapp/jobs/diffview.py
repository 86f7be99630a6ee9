"""File diffs for the trajectory viewer and the compare page, computed on the server.

The agent's FileEdit events carry the file after each edit; the text before it is the previous
edit of the same path (turn 0 records the starting files), so the diff is recomputed here with
difflib from two real texts instead of being parsed back out of a unified diff. One computation
feeds both layouts: unified rows and side-by-side rows, each line syntax highlighted (as data:
segments of `(css class, text)`, rendered by templates with autoescaping).
"""

from __future__ import annotations

import difflib
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import zip_longest
from typing import Any

from django.core.cache import cache
from django.template.loader import render_to_string
from django.utils.safestring import SafeString, mark_safe

from webapp.jobs.highlight import Line, highlight_path, language_for

CONTEXT_LINES = 3
# SequenceMatcher is quadratic at worst: beyond this many lines a side, the diff is not computed.
MAX_DIFF_LINES = 5000
# ... and on lines that repeat it is cubic: each search for a longest match visits every pair of
# equal lines in its range, at every level of its recursion (1400 lines of `x` against `x` and
# `y` alternating: 20 s). Each search is charged those pairs; past this budget the diff is given
# up like a too large one. Edits of real code cost under 10 per line (the gallery's).
DIFF_WORK_BASE = 10_000
DIFF_WORK_PER_LINE = 100
TEMPLATE_VERSION = 1  # bump when jobs/_diff.html changes
TTL_S = 7 * 24 * 3600


@dataclass
class Cell:
    number: int | None = None
    segments: Line = field(default_factory=list)
    kind: str = "empty"  # ctx | add | del | empty


@dataclass
class Row:
    """One unified row (`kind`, numbers, segments) and one side-by-side row (`left`, `right`)."""

    kind: str
    old_number: int | None = None
    new_number: int | None = None
    segments: Line = field(default_factory=list)


@dataclass
class SideRow:
    left: Cell
    right: Cell


@dataclass
class Hunk:
    header: str
    unified: list[Row] = field(default_factory=list)
    split: list[SideRow] = field(default_factory=list)


@dataclass
class FileDiff:
    path: str
    status: str  # added | deleted | modified | same | too_large
    language: str | None
    hunks: list[Hunk] = field(default_factory=list)
    added: int = 0
    removed: int = 0

    @property
    def same(self) -> bool:
        return self.status == "same"


class DiffTooCostly(Exception):
    pass


class BoundedMatcher(difflib.SequenceMatcher):
    """A SequenceMatcher (autojunk off) that raises DiffTooCostly once its searches would visit
    more than `budget` pairs of equal lines in all."""

    def __init__(self, a: list[str], b: list[str], budget: int) -> None:
        super().__init__(None, a, b, autojunk=False)
        pairs = [0]  # pairs[i]: the pairs of equal lines a[:i] has with b, so a range costs O(1) to charge
        for line in a:
            pairs.append(pairs[-1] + len(self.b2j.get(line, ())))
        self._pairs, self._left = pairs, budget

    def find_longest_match(self, alo=0, ahi=None, blo=0, bhi=None):
        ahi = len(self.a) if ahi is None else ahi
        self._left -= self._pairs[ahi] - self._pairs[alo] + 1
        if self._left < 0:
            raise DiffTooCostly
        return super().find_longest_match(alo, ahi, blo, bhi)


def _lines(text: str) -> list[str]:
    return text.splitlines()


def _range(start: int, length: int) -> str:
    # The unified-diff convention (as difflib writes it): "start,length", 1-based.
    if length == 1:
        return f"{start + 1}"
    if not length:
        return f"{start},0"
    return f"{start + 1},{length}"


def file_diff(path: str, old: str | None, new: str | None, context: int = CONTEXT_LINES) -> FileDiff:
    """Diff `old` -> `new` of one file; None on a side means the file does not exist there."""
    language = language_for(path)
    a, b = _lines(old or ""), _lines(new or "")
    if old is None and new is None or old == new:
        return FileDiff(path, "same", language)
    status = "added" if old is None or (not a and b) else "deleted" if new is None else "modified"
    if len(a) > MAX_DIFF_LINES or len(b) > MAX_DIFF_LINES:
        return FileDiff(path, "too_large", language)
    matcher = BoundedMatcher(a, b, DIFF_WORK_BASE + DIFF_WORK_PER_LINE * (len(a) + len(b)))
    try:
        groups = list(matcher.get_grouped_opcodes(context))
    except DiffTooCostly:
        return FileDiff(path, "too_large", language)
    hl_a = highlight_path("\n".join(a), path) if a else []
    hl_b = highlight_path("\n".join(b), path) if b else []
    out = FileDiff(path, status, language)
    for group in groups:
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        hunk = Hunk(header=f"@@ -{_range(i1, i2 - i1)} +{_range(j1, j2 - j1)} @@")
        for tag, a1, a2, b1, b2 in group:
            if tag == "equal":
                for i, j in zip(range(a1, a2), range(b1, b2), strict=True):
                    hunk.unified.append(Row("ctx", i + 1, j + 1, hl_a[i]))
                    hunk.split.append(SideRow(Cell(i + 1, hl_a[i], "ctx"), Cell(j + 1, hl_b[j], "ctx")))
                continue
            for i in range(a1, a2):
                hunk.unified.append(Row("del", i + 1, None, hl_a[i]))
            for j in range(b1, b2):
                hunk.unified.append(Row("add", None, j + 1, hl_b[j]))
            out.removed += a2 - a1
            out.added += b2 - b1
            for i, j in zip_longest(range(a1, a2), range(b1, b2)):
                left = Cell(i + 1, hl_a[i], "del") if i is not None else Cell()
                right = Cell(j + 1, hl_b[j], "add") if j is not None else Cell()
                hunk.split.append(SideRow(left, right))
        out.hunks.append(hunk)
    if not out.hunks:  # differs only in line endings or a final newline
        out.status = "same"
    return out


# -- the files before each edit --------------------------------------------------------------
def apply_edits(files: dict[str, str], events: Iterable[dict[str, Any]]) -> dict[str, str]:
    for e in events:
        if e.get("type") == "file_edit" and e.get("path"):
            files[e["path"]] = e.get("content") or ""
    return files


def edit_diffs(events: list[dict[str, Any]], before: dict[str, str]) -> list[FileDiff | None]:
    """For each event of a turn, the diff of its file edit (None for other events), given the
    workspace before the turn. `before` is not changed."""
    files = dict(before)
    out: list[FileDiff | None] = []
    for e in events:
        if e.get("type") == "file_edit" and e.get("path"):
            path = e["path"]
            new = e.get("content") or ""
            out.append(file_diff(path, files.get(path), new))
            files[path] = new
        else:
            out.append(None)
    return out


# -- rendered, cached ------------------------------------------------------------------------
def diff_html(fd_old: str | None, fd_new: str | None, path: str) -> SafeString:
    """One file's diff as HTML (both layouts), cached by the two texts: the compare page asks for
    the same pairs again and again, and a long file costs tens of milliseconds to render.

    The cached value is the output of `jobs/_diff.html`, which autoescapes every line of code;
    marking that output safe does not mark any of the code safe.
    """
    h = hashlib.sha256()
    for part in (path, "\0", "-" if fd_old is None else "+" + fd_old, "\0", "-" if fd_new is None else "+" + fd_new):
        h.update(part.encode())
    key = f"kw:diff-html:{TEMPLATE_VERSION}:{h.hexdigest()}"
    html = cache.get(key)
    if html is None:
        html = render_to_string("jobs/_diff.html", {"fd": file_diff(path, fd_old, fd_new)})
        cache.set(key, html, TTL_S)
    return mark_safe(html)  # the autoescaped output of jobs/_diff.html, see the docstring
