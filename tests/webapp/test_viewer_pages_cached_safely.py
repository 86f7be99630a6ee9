"""Job pages for people without an account are answered from the shared cache (issue 20: fifty
viewers of one job), and never wrongly: a job made private, a revoked share link or a new turn
take effect on the very next request. Real Redis cache, real views."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from webapp.jobs import services
from webapp.jobs.models import Job
from webapp.jobs.sample_trajectory import SOFTMAX_TASK, build
from webapp.jobs.turns import group_by_turn

pytestmark = pytest.mark.django_db


@pytest.fixture
def job():
    owner = User.objects.create_user("owner", password="pw-owner-123")
    job = services.start_job(services.create_job(owner, "watched", SOFTMAX_TASK, {"backend": "cpu"}, enqueue=False))
    Job.objects.filter(pk=job.pk).update(visibility=Job.Visibility.PUBLIC)
    for index, events in list(group_by_turn(build(turns=3)["events"]).items())[:3]:
        services.store_turn(job, index, events)
    return job


def test_the_second_anonymous_view_comes_from_the_cache(client, job) -> None:
    first = client.get(f"/jobs/{job.pk}/")
    second = client.get(f"/jobs/{job.pk}/")
    assert first.status_code == second.status_code == 200
    assert "X-Kernelwright-Cache" not in first and second["X-Kernelwright-Cache"] == "page"
    assert second.content == first.content


def test_a_new_turn_or_a_private_job_takes_effect_at_once(client, job) -> None:
    client.get(f"/jobs/{job.pk}/")
    services.store_turn(job, 3, group_by_turn(build(turns=3)["events"])[3])
    fresh = client.get(f"/jobs/{job.pk}/")
    assert "X-Kernelwright-Cache" not in fresh and b'id="turn-3"' in fresh.content
    services.set_visibility(Job.objects.get(pk=job.pk), Job.Visibility.PRIVATE)
    assert client.get(f"/jobs/{job.pk}/").status_code in (302, 404)


def test_a_revoked_share_link_is_not_served_from_the_cache(client, job) -> None:
    Job.objects.filter(pk=job.pk).update(visibility=Job.Visibility.PRIVATE)
    token = services.create_share_link(Job.objects.get(pk=job.pk))
    assert client.get(f"/jobs/{job.pk}/?share={token}").status_code == 200
    assert client.get(f"/jobs/{job.pk}/?share={token}")["X-Kernelwright-Cache"] == "page"
    services.revoke_share_link(Job.objects.get(pk=job.pk))
    assert client.get(f"/jobs/{job.pk}/?share={token}").status_code in (302, 404)


def test_signed_in_viewers_always_get_their_own_page(client, job) -> None:
    client.force_login(User.objects.get(username="owner"))
    client.get(f"/jobs/{job.pk}/")
    page = client.get(f"/jobs/{job.pk}/")
    assert "X-Kernelwright-Cache" not in page and b"csrfmiddlewaretoken" in page.content


def test_update_answers_are_shared_and_never_stale(client, job) -> None:
    url = f"/jobs/{job.pk}/updates/?since=1"
    client.get(url)
    assert client.get(url)["X-Kernelwright-Cache"] == "page"
    services.store_turn(job, 3, group_by_turn(build(turns=3)["events"])[3])
    fresh = client.get(url)
    assert "X-Kernelwright-Cache" not in fresh and fresh.json()["last_index"] == 3
