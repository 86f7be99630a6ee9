"""Many viewers of one job asking the same thing at the same moment cost one answer (issue 20).

After each stored turn every viewer's page fetches /jobs/<id>/updates/?since=N within a few
milliseconds of the others. The view caches its answer per (job, since, job.updated_at), but
fifty requests that all miss at once would all compute it. `CoalesceMiddleware` lets one request
per process compute an identical GET (same path, query and credentials) while the others wait
for it, then run: they find the answer cached. Permission is still checked by the view for each.
It is the innermost middleware. Viewers without an account are mostly answered before Django
(webapp.core.viewers); this is for the rest: signed-in viewers, and misses.
"""

from __future__ import annotations

import hashlib
import re
import threading

COALESCE = [re.compile(r"^/jobs/\d+/updates/$"), re.compile(r"^/jobs/\d+/$"), re.compile(r"^/jobs/\d+/turns/\d+/html$")]
WAIT_S = 10.0  # a follower waits at most this long for the leader, then runs anyway

_flights: dict[str, threading.Event] = {}
_guard = threading.Lock()


class CoalesceMiddleware:
    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        if request.method != "GET" or not any(p.match(request.path) for p in COALESCE):
            return self.get_response(request)
        who = request.META.get("HTTP_COOKIE", "") + "\0" + request.META.get("HTTP_AUTHORIZATION", "")
        key = request.get_full_path() + "\0" + hashlib.sha256(who.encode()).hexdigest()
        with _guard:
            flight = _flights.get(key)
            leader = flight is None
            if leader:
                flight = _flights[key] = threading.Event()
        if not leader:
            flight.wait(WAIT_S)  # then all followers run at once, each finding the leader's answer cached
            return self.get_response(request)
        try:
            return self.get_response(request)
        finally:
            with _guard:
                _flights.pop(key, None)
            flight.set()
