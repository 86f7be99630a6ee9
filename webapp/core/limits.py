"""How large a request body may be, by path: one table for every layer that enforces it.

Three layers refuse a body over its limit, each as early as it can:
1. the web server (webapp.core.server, daphne with a bounded request): from the Content-Length
   header before a byte of the body is read, or as soon as a body without one (chunked) passes
   the limit; it answers 413 and stops reading;
2. the ASGI application (webapp.asgi.BodyLimit), for any other ASGI server: the same checks on
   the ASGI messages, before Django reads or spools the body;
3. Django itself (DATA_UPLOAD_MAX_MEMORY_SIZE for form fields and request.body).

The views' own limits (task_check.MAX_SOURCE_BYTES, importer.MAX_IMPORT_BYTES) still say what
is wrong with a body that passed; these limits only bound what the server will read at all.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from django.conf import settings


@dataclass(frozen=True)
class BodyLimit:
    limit: int
    what: str  # for the message: "a new job", "a trajectory import", "a request"

    def message(self, size: int | None) -> str:
        got = f"{size} bytes" if size is not None else "more than that"
        return (
            f"Request body too large: {self.what} may be at most {self.limit} bytes "
            f"({self.limit / 1024 / 1024:.2f} MiB); this one is {got}."
        )


def body_limit(path: str) -> BodyLimit:
    """The limit for a request to `path` (the URL path, without the query string)."""
    for prefix, limit, what in settings.KERNELWRIGHT_BODY_LIMITS:
        if path == prefix or (prefix.endswith("/") and path.startswith(prefix)):
            return BodyLimit(limit, what)
    return BodyLimit(settings.KERNELWRIGHT_MAX_BODY_BYTES, "a request")


def too_large_response(path: str, limit: BodyLimit, size: int | None) -> tuple[bytes, bytes]:
    """(content type, body) of the 413 answer: JSON for the API, plain text for pages."""
    text = limit.message(size)
    if path.startswith("/api/"):
        return b"application/json", json.dumps({"error": text, "limit_bytes": limit.limit}).encode()
    return b"text/plain; charset=utf-8", (text + "\n").encode()
