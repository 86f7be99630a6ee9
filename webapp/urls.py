"""Root URLs: the service plumbing (webapp.core), the admin, and the product (webapp.jobs)."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("", include("webapp.core.urls")),
    path("admin/", admin.site.urls),
    path("", include("webapp.jobs.urls")),
]
