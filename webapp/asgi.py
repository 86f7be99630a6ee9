"""The ASGI application the web server serves: Django for HTTP, Channels consumers for websockets.

HTTP requests pass BodyLimit first (webapp/core/limits.py): a body over its path's limit is
answered 413 before Django reads it, whichever ASGI server runs this (webapp.core.server, the
launcher's, refuses it earlier still, before reading it from the socket).
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
# Set up Django before importing consumers (they import models).
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from webapp.core import routing as core_routing  # noqa: E402
from webapp.core.backend import warm_up_in_background  # noqa: E402
from webapp.core.limits import body_limit, too_large_response  # noqa: E402
from webapp.core.viewers import SharedViewerCache  # noqa: E402
from webapp.jobs import routing as jobs_routing  # noqa: E402


class BodyLimit:
    """ASGI middleware: refuse an HTTP body over its limit with 413, from Content-Length before
    reading any of it, else (no length given) as soon as the messages received pass the limit."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope.get("path", "")
        limit = body_limit(path)
        length = next((v for k, v in scope.get("headers", []) if k == b"content-length"), None)
        if length is not None:
            size = int(length) if length.isdigit() else None
            if size is None or size > limit.limit:
                return await self._refuse(send, path, limit, size)
            return await self.app(scope, receive, send)
        # No length (chunked): read up to the limit here, then hand the messages on.
        messages, received = [], 0
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break
            received += len(message.get("body", b""))
            if received > limit.limit:
                return await self._refuse(send, path, limit, None)
            if not message.get("more_body"):
                break

        async def replay():
            return messages.pop(0) if messages else await receive()

        return await self.app(scope, replay, send)

    @staticmethod
    async def _refuse(send, path, limit, size) -> None:
        kind, body = too_large_response(path, limit, size)
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", kind),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


application = ProtocolTypeRouter(
    {
        # Bodies bounded first; then the crowd of anonymous viewers of a job answered from the
        # shared cache before Django (webapp/core/viewers.py).
        "http": BodyLimit(SharedViewerCache(django_asgi_app)),
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(core_routing.websocket_urlpatterns + jobs_routing.websocket_urlpatterns))
        ),
    }
)

warm_up_in_background()
