from django.apps import AppConfig


class CoreConfig(AppConfig):
    """Service plumbing: health checks, the ping tasks and the echo websocket."""

    name = "webapp.core"
    label = "core"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Every Django process (web server, worker, manage.py) gets the project's Celery app as the
        # current one, so `.delay()` from a view goes to Redis, not to Celery's default broker.
        from webapp import celery  # noqa: F401
