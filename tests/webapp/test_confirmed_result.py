"""Every consumer shows the job's confirmed result with its paired interval, from one stored
place (Job.result()): the header, the job list, the gallery, the API, the zip README and the
speedup chart agree; an interval holding 1.0 is never a win; a noisy window says what its milestone
was judged on; results stored before paired timing say "no interval recorded"; the README's task
hash is evaluation.json's (issues 17 and 19)."""

from __future__ import annotations

import io
import json
import re
import zipfile
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.test import Client

from sandbox.cache import sha256_text
from tests.webapp.paired_trajectories import confirmed_run, eval2
from webapp.jobs import charts
from webapp.jobs.importer import import_trajectory
from webapp.jobs.models import Job
from webapp.jobs.results import SpeedupView

pytestmark = pytest.mark.django_db

GALLERY = Path(__file__).resolve().parents[2] / "webapp" / "jobs" / "fixtures" / "gallery"
CONFIRMED = re.compile(r"^reward 3 · 1\.42x vs eager \(95% interval 1\.\d+-1\.\d+x, 12 paired rounds\)")


@pytest.fixture
def owner():
    return User.objects.create_user("owner", password="pw-owner-123")


@pytest.fixture
def client(owner) -> Client:
    c = Client()
    c.force_login(owner)
    return c


def public(job: Job) -> Job:
    job.visibility = Job.Visibility.PUBLIC
    job.save(update_fields=["visibility"])
    return job


def text_of(html: bytes, element_id: str) -> str:
    """The text of the element with `element_id` (tags dropped, whitespace folded)."""
    body = html.decode()
    start = body.index(f'id="{element_id}"')
    chunk = body[start : body.index("</span>\n", start) if element_id == "job-best" else start + 4000]
    return " ".join(re.sub(r"<[^>]+>", " ", chunk.split(">", 1)[1]).split())


def test_the_header_list_gallery_api_readme_and_chart_show_one_confirmed_number(owner, client):
    final = eval2(2, 1.42, 1.2)
    job = import_trajectory(owner, confirmed_run(final))
    result = job.result()
    assert result.confirmed and result.version == 2 and result.reward == 3
    assert job.best_speedup_eager == final["speedup_vs_eager"]  # the final draw, not the lucky 2.4x
    words = result.text()
    assert CONFIRMED.search(words), words
    assert re.search(r" · 1\.2x vs torch\.compile \(95% interval 1\.\d+-1\.\d+x, 12 paired rounds\)$", words), words

    page = client.get(f"/jobs/{job.pk}/")
    head = text_of(page.content, "job-best")
    assert words in head and "(confirmed)" in head
    listed = client.get("/").content.decode()
    assert words in " ".join(listed.split())

    api = client.get(f"/api/jobs/{job.pk}").json()["best"]
    assert api["confirmed"] is True and api["speedup_vs_eager"] == final["speedup_vs_eager"]
    assert api["result"]["text"] == words
    eager = api["result"]["vs_eager"]
    assert (eager["ratio"], eager["ci_low"], eager["ci_high"], eager["rounds"], eager["verdict"]) == (
        final["speed"]["vs_eager"]["ratio"],
        final["speed"]["vs_eager"]["ci_low"],
        final["speed"]["vs_eager"]["ci_high"],
        12,
        "faster",
    )
    assert client.get(f"/api/jobs/{job.pk}/progress").json()["best"] == api

    with zipfile.ZipFile(io.BytesIO(client.get(f"/jobs/{job.pk}/download/best.zip").content)) as zf:
        name = next(n for n in zf.namelist() if n.endswith("README.md"))
        readme = zf.read(name).decode()
        evaluation = json.loads(zf.read(name.replace("README.md", "evaluation.json")))
    assert "result (confirmed" in readme and f"- speedup: {result.speed.vs_eager.text()}" in readme
    assert "kernelwright.eval/2" in readme

    fig = charts.job_charts(job, list(job.turns.order_by("index")))["speedup"]
    best = next(d for d in fig["data"] if d["name"] == "best verified vs eager")
    assert best["y"][-1] == result.speed.vs_eager.ratio == api["speedup_vs_eager"]
    assert best["y"][0] == pytest.approx(eval2(1, 1.3, 1.1)["speedup_vs_eager"])
    star = next(d for d in fig["data"] if d.get("meta") == "result")
    assert star["y"] == [result.speed.vs_eager.ratio] and star["error_y"]["arrayminus"][0] > 0

    assert evaluation["task_hash"] == job.task_hash == sha256_text(job.source)
    assert f"task hash: {job.task_hash}" in readme


def test_an_interval_that_holds_one_never_reads_faster(owner, client):
    final = eval2(2, 1.01, 0.99)
    assert final["speed"]["vs_eager"]["ci_low"] < 1.0 < final["speed"]["vs_eager"]["ci_high"]
    job = public(import_trajectory(owner, confirmed_run(final)))
    result = job.result()
    assert not result.speed.vs_eager.faster and result.reward == 1
    head = text_of(client.get(f"/jobs/{job.pk}/").content, "job-best")
    assert "no measurable difference vs eager (1.01x, 95% interval" in head
    assert "no measurable difference vs torch.compile" in head
    assert "faster" not in head
    best = client.get(f"/api/jobs/{job.pk}").json()["best"]["result"]
    assert best["vs_eager"]["verdict"] == "no measurable difference" and "faster" not in best["text"]
    # the words follow the interval, whatever the stored verdict says
    claimed = SpeedupView.of("eager", {**final["speed"]["vs_eager"], "verdict": "faster"}, None)
    assert claimed.verdict == "no measurable difference" and "faster" not in claimed.text()


def test_a_noisy_window_says_so_and_what_the_milestone_was_judged_on(owner, client):
    job = import_trajectory(owner, confirmed_run(eval2(2, 1.42, 1.2, noisy=True)))
    result = job.result()
    assert result.reward == 3 and result.speed.noisy  # one slow eager round: the gain holds in the worst pairing
    head = text_of(client.get(f"/jobs/{job.pk}/").content, "job-best")
    assert "noisy timing window: reward on its worst pairing of rounds" in head
    readme = client.get(f"/jobs/{job.pk}/download/best.zip")
    with zipfile.ZipFile(io.BytesIO(readme.content)) as zf:
        text = zf.read(next(n for n in zf.namelist() if n.endswith("README.md"))).decode()
    assert "speed milestone on the worst pairing: the machine was noisy" in text
    assert client.get(f"/api/jobs/{job.pk}").json()["best"]["result"]["noisy"] is True


def test_a_best_not_yet_confirmed_says_so(owner, client):
    job = import_trajectory(owner, confirmed_run(eval2(2, 1.42, 1.2), confirmed=False))
    assert not job.result().confirmed
    head = text_of(client.get(f"/jobs/{job.pk}/").content, "job-best")
    assert "2.4" in head and "(not confirmed)" in head
    assert client.get(f"/api/jobs/{job.pk}").json()["best"]["confirmed"] is False


def test_gallery_results_without_intervals_render_marked(client):
    data = json.loads((GALLERY / "basic_residual_block.json").read_text())
    job = import_trajectory(None, data, origin=Job.Origin.GALLERY, gallery=True, name="basic residual block")
    assert job.best_evaluation["schema"] == "kernelwright.eval/1"
    words = job.result().text()
    assert "vs eager (no interval recorded)" in words
    gallery = " ".join(client.get("/gallery/").content.decode().split())
    assert words in gallery
    head = text_of(client.get(f"/jobs/{job.pk}/").content, "job-best")
    assert words in head and "(not confirmed)" in head
    assert client.get(f"/api/jobs/{job.pk}").json()["best"]["result"]["has_interval"] is False
    # the task hash is the sandbox's, as in the recorded evaluations (not the trajectory's own)
    assert job.task_hash == job.best_evaluation["task_hash"] == sha256_text(job.source)


def test_turns_in_the_api_carry_their_intervals(owner, client):
    job = import_trajectory(owner, confirmed_run(eval2(2, 1.42, 1.2)))
    turns = client.get(f"/api/jobs/{job.pk}/turns").json()["turns"]
    last = turns[-1]
    assert last["speed"]["vs_eager"]["ci_low"] == job.best_evaluation["speed"]["vs_eager"]["ci_low"]
    assert last["speedup_vs_eager"] == job.best_speedup_eager  # the turn holding the final reports it
    assert turns[1]["speed"]["vs_eager"]["rounds"] == 12


def test_the_openapi_schema_documents_eval2_and_the_intervals(client):
    schema = client.get("/api/openapi.json").json()["components"]["schemas"]
    assert "kernelwright.eval/2" in schema["EvalResult"]["description"]
    assert schema["EvalResult"]["properties"]["schema"]["enum"] == ["kernelwright.eval/2"]
    assert {"ci_low", "ci_high", "rounds", "verdict"} <= set(schema["Speedup"]["properties"])
    assert {"confirmed", "result"} <= set(schema["Best"]["properties"])
    assert {"ci_low", "ci_high", "rounds", "verdict", "text"} <= set(schema["SpeedupView"]["properties"])
    assert "speed" in schema["Turn"]["properties"]


def test_the_migration_fills_stored_rows(transactional_db):
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connection)
    executor.migrate([("jobs", "0003_job_scheduled")])
    old = executor.loader.project_state([("jobs", "0003_job_scheduled")]).apps
    data = confirmed_run(eval2(2, 1.42, 1.2))
    source = data["events"][0]["source"]
    job = old.get_model("jobs", "Job").objects.create(
        name="old", source=source, task_hash="plain", state="succeeded", best_version=2
    )
    events = [e for e in data["events"] if e["turn"] == 2]
    old.get_model("jobs", "Turn").objects.create(job=job, index=2, events=events)
    executor = MigrationExecutor(connection)
    executor.migrate([("jobs", "0004_confirmed_result")])
    new = executor.loader.project_state([("jobs", "0004_confirmed_result")]).apps
    job = new.get_model("jobs", "Job").objects.get(pk=job.pk)
    turn = new.get_model("jobs", "Turn").objects.get(job=job)
    assert job.best_confirmed is True and job.task_hash == sha256_text(source)
    assert turn.speed["vs_eager"]["rounds"] == 12
    assert turn.best_speedup_eager == events[-2]["speedup_vs_eager"]
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())


def test_compare_shows_each_sides_interval(owner, client):
    a = import_trajectory(owner, confirmed_run(eval2(2, 1.42, 1.2)))
    b = import_trajectory(owner, confirmed_run(eval2(2, 1.01, 0.99)))
    html = client.get(f"/compare/?a={a.pk}&b={b.pk}").content
    row = text_of(html, "compare-speed")
    assert a.result().speed.vs_eager.text() in row and b.result().speed.vs_eager.text() in row
    assert "no measurable difference vs eager" in row
