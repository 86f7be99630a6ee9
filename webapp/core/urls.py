from django.urls import path

from webapp.core import views

urlpatterns = [
    path("healthz", views.healthz, name="healthz"),
    path("health/", views.health_page, name="health"),
]
