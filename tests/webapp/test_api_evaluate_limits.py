"""The synchronous POST /api/evaluate takes one of the caller's gpu places
(KERNELWRIGHT_MAX_QUEUED_EVALUATIONS_PER_USER, counted in the real Redis with their jobs' and
batches' evaluations) while it waits for its result: over the limit it is a 429 with
Retry-After and a message naming the setting, and the place is given back however the call
ends (here: the timeout, whether or not a gpu worker runs in this test session)."""

from __future__ import annotations

import threading

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client

from tests.support.processes import wait_for
from webapp.jobs import scheduler
from webapp.jobs.models import ApiToken
from webapp.jobs.sample_trajectory import SOFTMAX_TASK
from webapp.jobs.views.api import EVALUATE_RETRY_AFTER_S

CANDIDATE = {"model_new.py": SOFTMAX_TASK.replace("class Model", "class ModelNew")}


@pytest.fixture
def one_place(settings, redis_url):
    settings.KERNELWRIGHT_MAX_QUEUED_EVALUATIONS_PER_USER = 1
    settings.KERNELWRIGHT_API_EVALUATE_TIMEOUT = 3
    return settings


@pytest.fixture
def owner():
    return User.objects.create_user("evaluator", password="pw-evaluator-123")


@pytest.fixture
def api(owner) -> Client:
    _, key = ApiToken.issue(owner, "test")
    return Client(HTTP_AUTHORIZATION=f"Token {key}")


def evaluate(api: Client):
    return api.post(
        "/api/evaluate",
        {"task": SOFTMAX_TASK, "files": CANDIDATE, "options": {"backend": "cpu"}},
        content_type="application/json",
    )


def places_taken(user) -> int:
    client = scheduler.redis_client()
    try:
        return scheduler.outstanding(client, str(user.pk))
    finally:
        client.close()


def assert_refused(resp) -> None:
    assert resp.status_code == 429, resp.content[:500]
    assert resp["Retry-After"] == str(EVALUATE_RETRY_AFTER_S)
    body = resp.json()
    assert "KERNELWRIGHT_MAX_QUEUED_EVALUATIONS_PER_USER=1" in body["error"] and body["limit"] == 1


@pytest.mark.django_db
def test_a_user_whose_job_holds_the_last_place_is_told_to_come_back(one_place, api, owner):
    scheduler.reserve_gpu_slot(owner.pk, "a-job-evaluation", wait=False)  # as a job's evaluator does
    try:
        assert_refused(evaluate(api))
        assert places_taken(owner) == 1
    finally:
        scheduler.release_gpu_slot(owner.pk, "a-job-evaluation")


def test_a_second_call_waits_for_the_first_and_the_place_comes_back(transactional_db, one_place, api, owner):
    first: dict = {}

    def call() -> None:
        try:
            first["resp"] = evaluate(api)
        finally:
            connection.close()

    thread = threading.Thread(target=call)
    thread.start()
    try:
        wait_for(lambda: places_taken(owner) == 1, timeout=10, what="the first call to take its place")
        assert_refused(evaluate(api))
    finally:
        thread.join(30)
    assert first["resp"].status_code in (200, 504), first["resp"].content[:500]
    assert places_taken(owner) == 0


def test_the_view_waits_as_a_coroutine_not_in_a_web_thread():
    """Under ASGI an async view's wait (asyncio.sleep between polls of the result) holds no thread
    of the server's sync pool, so callers waiting for evaluations do not starve other requests."""
    import asyncio

    from webapp.jobs.views import api

    assert asyncio.iscoroutinefunction(api.evaluate) and asyncio.iscoroutinefunction(api.evaluate_now)
