"""Rendered turns, cached: a stored turn changes only when it is stored again (its `revision`
goes up), so its HTML is rendered once and reused by every page view and live update. This is
what keeps a 200-turn job page fast (Django's template engine needs about 3 ms per turn here).

The cached value is the output of `jobs/_turn.html`, which autoescapes every piece of model
output, code and log; marking that output safe does not mark any of the content safe.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.core.cache import cache
from django.template.loader import render_to_string
from django.utils.safestring import SafeString, mark_safe

from webapp.jobs.models import Turn

TEMPLATE_VERSION = 2  # bump when jobs/_turn.html changes
TTL_S = 7 * 24 * 3600


def _key(turn: Turn) -> str:
    # created_at guards against a reused primary key (a flushed test database, a restored backup).
    return f"kw:turn-html:{TEMPLATE_VERSION}:{turn.job_id}:{turn.pk}:{turn.revision}:{turn.created_at.timestamp():.6f}"


def turn_html(turn: Turn) -> SafeString:
    key = _key(turn)
    html = cache.get(key)
    if html is None:
        html = render_to_string("jobs/_turn.html", {"turn": turn})
        cache.set(key, html, TTL_S)
    return mark_safe(html)  # noqa: S308 - the autoescaped output of jobs/_turn.html, see the docstring


def turns_html(turns: Iterable[Turn]) -> SafeString:
    turns = list(turns)
    cached = cache.get_many([_key(t) for t in turns])
    parts = []
    for t in turns:
        html = cached.get(_key(t))
        parts.append(mark_safe(html) if html is not None else turn_html(t))  # noqa: S308 - as above
    return mark_safe("".join(parts))  # noqa: S308 - as above
