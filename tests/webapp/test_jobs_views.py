"""Pages: new job (upload, paste, live check), the job page and its updates, downloads, sharing,
import, gallery, compare, accounts. Rendering must keep model output, code and logs as text."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.test import Client

from webapp.jobs import services
from webapp.jobs.importer import import_trajectory
from webapp.jobs.models import Job
from webapp.jobs.sample_trajectory import build
from webapp.jobs.task_check import MAX_SOURCE_BYTES

pytestmark = pytest.mark.django_db
TASK = (Path(__file__).parent / "data" / "row_softmax_small.py").read_text()


@pytest.fixture
def owner():
    return User.objects.create_user("owner", password="pw-owner-123")


@pytest.fixture
def client(owner) -> Client:
    c = Client()
    c.force_login(owner)
    return c


@pytest.fixture
def job(owner) -> Job:
    return import_trajectory(owner, build(turns=5))


def test_signup_logs_in_and_logout_logs_out():
    c = Client()
    resp = c.post(
        "/accounts/signup/", {"username": "newbie", "password1": "a-Long-pass-123", "password2": "a-Long-pass-123"}
    )
    assert resp.status_code == 302
    assert c.get("/").context["user"].username == "newbie"
    c.post("/accounts/logout/")
    assert not c.get("/").context["user"].is_authenticated


def test_login_page_logs_in(owner):
    c = Client()
    resp = c.post("/accounts/login/", {"username": "owner", "password": "pw-owner-123"})
    assert resp.status_code == 302 and resp["Location"] == "/"


def test_new_job_from_an_uploaded_file(client, owner):
    upload = SimpleUploadedFile("row_softmax_small.py", TASK.encode(), content_type="text/x-python")
    resp = client.post(
        "/jobs/new/",
        {
            "file": upload,
            "backend": "cpu",
            "policy": "builtin",
            "max_turns": "3",
            "preset": "default",
            "torch_ops": "forbid",
            "name": "",
        },
    )
    job = Job.objects.get(owner=owner)
    assert resp.status_code == 302 and resp["Location"] == f"/jobs/{job.pk}/"
    assert job.source == TASK and job.name == "row_softmax_small"
    assert job.options["max_turns"] == 3 and job.options["backend"] == "cpu"


def test_new_job_from_pasted_source(client, owner):
    resp = client.post(
        "/jobs/new/",
        {
            "source": TASK,
            "name": "pasted",
            "backend": "auto",
            "policy": "builtin",
            "max_turns": "5",
            "preset": "kernelbench",
            "torch_ops": "allow",
        },
    )
    assert resp.status_code == 302
    assert Job.objects.get(owner=owner).options["preset"] == "kernelbench"


def test_new_job_shows_what_is_missing(client, owner):
    resp = client.post("/jobs/new/", {"source": "import torch\n", "max_turns": "5"})
    assert resp.status_code == 400
    text = resp.content.decode()
    assert "class Model" in text and "get_inputs" in text and "get_init_inputs" in text
    assert not Job.objects.exists()


def test_new_job_refuses_a_file_over_the_limit(client):
    big = SimpleUploadedFile("big.py", b"#" * (MAX_SOURCE_BYTES + 1))
    resp = client.post("/jobs/new/", {"file": big, "max_turns": "5"})
    assert resp.status_code == 400 and "limit" in resp.content.decode()
    assert not Job.objects.exists()


def test_new_job_needs_login():
    assert Client().get("/jobs/new/").status_code == 302


def test_the_live_check_endpoint_parses_without_importing(client, tmp_path):
    marker = tmp_path / "ran"
    ok = client.post("/jobs/check/", {"source": TASK + f"\nopen({str(marker)!r}, 'w')\n"}).json()
    assert ok["ok"] and not marker.exists()
    bad = client.post("/jobs/check/", {"source": "class Model(:"}).json()
    assert not bad["ok"] and "Syntax error" in bad["errors"][0]


def test_the_job_page_renders_turns_charts_and_escapes_model_output(client, job):
    resp = client.get(f"/jobs/{job.pk}/")
    html = resp.content.decode()
    assert resp.status_code == 200
    for index in range(1, 6):
        assert f'id="turn-{index}"' in html
    assert "<script>alert('x')</script>" not in html
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in html
    assert "<b>not html</b>" not in html and "&lt;b&gt;not html&lt;/b&gt;" in html  # compile log
    assert 'class="l-err"' in html  # the compile error line is highlighted
    assert 'class="d-add"' in html  # diffs are coloured
    config = resp.context["config"]
    assert set(config["charts"]) == {"speedup", "baselines", "kernels", "roofline"}
    assert config["last_index"] == 5
    assert "/static/plotly/plotly.min.js" in html


def test_updates_return_only_turns_after_since(client, job):
    data = client.get(f"/jobs/{job.pk}/updates/", {"since": 3}).json()
    assert 'id="turn-4"' in data["html"] and 'id="turn-5"' in data["html"] and 'id="turn-3"' not in data["html"]
    assert data["last_index"] == 5 and data["live"]["state"] == "succeeded"
    assert data["charts"]["speedup"]["data"][0]["x"] == [1, 4, 5]  # turn 2 was incorrect, turn 3 did not compile
    none = client.get(f"/jobs/{job.pk}/updates/", {"since": 5}).json()
    assert none["html"].strip() == "" and none["last_index"] == 5 and none["charts"] is None


def test_the_zip_holds_the_best_candidate_readme_and_evaluation(client, job):
    resp = client.get(f"/jobs/{job.pk}/download/best.zip")
    assert resp["Content-Type"] == "application/zip"
    zf = zipfile.ZipFile(io.BytesIO(resp.content))
    names = {n.split("/", 1)[1] for n in zf.namelist()}
    assert {"model_new.py", "kernels/softmax.cpp", "README.md", "evaluation.json", "task.py"} <= names
    root = zf.namelist()[0].split("/")[0]
    readme = zf.read(f"{root}/README.md").decode()
    evaluation = json.loads(zf.read(f"{root}/evaluation.json"))
    assert "device: synthetic" in readme and "5/5 trials passed" in readme
    assert evaluation["candidate_hash"] == "c5" and evaluation["status"] == "ok"


def test_single_file_and_trajectory_downloads(client, job):
    kernel = client.get(f"/jobs/{job.pk}/download/files/kernels/softmax.cpp")
    assert kernel.status_code == 200 and b"softmax_rows" in b"".join(
        kernel.streaming_content if kernel.streaming else [kernel.content]
    )
    assert client.get(f"/jobs/{job.pk}/download/files/nope.py").status_code == 404
    traj = json.loads(client.get(f"/jobs/{job.pk}/download/trajectory.json").content)
    assert traj["schema"] == "kernelwright.trajectory/1"
    assert traj["events"] == [e for t in job.turns.order_by("index") for e in t.events]
    assert [e["type"] for e in traj["events"]][:1] == ["task"] and traj["events"][-1]["type"] == "finished"
    # the export imports again into an identical job
    again = import_trajectory(job.owner, traj)
    assert [t.events for t in again.turns.order_by("index")] == [t.events for t in job.turns.order_by("index")]


def test_share_link_round_trip(client, job):
    client.post(f"/jobs/{job.pk}/share/")
    job.refresh_from_db()
    assert job.share_token
    anon = Client()
    resp = anon.get(f"/s/{job.share_token}/")
    assert resp.status_code == 302 and resp["Location"] == f"/jobs/{job.pk}/?share={job.share_token}"
    page = anon.get(resp["Location"])
    assert page.status_code == 200 and b"Create share link" not in page.content  # read-only
    assert f"?share={job.share_token}".encode() in page.content  # downloads carry the token
    token = job.share_token
    client.post(f"/jobs/{job.pk}/share/revoke/")
    assert anon.get(f"/s/{token}/").status_code == 404


def test_visibility_toggle(client, job):
    client.post(f"/jobs/{job.pk}/visibility/", {"visibility": "public"})
    assert Client().get(f"/jobs/{job.pk}/").status_code == 200
    client.post(f"/jobs/{job.pk}/visibility/", {"visibility": "private"})
    assert Client().get(f"/jobs/{job.pk}/").status_code == 302


def test_cancel_and_retry(client, owner):
    job = services.create_job(owner, "t", TASK, {}, enqueue=False)
    client.post(f"/jobs/{job.pk}/cancel/")
    job.refresh_from_db()
    assert job.state == "cancelled"
    resp = client.post(f"/jobs/{job.pk}/retry/")
    new = Job.objects.exclude(pk=job.pk).get()
    assert resp["Location"] == f"/jobs/{new.pk}/" and new.state == "queued"


def test_import_page(client, owner):
    upload = SimpleUploadedFile("t.json", json.dumps(build(turns=2)).encode(), content_type="application/json")
    resp = client.post("/jobs/import/", {"file": upload})
    job = Job.objects.get(owner=owner)
    assert resp["Location"] == f"/jobs/{job.pk}/" and job.origin == "imported" and job.turns.count() == 3
    bad = SimpleUploadedFile("t.json", b'{"schema": "nope", "events": []}')
    resp = client.post("/jobs/import/", {"file": bad})
    assert resp.status_code == 400 and "unsupported trajectory schema" in resp.content.decode()


def test_load_gallery_loads_any_trajectory_and_is_idempotent(tmp_path):
    (tmp_path / "softmax.json").write_text(json.dumps(build(turns=3, name="Row softmax case")))
    call_command("load_gallery", str(tmp_path))
    call_command("load_gallery", str(tmp_path))
    job = Job.objects.get()
    assert job.gallery and job.visibility == "public" and job.origin == "gallery" and job.name == "Row softmax case"
    page = Client().get("/gallery/").content.decode()
    assert "Row softmax case" in page
    assert Client().get(f"/jobs/{job.pk}/").status_code == 200


def test_compare_two_jobs_and_turns(client, owner, job):
    other = import_trajectory(owner, build(turns=2))
    resp = client.get("/compare/", {"a": job.pk, "b": other.pk})
    html = resp.content.decode()
    assert resp.status_code == 200 and "kernels/softmax.cpp" in html and "d-add" in html
    resp = client.get("/compare/", {"a": job.pk, "ta": 1, "b": job.pk, "tb": 4})
    assert "after turn 1" in resp.content.decode() and "after turn 4" in resp.content.decode()


def test_compare_refuses_jobs_you_cannot_see(client, job):
    stranger = User.objects.create_user("stranger", password="x-pass-123456")
    theirs = import_trajectory(stranger, build(turns=1))
    assert client.get("/compare/", {"a": job.pk, "b": theirs.pk}).status_code == 404


def test_api_tokens_page_shows_a_key_once(client, owner):
    resp = client.post("/account/tokens/", {"name": "script"})
    key = resp.context["new_key"]
    assert len(key) == 40
    assert key not in client.get("/account/tokens/").content.decode()
    assert Client(HTTP_AUTHORIZATION=f"Token {key}").get("/api/jobs").status_code == 200


def test_a_turn_stored_again_is_rendered_again(client, owner):
    job = services.create_job(owner, "t", TASK, {}, enqueue=False)
    events = build(turns=1)["events"]
    turn1 = [e for e in events if e["turn"] == 1]
    services.store_turn(job, 1, turn1)
    assert "fuse the row max" in client.get(f"/jobs/{job.pk}/").content.decode()
    changed = [dict(e, content="a different plan") if e["type"] == "model_message" else e for e in turn1]
    services.store_turn(job, 1, changed)
    html = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "a different plan" in html and "fuse the row max" not in html


def test_long_jobs_fold_older_turns_and_serve_them_on_demand(client, owner):
    from webapp.jobs.views.pages import FULL_TURNS

    job = import_trajectory(owner, build(turns=FULL_TURNS + 5))
    html = client.get(f"/jobs/{job.pk}/").content.decode()
    folded = [
        i
        for i in range(FULL_TURNS + 6)
        if f'id="turn-{i}" data-index="{i}"' in html
        and 'data-stub="1"' in html.split(f'id="turn-{i}"')[1].split(">")[0]
    ]
    assert folded == list(range(0, 6))  # setup + the 5 oldest turns: header only
    assert html.count("<article") == FULL_TURNS + 6
    assert "fuse the row max" in html.split(f'id="turn-{FULL_TURNS + 5}"')[1]
    one = client.get(f"/jobs/{job.pk}/turns/3/html").content.decode()
    assert 'id="turn-3"' in one and "data-stub" not in one and "&lt;script&gt;" in one
    assert client.get(f"/jobs/{job.pk}/turns/999/html").status_code == 404


@pytest.mark.slow  # 10-20 s on 2 cores: the slow tier (./kw test -m slow)
def test_bundled_gallery_holds_the_five_h200_case_studies():
    """The fixtures are the policy's own runs on the H200 (python -m benchmarks.case_studies),
    every turn kept, with the device, date and torch version in their meta block."""
    from benchmarks.case_studies import CASES
    from webapp.jobs.management.commands.load_gallery import DEFAULT_DIR

    metas = {p.stem: json.loads(p.read_text())["meta"] for p in DEFAULT_DIR.glob("*.json")}
    ours = {name: meta for name, meta in metas.items() if "kernelbench" not in meta}
    assert sorted(ours) == sorted(CASES)  # the rest are KernelBench problems (test_gallery_kernelbench.py)
    assert all(name.startswith("kb") for name in set(metas) - set(ours))
    for meta in metas.values():
        assert "H200" in meta["device"] and meta["backend"] == "cuda" and meta["torch"] and meta["date"]
    call_command("load_gallery")
    jobs = Job.objects.filter(gallery=True, name__in=CASES)
    assert jobs.count() == 5 and all(j.turns.count() >= 6 for j in jobs)
    page = Client().get("/gallery/").content.decode()
    for j in jobs:
        assert j.name in page
        assert Client().get(f"/jobs/{j.pk}/").status_code == 200


def test_a_turn_shows_the_host_time_and_why_the_floor_is_the_memory_floor(client, owner):
    """The diag case study (H200): its candidate beats the task's FLOP floor (an algebraic
    rewrite) and is host-bound; both are said where its evaluation is shown."""
    fixture = (
        Path(__file__).resolve().parents[2] / "webapp" / "jobs" / "fixtures" / "gallery" / "diag_scale_matmul.json"
    )
    job = import_trajectory(owner, json.loads(fixture.read_text()))
    html = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "computes fewer FLOPs than the reference, so it is measured against the memory floor" in html
    assert (
        "host-bound: called back to back it takes" in html
        and "so the forward&#x27;s Python, allocations and launches" in html
    )
    assert '<th title="host time of the call itself' in html


def test_a_turn_shows_device_time_and_the_back_to_back_floor(client, owner):
    """An evaluation under the head-start timer (cuda) carries the device median and the
    back-to-back time per call; the turn's timing table shows both next to the host time."""
    fixture = (
        Path(__file__).resolve().parents[2] / "webapp" / "jobs" / "fixtures" / "gallery" / "diag_scale_matmul.json"
    )
    data = json.loads(fixture.read_text())
    marked = 0
    for e in data["events"]:
        cand = ((e.get("result") or {}).get("timing") or {}).get("candidate") if e["type"] == "evaluation" else None
        if cand:
            cand.update(device_median_ms=0.01234, loop_ms=0.03789, host_limited_calls=3)
            marked += 1
    assert marked
    job = import_trajectory(owner, data)
    html = client.get(f"/jobs/{job.pk}/").content.decode()
    assert ">back to back</th>" in html and ">device</th>" in html
    assert "0.01234" in html and "0.03789" in html


def test_a_turn_says_when_its_kernels_ran_from_a_cuda_graph(client, owner):
    """linear_gelu_residual's case study (H200) tried its forward as one CUDA graph; that turn's
    kernel list says the kernels were launched from a graph replay, the other turns do not."""
    fixture = (
        Path(__file__).resolve().parents[2] / "webapp" / "jobs" / "fixtures" / "gallery" / "linear_gelu_residual.json"
    )
    job = import_trajectory(owner, json.loads(fixture.read_text()))
    html = client.get(f"/jobs/{job.pk}/").content.decode()
    assert html.count("launched from 1 CUDA graph replay per forward") == 1
    assert "[CUDA graph]" in html


def test_the_last_turn_shows_the_confirmations_and_which_evaluation_is_the_result(client, owner):
    """After the last turn the loop evaluates the best twice more and repeats the median one as
    the result (agent.loop._Run.confirm); the job's best is that one, and the page says so."""
    fixture = (
        Path(__file__).resolve().parents[2] / "webapp" / "jobs" / "fixtures" / "gallery" / "diag_scale_matmul.json"
    )
    data = json.loads(fixture.read_text())
    best = [e for e in data["events"] if e["type"] == "best_changed"][-1]
    first = next(e for e in data["events"] if e["type"] == "evaluation" and e["version"] == best["version"])
    last_turn = max(e["turn"] for e in data["events"])
    draws = []
    for scale in (
        1.02,
        1.10,
    ):  # the candidate medians are then 1.00, 1.02, 1.10 x: the first confirmation is the median
        again = json.loads(json.dumps(first["result"]))
        again["timing"]["candidate"]["median_ms"] *= scale
        again["speedup_vs_eager"] = again["timing"]["eager"]["median_ms"] / again["timing"]["candidate"]["median_ms"]
        draws.append(again)
    ms = [first["result"]["timing"]["candidate"]["median_ms"], *(d["timing"]["candidate"]["median_ms"] for d in draws)]
    chosen = draws[0]
    finished = next(e for e in data["events"] if e["type"] == "finished")
    data["events"].remove(finished)
    data["events"] += [
        {
            "type": "evaluation",
            "turn": last_turn,
            "ts": 0,
            "version": best["version"],
            "result": d,
            "purpose": "confirmation",
            "draws_ms": [],
        }
        for d in draws
    ]
    data["events"] += [
        {
            "type": "evaluation",
            "turn": last_turn,
            "ts": 0,
            "version": best["version"],
            "result": chosen,
            "purpose": "final",
            "draws_ms": ms,
        },
        {**best, "turn": last_turn, "speedup_vs_eager": chosen["speedup_vs_eager"]},
        finished,
    ]
    job = import_trajectory(owner, data)
    html = client.get(f"/jobs/{job.pk}/").content.decode()
    assert html.count("confirmation: evaluation v") == 2
    assert "result: evaluation v" in html and "the median of 3 evaluations of the best candidate" in html
    job.refresh_from_db()
    assert job.best_evaluation["timing"]["candidate"]["median_ms"] == chosen["timing"]["candidate"]["median_ms"]
    assert job.best_speedup_eager == pytest.approx(chosen["speedup_vs_eager"])
