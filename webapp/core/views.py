"""/healthz (JSON for probes and load balancers) and /health/ (the same report for people)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache

from webapp.core import operator_view
from webapp.core.health import HealthReport, collect_health


def _report_for(request: HttpRequest) -> HealthReport:
    """Every part checked either way; the details only for the operator's view."""
    report = collect_health()
    return report if operator_view.may_see(request.user) else report.public()


@never_cache
def healthz(request: HttpRequest) -> JsonResponse:
    report = _report_for(request)
    return JsonResponse(report.to_dict(), status=200 if report.ok else 503)


@never_cache
def health_page(request: HttpRequest) -> HttpResponse:
    report = _report_for(request)
    return render(request, "core/health.html", {"report": report}, status=200 if report.ok else 503)
