"""The compare page: picking two jobs (own, public, by share link) and two turns; code diffs side
by side, numbers and profiles next to each other; permissions as on every other page."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlparse

import pytest
from django.contrib.auth.models import User
from django.test import Client

from webapp.jobs import services
from webapp.jobs.importer import import_trajectory
from webapp.jobs.sample_trajectory import build
from webapp.jobs.views.compare import token_from_link

pytestmark = pytest.mark.django_db


@pytest.fixture
def owner():
    return User.objects.create_user("cmp-owner", password="pw-cmp-123")


@pytest.fixture
def stranger():
    return User.objects.create_user("cmp-stranger", password="pw-cmp-456")


@pytest.fixture
def client(owner) -> Client:
    c = Client()
    c.force_login(owner)
    return c


def options_of(html: str, name: str) -> dict[str, str]:
    select = html.split(f'<select name="{name}"')[1].split("</select>")[0]
    return dict(re.findall(r'<option value="(\d*)"[^>]*>([^<]*)</option>', select))


def test_token_from_link():
    assert token_from_link("https://kw.example/s/AbC_def-123456789/") == "AbC_def-123456789"
    assert token_from_link("http://x/jobs/4/?share=Tok3n_Tok3n#turn-2") == "Tok3n_Tok3n"
    assert token_from_link("  Tok3n_Tok3n  ") == "Tok3n_Tok3n"
    assert token_from_link("") is None and token_from_link("<script>") is None and token_from_link("short") is None


def test_the_pickers_offer_own_and_public_jobs_not_other_peoples_private_ones(client, owner, stranger):
    mine = import_trajectory(owner, build(turns=3, name="mine"))
    public = import_trajectory(stranger, build(turns=1, name="theirs public"))
    services.set_visibility(public, "public")
    private = import_trajectory(stranger, build(turns=1, name="theirs private"))
    html = client.get("/compare/", {"a": mine.pk}).content.decode()
    offered = options_of(html, "a")
    assert str(mine.pk) in offered and str(public.pk) in offered and str(private.pk) not in offered
    assert "Your jobs" in html and "Public and gallery" in html
    turns = options_of(html, "ta")
    assert list(turns) == ["", "1", "2", "3"]  # best, then the job's turns (not the setup)
    assert "reward -1" in turns["2"] and "new best" in turns["1"]
    anon = Client().get("/compare/").content.decode()
    assert str(public.pk) in options_of(anon, "a") and str(mine.pk) not in options_of(anon, "a")


def test_two_turns_side_by_side(client, owner):
    job = import_trajectory(owner, build(turns=5))
    resp = client.get("/compare/", {"a": job.pk, "ta": 1, "b": job.pk, "tb": 5})
    html = resp.content.decode()
    assert resp.status_code == 200 and "after turn 1" in html and "after turn 5" in html
    # the code: one modified file, in both layouts, highlighted; side by side is this page's default
    diffs = html.split('id="compare-diffs"')[1]
    assert (
        "fd-modified" in diffs
        and '<table class="diff split hl">' in diffs
        and '<table class="diff unified hl">' in diffs
    )
    assert '<td class="src s-del">' in diffs and "/* version 1 */" in diffs and "/* version 5 */" in diffs
    assert 'data-default="split"' in html
    # the numbers of each turn, from its own stored evaluation
    t1, t5 = (job.turns.get(index=i).evaluation for i in (1, 5))
    table = html.split('id="compare-table"')[1].split("</table>")[0]
    assert f"{t1['speedup_vs_eager']:.3f}x" in table and f"{t5['speedup_vs_eager']:.3f}x" in table
    ratio = t1["timing"]["candidate"]["median_ms"] / t5["timing"]["candidate"]["median_ms"]
    assert f"{ratio:.3f}x the speed of A" in table  # same device ("synthetic")
    # profiles next to each other, each side its own
    profiles = html.split('id="compare-profiles"')[1].split("<h2>")[0]
    a_side, b_side = profiles.split("<h3")[1:3]
    assert f"{t1['profile'][0]['total_ms']:.4g} ms" in a_side and f"{t5['profile'][0]['total_ms']:.4g} ms" in b_side


def test_each_turn_links_to_its_comparison_with_the_previous_one(client, owner):
    job = import_trajectory(owner, build(turns=3))
    html = client.get(f"/jobs/{job.pk}/").content.decode()
    link = f'href="/compare/?a={job.pk}&amp;ta=2&amp;b={job.pk}&amp;tb=3"'
    assert link in html.split('id="turn-3"')[1].split("</article>")[0]
    assert "compare with turn 0" not in html and "compare with turn 1" in html
    page = client.get("/compare/", {"a": job.pk, "ta": 2, "b": job.pk, "tb": 3}).content.decode()
    assert "after turn 2" in page and "after turn 3" in page


def test_numbers_from_different_devices_are_not_set_against_each_other(client, owner):
    a = import_trajectory(owner, build(turns=1))
    data = build(turns=1)
    for e in data["events"]:
        if e["type"] == "evaluation":
            e["result"]["device"] = "another device"
    b = import_trajectory(owner, data)
    html = client.get("/compare/", {"a": a.pk, "ta": 1, "b": b.pk, "tb": 1}).content.decode()
    assert "measured on different devices" in html and "the speed of A" not in html


def test_best_candidates_and_a_missing_turn(client, owner):
    a = import_trajectory(owner, build(turns=4))
    b = import_trajectory(owner, build(turns=2))
    html = client.get("/compare/", {"a": a.pk, "b": b.pk, "tb": 99}).content.decode()
    assert f"best candidate (version {a.best_version})" in html
    assert f"job {b.pk} has no turn 99; showing its best candidate" in html
    assert "model_new.py" in html and "(identical)" in html  # model_new.py is the same on both sides


def test_share_links_open_a_side_and_stop_when_revoked(client, owner, stranger):
    theirs = import_trajectory(stranger, build(turns=2, name="shared with me"))
    token = services.create_share_link(theirs)
    mine = import_trajectory(owner, build(turns=2))
    # without the token the stranger's job stays hidden
    assert client.get("/compare/", {"a": mine.pk, "b": theirs.pk}).status_code == 404
    assert client.get("/compare/", {"a": mine.pk, "b": theirs.pk, "b_share": "wrong-token-123"}).status_code == 404
    # a pasted link becomes a clean deep link with the job id and its token
    resp = client.get("/compare/", {"a": mine.pk, "b_link": f"http://testserver/s/{token}/", "tb": 7})
    assert resp.status_code == 302
    target = urlparse(resp["Location"])
    assert target.path == "/compare/" and parse_qs(target.query) == {
        "a": [str(mine.pk)],
        "b": [str(theirs.pk)],
        "b_share": [token],
    }
    html = client.get(resp["Location"]).content.decode()
    assert "shared with me" in html and "Opened by share link" in html
    assert f'name="b_share" value="{token}"' in html and f"/jobs/{theirs.pk}/?share={token}" in html
    # logged out, with a public job on the other side
    services.set_visibility(mine, "public")
    anon = Client().get("/compare/", {"a": mine.pk, "b": theirs.pk, "b_share": token})
    assert anon.status_code == 200 and "shared with me" in anon.content.decode()
    services.revoke_share_link(theirs)
    assert Client().get("/compare/", {"a": mine.pk, "b": theirs.pk, "b_share": token}).status_code == 404
    assert client.get("/compare/", {"a": mine.pk, "b_link": token}).status_code == 404


def test_code_and_names_on_the_compare_page_stay_text(client, owner):
    evil = "<script>alert('cmp')</script>"
    data = build(turns=1, name=f"name {evil}")
    for e in data["events"]:
        if e["type"] == "file_edit":
            e["content"] = f"// {evil}\n" + e["content"]
    a = import_trajectory(owner, data)
    b = import_trajectory(owner, build(turns=1))
    html = client.get("/compare/", {"a": a.pk, "ta": 1, "b": b.pk, "tb": 1}).content.decode()
    assert "<script>alert" not in html
    assert "// &lt;script&gt;alert(&#x27;cmp&#x27;)&lt;/script&gt;" in html and "name &lt;script&gt;" in html
