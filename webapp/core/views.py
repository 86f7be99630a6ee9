"""/healthz (JSON for probes and load balancers) and /health/ (the same report for people)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache

from webapp.core.health import collect_health


@never_cache
def healthz(request: HttpRequest) -> JsonResponse:
    report = collect_health()
    return JsonResponse(report.to_dict(), status=200 if report.ok else 503)


@never_cache
def health_page(request: HttpRequest) -> HttpResponse:
    report = collect_health()
    return render(request, "core/health.html", {"report": report}, status=200 if report.ok else 503)
