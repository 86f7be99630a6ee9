"""Asynchronous batched evaluation: POST /api/evaluations answers at once with ids, rows go to
the gpu queue only while their user has a place there, results are polled or sent to a webhook
(webapp.jobs.evaluations, webapp.jobs.views.batch). Redis is real; the fast tests call the gpu
worker's `finish` directly, the slow one has a real gpu worker evaluate a batch."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.test import Client

from agent.testing.scenarios import candidate, wrong_candidate
from sandbox.schema import EvalResult, Status, Verdict
from webapp.jobs import evaluations, scheduler
from webapp.jobs.models import ApiToken, Evaluation

TASK = (Path(__file__).parent / "data" / "row_softmax_small.py").read_text()


@pytest.fixture
def owner(db):
    return User.objects.create_user("owner", password="pw-owner-123")


@pytest.fixture
def api(owner) -> Client:
    _, key = ApiToken.issue(owner, "rollouts")
    return Client(HTTP_AUTHORIZATION=f"Token {key}")


@pytest.fixture
def gpu_places(settings, redis_url, owner):
    """Two places on the gpu queue for the owner; the ones the test's rows took are given back."""
    settings.KERNELWRIGHT_MAX_QUEUED_EVALUATIONS_PER_USER = 2
    yield
    for task_id in Evaluation.objects.exclude(task_id="").values_list("task_id", flat=True):
        scheduler.release_gpu_slot(owner.pk, task_id)


class Hook:
    """A real HTTP server on loopback that records the webhook calls it receives."""

    def __init__(self) -> None:
        calls = self.calls = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                calls.append({"path": self.path, "headers": dict(self.headers), "body": body})
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook?run=7"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hook():
    h = Hook()
    yield h
    h.stop()


def post(api: Client, n: int = 1, **extra):
    body = {
        "task": TASK,
        "candidates": [{"files": candidate("cpu")} for _ in range(n)],
        "options": {"backend": "cpu"},
        **extra,
    }
    return api.post("/api/evaluations", body, content_type="application/json")


def a_result(status: Status = Status.TIMEOUT) -> dict:
    return EvalResult(status=status, verdict=Verdict.FAIL, reasons=["the evaluation ran out of time"]).to_dict()


@pytest.mark.django_db
def test_a_post_answers_at_once_and_sends_only_as_many_as_the_user_has_gpu_places(
    api, gpu_places, django_capture_on_commit_callbacks
):
    started = time.monotonic()
    with django_capture_on_commit_callbacks(execute=True):
        resp = post(api, 3)
    assert resp.status_code == 202 and time.monotonic() - started < 10
    body = resp.json()
    assert [e["state"] for e in body["evaluations"]] == ["queued"] * 3 and len(
        {e["id"] for e in body["evaluations"]}
    ) == 3
    rows = list(Evaluation.objects.order_by("index"))
    assert [bool(r.task_id) for r in rows] == [True, True, False]  # the third waits for a place
    listed = api.get(f"/api/evaluations?batch={body['batch']}").json()["evaluations"]
    assert [e["id"] for e in listed] == [e["id"] for e in body["evaluations"]]
    evaluations.finish(rows[0].pk, Evaluation.State.DONE, result=a_result())  # what the gpu worker does
    rows = list(Evaluation.objects.order_by("index"))
    assert rows[2].task_id, "the finished one's place went to the waiting one"
    one = api.get(f"/api/evaluations/{rows[0].pk}").json()
    assert one["state"] == "done" and one["result"]["status"] == "timeout" and one["reward"] == -1


@pytest.mark.django_db
def test_only_the_owner_reads_an_evaluation(api, gpu_places):
    ev_id = post(api).json()["evaluations"][0]["id"]
    stranger = User.objects.create_user("stranger", password="pw-stranger-1")
    _, key = ApiToken.issue(stranger)
    assert Client(HTTP_AUTHORIZATION=f"Token {key}").get(f"/api/evaluations/{ev_id}").status_code == 404
    assert Client().get(f"/api/evaluations/{ev_id}").status_code == 401


@pytest.mark.django_db
def test_posts_over_the_rate_limit_get_429_with_retry_after(api, gpu_places, settings):
    settings.KERNELWRIGHT_EVALUATION_POSTS_PER_MINUTE = 2
    assert [post(api).status_code for _ in range(2)] == [202, 202]
    refused = post(api)
    assert refused.status_code == 429 and 1 <= int(refused["Retry-After"]) <= 60
    assert "evaluation requests in a minute" in refused.json()["error"]


@pytest.mark.django_db
def test_the_daily_quota_is_per_token(api, owner, gpu_places, settings):
    settings.KERNELWRIGHT_EVALUATIONS_PER_DAY = 3
    assert post(api, 2).status_code == 202
    over = post(api, 2)
    assert over.status_code == 429 and int(over["Retry-After"]) > 23 * 3600
    assert "daily quota of 3" in over.json()["error"]
    assert post(api, 4).status_code == 400  # never fits: waiting would not help
    _, key = ApiToken.issue(owner, "second token")
    assert post(Client(HTTP_AUTHORIZATION=f"Token {key}"), 2).status_code == 202


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"task": TASK}, "`candidates` must be a list"),
        ({"task": TASK, "candidates": [{"files": {"../x.py": "1"}}]}, "stay inside the workspace"),
        ({"task": TASK, "candidates": [{"nofiles": 1}]}, "candidate 0"),
        ({"task": "x = 1", "candidates": [{"files": {"a.py": "1"}}]}, "invalid task"),
        ({"task": TASK, "candidates": [{"files": {"a.py": "1"}}], "options": {"backend": "tpu"}}, "invalid options"),
        (
            {"task": TASK, "candidates": [{"files": {"a.py": "1"}}], "webhook": "ftp://example.org/x"},
            "not an http(s) URL",
        ),
        (
            {"task": TASK, "candidates": [{"files": {"a.py": "1"}}], "webhook": "http://u:p@example.org/x"},
            "credentials",
        ),
        (
            {"task": TASK, "candidates": [{"files": {"a.py": "1"}}], "webhook": "http://127.0.0.1:9/x"},
            "private or reserved",
        ),
        (
            {"task": TASK, "candidates": [{"files": {"a.py": "1"}}], "webhook": "http://10.1.2.3/x"},
            "private or reserved",
        ),
        (
            {"task": TASK, "candidates": [{"files": {"a.py": "1"}}], "webhook": "http://[::ffff:127.0.0.1]/x"},
            "private or reserved",
        ),
    ],
)
def test_a_bad_batch_is_explained(api, body, words):
    resp = api.post("/api/evaluations", body, content_type="application/json")
    assert resp.status_code == 400 and words in json.dumps(resp.json()), resp.json()
    assert not Evaluation.objects.exists()


@pytest.mark.django_db
def test_a_session_cannot_post(owner):
    browser = Client()
    browser.force_login(owner)
    assert browser.post("/api/evaluations", {}, content_type="application/json").status_code == 401


@pytest.mark.django_db
def test_the_webhook_is_called_signed_when_loopback_is_allowed(api, gpu_places, settings, hook):
    settings.KERNELWRIGHT_WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    body = post(api, 1, webhook=hook.url).json()
    ev_id = body["evaluations"][0]["id"]
    evaluations.finish(ev_id, Evaluation.State.DONE, result=a_result(Status.INCORRECT))
    assert len(hook.calls) == 1
    call = hook.calls[0]
    assert call["path"] == "/hook?run=7"
    expected = "sha256=" + hmac.new(body["webhook_secret"].encode(), call["body"], hashlib.sha256).hexdigest()
    assert call["headers"]["X-Kernelwright-Signature"] == expected
    note = json.loads(call["body"])
    assert note == {
        "id": ev_id,
        "batch": body["batch"],
        "index": 0,
        "state": "done",
        "status": "incorrect",
        "reward": -1,
        "reason": "",
        "href": f"/api/evaluations/{ev_id}",
    }
    assert api.get(f"/api/evaluations/{ev_id}").json()["webhook"]["status"] == "204"


@pytest.mark.django_db
def test_the_webhook_address_is_checked_again_when_it_is_called(api, gpu_places, settings, hook):
    settings.KERNELWRIGHT_WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    ev_id = post(api, 1, webhook=hook.url).json()["evaluations"][0]["id"]
    settings.KERNELWRIGHT_WEBHOOK_ALLOWED_NETWORKS = []  # as on a worker that does not allow it
    evaluations.finish(ev_id, Evaluation.State.FAILED, reason="the worker died")
    assert hook.calls == []
    assert Evaluation.objects.get(pk=ev_id).webhook_status.startswith("refused: 127.0.0.1 resolves to a private")


@pytest.mark.slow
def test_a_real_gpu_worker_evaluates_a_batch_while_the_caller_polls(live_workers, transactional_db, owner, hook):
    _, key = ApiToken.issue(owner)
    api = Client(HTTP_AUTHORIZATION=f"Token {key}")
    candidates = [{"files": candidate("cpu")}, {"files": wrong_candidate("cpu")}]
    body = {"task": TASK, "candidates": candidates, "options": {"backend": "cpu"}, "webhook": hook.url}
    # the worker runs the deployment's settings: loopback is not allowed there, so the POST (here) must allow it
    from django.test import override_settings

    with override_settings(KERNELWRIGHT_WEBHOOK_ALLOWED_NETWORKS=["127.0.0.0/8"]):
        resp = api.post("/api/evaluations", body, content_type="application/json")
    assert resp.status_code == 202, resp.content[:300]
    ids = [e["id"] for e in resp.json()["evaluations"]]
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        states = [api.get(f"/api/evaluations/{i}").json() for i in ids]
        if all(s["state"] in ("done", "failed") for s in states):
            break
        time.sleep(2)
    good, bad = states
    assert good["state"] == "done" and good["result"]["status"] == "ok" and good["reward"] >= 1, good.get("result")
    assert bad["state"] == "done" and bad["result"]["status"] == "incorrect" and bad["reward"] == -1
    assert good["webhook"]["status"].startswith("refused:") and hook.calls == []  # the worker checked again


@pytest.mark.django_db
def test_a_row_whose_message_was_lost_is_sent_again_on_the_next_poll(api, gpu_places, settings):
    from datetime import timedelta

    from django.utils import timezone

    ev_id = post(api).json()["evaluations"][0]["id"]
    long_ago = timezone.now() - timedelta(seconds=settings.CELERY_GPU_TIME_LIMIT + 700)
    Evaluation.objects.filter(pk=ev_id).update(task_id="lost-with-redis", dispatched_at=long_ago)
    assert api.get(f"/api/evaluations/{ev_id}").json()["state"] == "queued"
    row = Evaluation.objects.get(pk=ev_id)
    assert row.task_id not in ("", "lost-with-redis") and row.dispatched_at > long_ago
    evaluations.run(ev_id, "lost-with-redis")  # the old message, should it come after all
    assert Evaluation.objects.get(pk=ev_id).state == "queued"
