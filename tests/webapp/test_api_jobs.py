"""The JSON API: token auth, creating and reading jobs and turns, polling, artifacts, the schema."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.test import Client

from tests.webapp.test_api_schema import api_routes
from webapp.jobs.importer import import_trajectory
from webapp.jobs.models import ApiToken, Job
from webapp.jobs.sample_trajectory import build

pytestmark = pytest.mark.django_db
TASK = (Path(__file__).parent / "data" / "row_softmax_small.py").read_text()


@pytest.fixture
def owner():
    return User.objects.create_user("owner", password="pw-owner-123")


@pytest.fixture
def api(owner) -> Client:
    _, key = ApiToken.issue(owner, "test")
    return Client(HTTP_AUTHORIZATION=f"Token {key}")


def test_it_creates_a_job_with_a_token(api, owner):
    resp = api.post(
        "/api/jobs",
        {"name": "softmax", "source": TASK, "options": {"backend": "cpu", "max_turns": 4}},
        content_type="application/json",
    )
    assert resp.status_code == 201
    body = resp.json()
    job = Job.objects.get(pk=body["id"])
    assert job.owner == owner and body["state"] == "queued" and body["options"]["max_turns"] == 4


def test_it_explains_an_invalid_job(api):
    resp = api.post("/api/jobs", {"source": "x = 1", "options": {"backend": "tpu"}}, content_type="application/json")
    assert resp.status_code == 400
    assert any("Model" in e for e in resp.json()["errors"])
    assert api.post("/api/jobs", "not json", content_type="application/json").status_code == 400


def test_it_rejects_bad_tokens_and_session_writes(owner):
    assert Client(HTTP_AUTHORIZATION="Token nope").get("/api/jobs").status_code == 401
    assert Client(HTTP_AUTHORIZATION="Bearer x").get("/api/jobs").status_code == 401
    session = Client()
    session.force_login(owner)
    assert session.get("/api/jobs").status_code == 200  # reads work with the browser session
    resp = session.post("/api/jobs", {"source": TASK}, content_type="application/json")
    assert resp.status_code == 401  # writes need a token (the API is CSRF-exempt)
    assert not Job.objects.exists()


def test_turns_since_for_polling(api, owner):
    job = import_trajectory(owner, build(turns=5))
    everything = api.get(f"/api/jobs/{job.pk}/turns").json()
    assert [t["index"] for t in everything["turns"]] == [0, 1, 2, 3, 4, 5]
    newer = api.get(f"/api/jobs/{job.pk}/turns", {"since": 3}).json()
    assert [t["index"] for t in newer["turns"]] == [4, 5] and newer["last_index"] == 5 and not newer["more"]
    assert newer["turns"][0]["events"][0]["type"] == "turn_started"
    assert api.get(f"/api/jobs/{job.pk}/turns", {"since": "x"}).status_code == 400
    one = api.get(f"/api/jobs/{job.pk}/turns/2").json()
    assert one["reward"] == -1 and one["has_error"]
    assert api.get(f"/api/jobs/{job.pk}/turns/99").status_code == 404


def test_progress_and_job(api, owner):
    job = import_trajectory(owner, build(turns=3))
    progress = api.get(f"/api/jobs/{job.pk}/progress").json()
    assert progress["state"] == "succeeded" and progress["last_turn"] == 3 and progress["turns"] == 4
    assert progress["best"]["version"] == job.best_version
    detail = api.get(f"/api/jobs/{job.pk}").json()
    assert detail["id"] == job.pk and detail["best"]["reward"] == job.best_reward


def test_artifacts_list_and_downloads(api, owner):
    job = import_trajectory(owner, build(turns=3))
    listing = api.get(f"/api/jobs/{job.pk}/artifacts").json()
    assert {f["path"] for f in listing["files"]} == {"model_new.py", "kernels/softmax.cpp"}
    assert listing["evaluation"]["status"] == "ok"
    assert api.get(f"/api/jobs/{job.pk}/artifacts/best.zip")["Content-Type"] == "application/zip"
    assert b"softmax_rows" in api.get(f"/api/jobs/{job.pk}/artifacts/files/kernels/softmax.cpp").content
    assert api.get(f"/api/jobs/{job.pk}/trajectory").json()["schema"] == "kernelwright.trajectory/1"


def test_cancel_through_the_api(api, owner):
    job = Job.objects.create(owner=owner, name="t", source=TASK, task_hash="h", options={})
    assert api.post(f"/api/jobs/{job.pk}/cancel").json()["state"] == "cancelled"
    assert api.get(f"/api/jobs/{job.pk}/cancel").status_code == 405


@pytest.mark.parametrize(
    "body,message",
    [
        ({"files": {"model_new.py": "x"}}, "task"),
        ({"task": "x = 1", "files": {"model_new.py": "x"}}, "invalid task"),
        ({"task": TASK, "files": {}}, "files"),
        ({"task": TASK, "files": {"../escape.py": "x"}}, "inside the workspace"),
        ({"task": TASK, "files": {"model_new.py": "x" * (1024 * 1024 + 1)}}, "exceed"),
        ({"task": TASK, "files": {"model_new.py": "x"}, "options": {"torch_ops": "maybe"}}, "invalid options"),
    ],
)
def test_evaluate_validates_its_input(api, body, message):
    resp = api.post("/api/evaluate", body, content_type="application/json")
    assert resp.status_code == 400 and message in resp.content.decode()


def test_evaluate_needs_a_token():
    assert Client().post("/api/evaluate", {}, content_type="application/json").status_code == 401


def test_the_openapi_schema_describes_every_api_route():
    schema = Client().get("/api/openapi.json").json()
    assert schema["openapi"].startswith("3.")
    documented = set(schema["paths"])
    routes = api_routes()
    assert routes and routes == documented
    for path, ops in schema["paths"].items():
        for op in ops.values():
            for ref in re.findall(r"#/components/schemas/(\w+)", str(op)):
                assert ref in schema["components"]["schemas"], (path, ref)


@pytest.mark.slow
def test_evaluate_runs_on_the_gpu_queue_and_returns_the_sandbox_result(live_workers, transactional_db, owner):
    from agent.testing.scenarios import candidate

    _, key = ApiToken.issue(owner)
    api = Client(HTTP_AUTHORIZATION=f"Token {key}")
    resp = api.post(
        "/api/evaluate",
        {"task": TASK, "files": candidate("cpu"), "options": {"backend": "cpu"}},
        content_type="application/json",
    )
    assert resp.status_code == 200, resp.content[:500]
    result = resp.json()
    assert result["schema"] == "kernelwright.eval/2" and result["backend"] == "cpu"
    assert result["status"] == "ok" and result["reward"] >= 1 and len(result["trials"]) >= 5
    broken = dict(candidate("cpu"))
    broken["kernels/softmax.cpp"] = broken["kernels/softmax.cpp"].replace(
        "const float inv = 1.0f / s;", "const float inv = 1.0f;"
    )
    bad = api.post(
        "/api/evaluate", {"task": TASK, "files": broken, "options": {"backend": "cpu"}}, content_type="application/json"
    ).json()
    assert bad["status"] == "incorrect" and bad["reward"] == -1
