"""/healthz and /health/ without a model endpoint: the part is "not configured", neither up nor
a failure (jobs run the built-in policy without it); configured, it is up."""

from __future__ import annotations

import pytest

from webapp.core.health import collect_health


@pytest.fixture
def no_endpoint(settings):
    settings.OPENAI_BASE_URL = ""
    settings.OPENAI_API_KEY = ""


@pytest.mark.django_db
def test_an_unconfigured_endpoint_is_not_configured_in_the_json(client, no_endpoint) -> None:
    model = client.get("/healthz").json()["parts"]["model_endpoint"]
    assert model["state"] == "not configured" and model["ok"] is None and model["error"] is None
    assert model["required"] is False and model["detail"]["configured"] is False
    assert model["summary"].startswith("not configured: jobs run the built-in offline policy")


@pytest.mark.django_db
def test_the_page_shows_not_configured_not_up(client, no_endpoint) -> None:
    html = client.get("/health/").content.decode()
    row = html[html.index('data-part="model_endpoint"') :]
    row = row[: row.index("</tr>")]
    assert 'class="part off" data-part="model_endpoint"' in html
    assert '<td class="state">not configured</td>' in row and ">up<" not in row


@pytest.mark.django_db
def test_a_configured_endpoint_is_up(settings) -> None:
    settings.OPENAI_BASE_URL = "http://127.0.0.1:9/v1"
    part = collect_health(worker_timeout=0.1).part("model_endpoint")
    assert part.ok is True and part.state == "up" and part.summary.endswith("at http://127.0.0.1:9/v1")
