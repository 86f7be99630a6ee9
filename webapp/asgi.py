"""The ASGI application daphne serves: Django for HTTP, Channels consumers for websockets."""

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
from webapp.jobs import routing as jobs_routing  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(core_routing.websocket_urlpatterns + jobs_routing.websocket_urlpatterns))
        ),
    }
)

warm_up_in_background()
