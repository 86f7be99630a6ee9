"""Websocket routes of jobs (owned by the web-app issue)."""

websocket_urlpatterns: list = []
