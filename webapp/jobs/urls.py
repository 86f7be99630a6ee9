"""Pages and the JSON API of jobs (owned by the web-app issue)."""

urlpatterns: list = []
