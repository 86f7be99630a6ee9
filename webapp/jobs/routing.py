"""Websocket routes of jobs; the foundation's ASGI app mounts them behind its auth middleware."""

from django.urls import path

from webapp.jobs.consumers import JobConsumer

websocket_urlpatterns = [
    path("ws/jobs/<int:job_id>/", JobConsumer.as_asgi()),
]
