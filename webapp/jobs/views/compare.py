"""The compare page: two jobs (or two turns of one job) side by side: the code as diffs, the
evaluations' numbers and the profiles next to each other.

A side is a job the visitor may view (their own, a public or gallery job, or one opened by its
share link: `a_share` / `b_share` carry the token, or `a_link` / `b_link` take a pasted link or
token and are turned into a job id and token by a redirect) and a turn (`ta` / `tb`; empty means
the job's best candidate). Timings of the two sides are only set against each other when they
solve the same task on the same device: a ratio across tasks or devices would say nothing about
the code.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qs, urlencode, urlparse

from django.db.models import Q
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse

from agent.loop import median_ms
from webapp.jobs.diffview import diff_html
from webapp.jobs.models import Job
from webapp.jobs.permissions import can_view, visible_jobs

SIDES = ("a", "b")
TOKEN = re.compile(r"^[A-Za-z0-9_-]{8,64}$")
MAX_CHOICES = 200


def token_from_link(raw: str) -> str | None:
    """A share link (`.../s/<token>/`, or a job page with `?share=<token>`) or a bare token."""
    raw = (raw or "").strip()
    if not raw:
        return None
    parsed = urlparse(raw)
    shared = parse_qs(parsed.query).get("share")
    if shared:
        raw = shared[0]
    else:
        m = re.search(r"/s/([^/?#]+)", parsed.path)
        if m:
            raw = m.group(1)
    return raw if TOKEN.match(raw) else None


def job_choices(user) -> dict[str, list[Job]]:
    """What the pickers offer: the visitor's own jobs and the public ones (share-link jobs are
    reached by pasting the link)."""
    fields = ("id", "name", "state", "best_reward", "created_at", "owner_id", "visibility", "gallery")
    own = list(visible_jobs(user).only(*fields)[:MAX_CHOICES]) if user.is_authenticated else []
    public = Job.objects.filter(Q(visibility=Job.Visibility.PUBLIC) | Q(gallery=True)).only(*fields)
    if user.is_authenticated:
        public = public.exclude(owner=user)
    return {"own": own, "public": list(public.order_by("name")[:MAX_CHOICES])}


def workspace_at(job: Job, turn_index: int | None) -> tuple[dict[str, str], str]:
    """The files of a job after `turn_index` (from its file edits), or its best candidate."""
    if turn_index is None:
        if job.best_version is None:
            return {}, "no verified candidate"
        files = {a.path: a.content for a in job.artifacts.all()}
        return files, f"best candidate (version {job.best_version})"
    files: dict[str, str] = {}
    for events in job.turns.filter(index__lte=turn_index).order_by("index").values_list("events", flat=True):
        for e in events:
            if e.get("type") == "file_edit" and e.get("path"):
                files[e["path"]] = e.get("content") or ""
    return files, f"after turn {turn_index}"


def _profile(job: Job, turn_index: int | None, evaluation: dict[str, Any]) -> tuple[list[dict], dict | None, list[str]]:
    """Profiler rows and roofline of the side: the evaluation's own, else the profile event of
    that version (a turn's own profile call, or the best version's); and, when there is none,
    which other versions of the job were profiled (so "no profile" never hides one)."""
    rows = evaluation.get("profile") or []
    roofline = evaluation.get("roofline")
    if rows:
        return rows, roofline, []
    version = None if turn_index is not None else job.best_version
    found: tuple[list[dict], dict | None] = ([], roofline)
    elsewhere: list[str] = []
    for index, events in job.turns.order_by("index").values_list("index", "events"):
        for e in events:
            if e.get("type") != "profile":
                continue
            if (
                (index == turn_index)
                if turn_index is not None
                else (version is not None and e.get("version") == version)
            ):
                found = (e.get("rows") or [], e.get("roofline") or roofline)
            else:
                elsewhere.append(f"version {e.get('version')} (turn {index})")
    return found[0], found[1], [] if found[0] else elsewhere


def _side(request, key: str) -> dict[str, Any] | None:
    raw = request.GET.get(key)
    if not raw:
        return None
    try:
        job_id = int(raw)
    except ValueError as exc:
        raise Http404("bad job id") from exc
    job = Job.objects.filter(pk=job_id).first()
    token = request.GET.get(f"{key}_share") or None
    if job is None or not can_view(request.user, job, token):
        raise Http404("no such job")
    turn = (request.GET.get(f"t{key}") or "").strip()
    turn_index = int(turn) if re.fullmatch(r"-?[0-9]{1,9}", turn) else None  # not "²" (isdigit), nor 5,000 digits
    turns = list(job.turns.order_by("index").values("index", "reward", "speedup_eager", "has_error", "improved"))
    note = ""
    if turn_index is not None and not any(t["index"] == turn_index for t in turns):
        note = f"job {job.pk} has no turn {turn_index}; showing its best candidate"
        turn_index = None
    files, label = workspace_at(job, turn_index)
    evaluation = job.best_evaluation
    if turn_index is not None:
        evaluation = job.turns.filter(index=turn_index).values_list("evaluation", flat=True).first()
    evaluation = evaluation or {}
    rows, roofline, profiled_elsewhere = _profile(job, turn_index, evaluation)
    share = f"?share={token}" if token else ""
    return {
        "job": job,
        "turn": turn_index,
        "turns": turns,
        "files": files,
        "label": label,
        "evaluation": evaluation,
        "profile": rows,
        "profiled_elsewhere": profiled_elsewhere,
        "roofline": roofline,
        "share": token or "",
        "note": note,
        "link": reverse("jobs:detail", args=[job.pk])
        + share
        + (f"#turn-{turn_index}" if turn_index is not None else ""),
    }


def _ratio(a: dict, b: dict) -> tuple[float | None, str]:
    """How many times faster B's candidate runs than A's (median over median), and when there is
    no such number, why: only the same task on the same device gives a ratio that says anything."""
    if a["job"].task_hash != b["job"].task_hash:
        return None, "the two sides solve different tasks"
    if a["evaluation"].get("device") != b["evaluation"].get("device"):
        return None, "measured on different devices"
    ta, tb = median_ms(a["evaluation"]), median_ms(b["evaluation"])
    if not ta or not tb:
        return None, "a side has no timing of a candidate"
    return ta / tb, ""


def _canonical(request) -> str | None:
    """Pasted share links become `<side>=<job id>&<side>_share=<token>` (a clean deep link)."""
    params = {k: v for k, v in request.GET.items() if v}
    changed = False
    for side in SIDES:
        raw = params.pop(f"{side}_link", None)
        if raw is None:
            continue
        changed = True
        token = token_from_link(raw)
        job = Job.objects.filter(share_token=token).first() if token else None
        if job is None:
            raise Http404("this share link was revoked or never existed")
        params[side] = str(job.pk)
        params[f"{side}_share"] = token
        params.pop(f"t{side}", None)  # the turn picked belonged to the job picked before
    return reverse("jobs:compare") + "?" + urlencode(params) if changed else None


def compare(request):
    target = _canonical(request)
    if target is not None:
        return redirect(target)
    a, b = _side(request, "a"), _side(request, "b")
    diffs = []
    ratio, why_not = None, ""
    if a and b:
        for path in sorted(set(a["files"]) | set(b["files"])):
            old, new = a["files"].get(path), b["files"].get(path)
            diffs.append({"path": path, "same": old == new, "html": diff_html(old, new, path)})
        ratio, why_not = _ratio(a, b)
    context = {
        "a": a,
        "b": b,
        "diffs": diffs,
        "ratio": ratio,
        "why_not": why_not,
        "same_task": bool(a and b and a["job"].task_hash == b["job"].task_hash),
        "choices": job_choices(request.user),
        "sides": [("a", "A", a), ("b", "B", b)],
    }
    return render(request, "jobs/compare.html", context)
