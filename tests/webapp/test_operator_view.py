"""The operator's view (webapp/core/operator_view.py): on a deployment reachable by other names
than localhost, a visitor's /healthz and /health/ say what is up and what is down, not the
worker host names, the model endpoint's URL or error texts; the echo websocket refuses them.
Staff users see everything. One person's own machine (loopback names only) shows everyone."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model

from webapp.core import operator_view
from webapp.core.consumers import CLOSE_FORBIDDEN

INTERNAL_URL = "http://10.20.30.40:8123/v1"  # an endpoint a visitor must not learn
DEPLOYED = ["kw.example.org", "localhost", "127.0.0.1"]


@pytest.fixture
def deployed(settings):
    settings.ALLOWED_HOSTS = DEPLOYED
    settings.OPENAI_BASE_URL = INTERNAL_URL
    settings.KERNELWRIGHT_OPERATOR_VIEW = "auto"
    return settings


@pytest.fixture
def staff(client):
    user = get_user_model().objects.create_user("op", password="pw-op-123456", is_staff=True)
    client.force_login(user)
    return user


@pytest.mark.django_db
def test_a_visitor_sees_states_but_not_hosts_urls_or_errors(client, deployed) -> None:
    body = client.get("/healthz", HTTP_HOST="kw.example.org").json()
    text = str(body)

    assert INTERNAL_URL not in text and "10.20.30.40" not in text
    assert {p["state"] for p in body["parts"].values()} <= {"up", "down", "not configured"}
    assert all(p["detail"] == {} and p["error"] is None and p["redacted"] for p in body["parts"].values())
    assert body["parts"]["model_endpoint"]["state"] == "up"  # the state still says it is configured

    page = client.get("/health/", HTTP_HOST="kw.example.org").content.decode()
    assert INTERNAL_URL not in page and "shown to staff users" in page


@pytest.mark.django_db
def test_staff_and_a_local_machine_see_the_details(client, deployed, staff) -> None:
    body = client.get("/healthz", HTTP_HOST="kw.example.org").json()
    assert body["parts"]["model_endpoint"]["detail"]["base_url"] == INTERNAL_URL
    assert "shown to staff users" not in client.get("/health/", HTTP_HOST="kw.example.org").content.decode()

    client.logout()
    deployed.ALLOWED_HOSTS = ["localhost", "127.0.0.1", "[::1]"]  # the launcher's default: one person's machine
    local = client.get("/healthz", HTTP_HOST="localhost").json()
    assert local["parts"]["model_endpoint"]["detail"]["base_url"] == INTERNAL_URL


def test_the_mode_follows_the_setting_and_refuses_a_typo(settings) -> None:
    settings.ALLOWED_HOSTS = ["*"]  # a wildcard answers to any name: not one person's machine
    settings.KERNELWRIGHT_OPERATOR_VIEW = "auto"
    assert operator_view.mode() == "staff"
    settings.KERNELWRIGHT_OPERATOR_VIEW = "Everyone"
    assert operator_view.mode() == "everyone"
    settings.KERNELWRIGHT_OPERATOR_VIEW = "public"
    with pytest.raises(ValueError, match="KERNELWRIGHT_OPERATOR_VIEW"):
        operator_view.mode()


def _echo(cookie: str | None) -> tuple[bool, object]:
    from webapp.asgi import application

    async def scenario():
        headers = [(b"origin", b"http://127.0.0.1")] + ([(b"cookie", cookie.encode())] if cookie else [])
        communicator = WebsocketCommunicator(application, "/ws/echo/", headers=headers)
        connected, code = await communicator.connect(timeout=10)
        if connected:
            await communicator.send_to(text_data="ping")
            code = await communicator.receive_from(timeout=10)
            await communicator.disconnect()
        return connected, code

    return async_to_sync(scenario)()


@pytest.mark.django_db(transaction=True)  # the consumer reads the session's user from another thread
def test_the_echo_websocket_is_the_operators_only(client, deployed, redis_url) -> None:
    assert _echo(None) == (False, CLOSE_FORBIDDEN)

    user = get_user_model().objects.create_user("op2", password="pw-op-123456", is_staff=True)
    client.force_login(user)
    assert _echo(f"sessionid={client.cookies['sessionid'].value}") == (True, "ping")
