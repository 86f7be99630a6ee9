"""Rendered turns, cached: a stored turn changes only when it is stored again (its `revision`
goes up), so its HTML is rendered once and reused by every page view and live update. This is
what keeps a 200-turn job page fast (Django's template engine needs about 3 ms per turn here).

A turn's file diffs need the workspace before the turn (diffview recomputes them from the file
edits), which is the sum of all earlier turns' edits. Reading every earlier turn for every turn
would make rendering a long job quadratic, so the workspace after each rendered turn is cached
too, and the next turn starts from it. The HTML key holds only the turn's own revision: earlier
turns are never stored again once a later one exists (only the unfinished last turn is redone).

The cached value is the output of `jobs/_turn.html`, which autoescapes every piece of model
output, code and log; marking that output safe does not mark any of the content safe.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.core.cache import cache
from django.template.loader import render_to_string
from django.utils.safestring import SafeString, mark_safe

from webapp.jobs.diffview import apply_edits, edit_diffs
from webapp.jobs.models import Turn
from webapp.jobs.turns import evaluations_behind

TEMPLATE_VERSION = 7  # bump when jobs/_turn.html (or jobs/_diff.html) changes
TTL_S = 7 * 24 * 3600


def _stamp(job_id: int, pk: int, revision: int, created_at) -> str:
    # created_at guards against a reused primary key (a flushed test database, a restored backup).
    return f"{job_id}:{pk}:{revision}:{created_at.timestamp():.6f}"


def _key(turn: Turn) -> str:
    return f"kw:turn-html:{TEMPLATE_VERSION}:{_stamp(turn.job_id, turn.pk, turn.revision, turn.created_at)}"


def _files_key(job_id: int, pk: int, revision: int, created_at) -> str:
    return f"kw:turn-files:{_stamp(job_id, pk, revision, created_at)}"


def files_before(turn: Turn) -> dict[str, str]:
    """The workspace before `turn`: the cached workspace after the previous turn, else every
    earlier turn's file edits (and that result is cached for the next time)."""
    prev = (
        Turn.objects.filter(job_id=turn.job_id, index__lt=turn.index)
        .order_by("-index")
        .values("pk", "revision", "created_at")
        .first()
    )
    if prev is None:
        return {}
    key = _files_key(turn.job_id, prev["pk"], prev["revision"], prev["created_at"])
    files = cache.get(key)
    if files is None:
        files = {}
        rows = (
            Turn.objects.filter(job_id=turn.job_id, index__lt=turn.index)
            .order_by("index")
            .values_list("events", flat=True)
        )
        for events in rows.iterator():
            apply_edits(files, events)
        cache.set(key, files, TTL_S)
    return files


def _render(turn: Turn, before: dict[str, str] | None) -> tuple[str, dict[str, str]]:
    """(html, the workspace after the turn)."""
    if before is None:
        before = files_before(turn)
    diffs = edit_diffs(turn.events, before)
    behind = evaluations_behind(turn.events)
    items: list[tuple[dict[str, Any], Any, Any]] = list(zip(turn.events, diffs, behind, strict=True))
    html = render_to_string("jobs/_turn.html", {"turn": turn, "items": items})
    after = apply_edits(dict(before), turn.events)
    cache.set(_files_key(turn.job_id, turn.pk, turn.revision, turn.created_at), after, TTL_S)
    return html, after


def turn_html(turn: Turn, before: dict[str, str] | None = None) -> SafeString:
    key = _key(turn)
    html = cache.get(key)
    if html is None:
        html, _ = _render(turn, before)
        cache.set(key, html, TTL_S)
    return mark_safe(html)  # the autoescaped output of jobs/_turn.html, see the docstring


def turns_html(turns: Iterable[Turn]) -> SafeString:
    """Consecutive turns (in index order), rendering only those not cached; the workspace is
    carried from one turn to the next, so at most one look at earlier turns is needed."""
    turns = list(turns)
    cached = cache.get_many([_key(t) for t in turns])
    parts = []
    files: dict[str, str] | None = None
    for t in turns:
        html = cached.get(_key(t))
        if html is None:
            html, files = _render(t, files)
            cache.set(_key(t), html, TTL_S)
        elif files is not None:
            files = apply_edits(files, t.events)
        parts.append(html)
    return mark_safe("".join(parts))  # as above
