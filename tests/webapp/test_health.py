"""/healthz and /health/: every part checked for real; 503 when a required part is down."""

from __future__ import annotations

import json

import pytest

from webapp.core.health import collect_health

REQUIRED = {
    "database",
    "redis",
    "channel_layer",
    "workers.agent",
    "workers.compile",
    "workers.gpu",
    "sandbox.containment",
}
DEAD_REDIS = "redis://127.0.0.1:1/0"  # nothing listens on port 1


@pytest.fixture
def redis_down(settings):
    from webapp.settings import redis_settings

    for name, value in redis_settings(DEAD_REDIS).items():
        setattr(settings, name, value)


@pytest.mark.django_db
def test_healthz_is_200_with_every_part_green_when_the_stack_is_up(client, live_workers) -> None:
    response = client.get("/healthz")

    body = response.json()
    assert response.status_code == 200, body
    assert body["schema"] == "kernelwright.health/1" and body["ok"] is True
    assert {name for name, part in body["parts"].items() if part["required"]} == REQUIRED
    assert all(part["ok"] is not False for part in body["parts"].values()), body  # None: not configured
    assert body["parts"]["workers.gpu"]["detail"]["workers"][0].startswith("gpu0@")
    assert body["parts"]["workers.agent"]["detail"]["workers"][0].startswith("agent@")
    assert body["parts"]["sandbox"]["detail"]["backend"] in {"cpu", "cuda"}


@pytest.mark.django_db
def test_healthz_is_503_and_names_what_is_down_when_redis_is_unreachable(client, redis_down) -> None:
    response = client.get("/healthz")

    body = response.json()
    assert response.status_code == 503
    assert body["ok"] is False and body["status"] == "unavailable"
    down = {name for name, part in body["parts"].items() if part["ok"] is False}
    assert down == {"redis", "channel_layer", "workers.agent", "workers.compile", "workers.gpu"}
    assert body["parts"]["database"]["ok"] is True
    assert "Connection refused" in body["parts"]["redis"]["error"] or "Error" in body["parts"]["redis"]["error"]


@pytest.mark.django_db
def test_a_queue_without_a_worker_is_red_even_when_others_are_up(settings, live_workers) -> None:
    from webapp.core import health

    by_queue = health.live_workers_by_queue(timeout=1.0)
    assert all(by_queue[q] for q in ("agent", "compile", "gpu"))
    # The same report, read for a queue no worker consumes.
    parts = {p.name: p for p in health.worker_parts(timeout=1.0)}
    assert parts["workers.gpu"].ok
    orphan = health.PartStatus("workers.x", bool(by_queue.get("x")), True, "")
    assert orphan.ok is False
    assert health.HealthReport([*parts.values(), orphan]).ok is False


@pytest.mark.django_db
def test_healthz_shows_the_model_endpoint_but_never_the_key(client, settings, live_workers) -> None:
    settings.OPENAI_BASE_URL = "http://127.0.0.1:9/v1"
    settings.OPENAI_API_KEY = "sk-very-secret-value"
    settings.KERNELWRIGHT_MODEL = "test-model"

    response = client.get("/healthz")

    assert b"sk-very-secret-value" not in response.content
    model = response.json()["parts"]["model_endpoint"]
    assert model["detail"] == {
        "configured": True,
        "base_url": "http://127.0.0.1:9/v1",
        "model": "test-model",
        "api_key_set": True,
    }


@pytest.mark.django_db
def test_an_unconfigured_model_endpoint_is_optional_and_not_a_failure(client, settings, live_workers) -> None:
    settings.OPENAI_BASE_URL = ""
    settings.OPENAI_API_KEY = ""

    report = collect_health()

    model = report.part("model_endpoint")
    assert model.required is False and model.detail["configured"] is False
    assert report.ok is True


@pytest.mark.django_db
def test_health_page_shows_one_row_per_part_and_the_overall_state(client, redis_down) -> None:
    response = client.get("/health/")

    html = response.content.decode()
    assert response.status_code == 503
    assert 'id="overall">unavailable' in html
    assert html.count('data-part="') == 9
    assert 'class="part down" data-part="redis"' in html
    assert 'class="part ok" data-part="database"' in html


def test_report_json_round_trips() -> None:
    from webapp.core.health import HealthReport, PartStatus

    report = HealthReport([PartStatus("database", True, True, "ok"), PartStatus("sandbox", False, False, "down")])
    data = json.loads(json.dumps(report.to_dict()))
    assert data["ok"] is True  # an optional part down does not make the service unavailable
    assert data["parts"]["sandbox"]["ok"] is False
