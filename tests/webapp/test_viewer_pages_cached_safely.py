"""Job pages, update answers and turn fragments for people without an account are answered from
the shared cache before Django (webapp.core.viewers; issue 20: fifty viewers of one job), and
never wrongly: a new turn, a job made private, a revoked share link take effect on the very next
request; signed-in viewers always get their own page. A real web server on the test database."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from django.contrib.auth.models import User

from tests.support.stack import start_asgi_server
from webapp.jobs import services
from webapp.jobs.models import Job
from webapp.jobs.sample_trajectory import SOFTMAX_TASK, build
from webapp.jobs.turns import group_by_turn

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
TURNS = group_by_turn(build(turns=4)["events"])


@pytest.fixture(scope="module")
def server(live_stack_env, tmp_path_factory):
    server = start_asgi_server(live_stack_env, tmp_path_factory.mktemp("viewers"))
    yield server
    server.process.stop()


@pytest.fixture
def job():
    owner = User.objects.create_user("owner", password="pw-owner-123")
    job = services.start_job(services.create_job(owner, "watched", SOFTMAX_TASK, {"backend": "cpu"}, enqueue=False))
    Job.objects.filter(pk=job.pk).update(visibility=Job.Visibility.PUBLIC)
    for index in range(3):
        services.store_turn(job, index, TURNS[index])
    return Job.objects.get(pk=job.pk)


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None  # a redirect to the login page is the answer itself


OPENER = urllib.request.build_opener(NoRedirect)


def get(server, path: str, cookie: str = "") -> tuple[int, dict, bytes]:
    req = urllib.request.Request(server.url + path, headers={"Cookie": cookie} if cookie else {})
    try:
        with OPENER.open(req, timeout=30) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def test_the_crowd_is_answered_from_the_cache_and_a_new_turn_shows_at_once(server, job) -> None:
    page = f"/jobs/{job.pk}/"
    first, second = get(server, page), get(server, page)
    assert first[0] == second[0] == 200 and second[2] == first[2]
    assert "X-Kernelwright-Cache" not in first[1] and second[1]["X-Kernelwright-Cache"] == "viewer"
    assert second[1]["X-Frame-Options"] == first[1]["X-Frame-Options"]  # the middlewares' headers kept

    updates = f"/jobs/{job.pk}/updates/?since=1"
    get(server, updates)
    assert get(server, updates)[1]["X-Kernelwright-Cache"] == "viewer"
    services.store_turn(job, 3, TURNS[3])
    status, headers, body = get(server, updates)
    assert "X-Kernelwright-Cache" not in headers and json.loads(body)["last_index"] == 3
    assert b'id="turn-3"' in get(server, page)[2]


def test_a_job_made_private_or_a_revoked_link_is_never_served_from_the_cache(server, job) -> None:
    page = f"/jobs/{job.pk}/"
    get(server, page)
    assert get(server, page)[1].get("X-Kernelwright-Cache") == "viewer"
    services.set_visibility(job, Job.Visibility.PRIVATE)
    assert get(server, page)[0] in (302, 404)

    token = services.create_share_link(Job.objects.get(pk=job.pk))
    shared = f"{page}?share={token}"
    get(server, shared)
    assert get(server, shared)[1].get("X-Kernelwright-Cache") == "viewer"
    services.revoke_share_link(Job.objects.get(pk=job.pk))
    assert get(server, shared)[0] in (302, 404)


def test_signed_in_viewers_always_get_their_own_page(server, job, client) -> None:
    client.force_login(User.objects.get(username="owner"))
    cookie = f"sessionid={client.cookies['sessionid'].value}"
    get(server, f"/jobs/{job.pk}/", cookie)
    status, headers, body = get(server, f"/jobs/{job.pk}/", cookie)
    assert status == 200 and "X-Kernelwright-Cache" not in headers and b"csrfmiddlewaretoken" in body


def test_a_progress_step_keeps_the_crowds_page_but_not_its_live_state(server, job) -> None:
    """The running job's step moves several times a second; the page stays cached (its script asks
    /updates/ for the live state when its socket opens), the live state does not."""
    Job.objects.filter(pk=job.pk).update(state=Job.State.RUNNING)
    page, updates = f"/jobs/{job.pk}/", f"/jobs/{job.pk}/updates/?since=2"
    get(server, page), get(server, updates)
    assert get(server, page)[1].get("X-Kernelwright-Cache") == "viewer"
    services.set_step(job.pk, "checking correctness 2/5")
    assert get(server, page)[1].get("X-Kernelwright-Cache") == "viewer"
    status, headers, body = get(server, updates)
    assert "X-Kernelwright-Cache" not in headers and "checking correctness 2/5" in body.decode()
    services.store_turn(job, 3, TURNS[3])  # a new turn is on the next page at once
    assert b'id="turn-3"' in get(server, page)[2]
