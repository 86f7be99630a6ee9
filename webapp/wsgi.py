"""WSGI entry point, for tools that want one; the product runs on ASGI (webapp/asgi.py, daphne)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
application = get_wsgi_application()
