"""The HTML pages: job list, new job, the live job page (which is also the trajectory viewer),
compare, gallery, import, and the small POST actions on a job.

All model output, code and logs reach the browser through Django's autoescaping; the live page
fetches server-rendered (escaped) turn fragments, so there is one renderer for live and
finished jobs alike.
"""

from __future__ import annotations

import functools
import json

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.cache import cache
from django.db.models import Count
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from webapp.jobs import charts, live, services
from webapp.jobs.importer import MAX_IMPORT_BYTES, ImportRefused, import_trajectory
from webapp.jobs.live import failure_reason, head_key, live_state, totals, turn_summaries, turns_after
from webapp.jobs.models import Job
from webapp.jobs.module_wrapper import (
    MAX_EXPORTED_BYTES,
    SpecError,
    exported_task_source,
    find_module_classes,
    looks_exported,
    read_exported,
    task_from_module,
)
from webapp.jobs.permissions import can_change, visible_jobs
from webapp.jobs.task_check import MAX_SOURCE_BYTES, TOO_DEEP, check_task_source
from webapp.jobs.turn_html import turn_html, turns_html
from webapp.jobs.views.access import LoginNeeded, changeable_job, login_redirect, share_token, viewable_job

OPTION_CHOICES = {
    "backend": services.BACKENDS,
    "policy": services.POLICIES,
    "preset": services.PRESETS,
    "torch_ops": services.TORCH_OPS,
    "precision": services.PRECISIONS,
}


def job_view(change: bool = False):
    """Resolve `job_id` to a job the visitor may see (or change), else 404 / log in."""

    def wrap(view):
        @functools.wraps(view)
        def inner(request, job_id: int, *args, **kwargs):
            try:
                job = changeable_job(request, job_id) if change else viewable_job(request, job_id)
            except LoginNeeded:
                return login_redirect(request)
            except Http404:
                token = share_token(request)
                if token and not Job.objects.filter(share_token=token).exists():
                    return share_revoked(request)  # an old shared page: say why, not a bare 404
                raise
            return view(request, job, *args, **kwargs)

        return inner

    return wrap


def share_qs(request) -> str:
    token = share_token(request)
    return f"?share={token}" if token else ""


# -- lists ---------------------------------------------------------------------------------
def home(request):
    if not request.user.is_authenticated:
        gallery = Job.objects.filter(gallery=True).order_by("-created_at")[:6]
        return render(request, "jobs/landing.html", {"gallery": gallery})
    jobs = visible_jobs(request.user).annotate(n_turns=Count("turns")).select_related("owner")[:200]
    return render(request, "jobs/job_list.html", {"jobs": jobs})


def gallery(request):
    jobs = Job.objects.filter(gallery=True).annotate(n_turns=Count("turns")).order_by("name")
    return render(request, "jobs/gallery.html", {"jobs": jobs})


# -- new job ---------------------------------------------------------------------------------
def is_exported_upload(upload) -> bool:
    """A .pt2 file (torch.export.save): by its name, or by its first bytes (a zip archive)."""
    if upload.name.lower().endswith(".pt2"):
        return True
    head = upload.read(4)
    upload.seek(0)
    return looks_exported(head)


def exported_upload_task(upload) -> tuple[str, list[str]]:
    """(task source, errors) for an uploaded .pt2: read and checked here (a zip and its JSON),
    loaded only inside the sandbox (agent.exported_task)."""
    if upload.size > MAX_EXPORTED_BYTES:
        return "", [f"The .pt2 file is {upload.size} bytes; the limit is {MAX_EXPORTED_BYTES} bytes."]
    try:
        return exported_task_source(upload.read(), upload.name.rsplit(".", 1)[0]), []
    except SpecError as exc:
        return "", [str(exc)[:1].upper() + str(exc)[1:] + "."]


@login_required
@require_http_methods(["GET", "POST"])
def new_job(request):
    errors: list[str] = []
    values = {
        "name": "",
        "source": "",
        "backend": "auto",
        "policy": default_policy(),
        "max_turns": 10,
        "preset": "default",
        "torch_ops": "forbid",
        "precision": "task",
        "module_class": "",
        "init_args": "",
        "input_specs": "",
    }
    if request.method == "POST":
        values.update({k: request.POST.get(k, v) for k, v in values.items()})
        upload = request.FILES.get("file")
        exported = upload is not None and is_exported_upload(upload)
        task_source = ""
        if exported:
            task_source, errors = exported_upload_task(upload)
            values.update(source="", module_class="")  # the task comes from the file alone
        elif upload is not None:
            if upload.size > MAX_SOURCE_BYTES:
                errors.append(f"The file is {upload.size} bytes; the limit is {MAX_SOURCE_BYTES} bytes.")
            else:
                try:
                    values["source"] = upload.read().decode("utf-8")
                except UnicodeDecodeError:
                    errors.append("The file is neither UTF-8 text nor a .pt2 file.")
        if upload is not None and not values["name"]:
            values["name"] = (values["module_class"] or upload.name.rsplit(".", 1)[0])[:200]
        if not exported:
            task_source = values["source"]
        if not errors and values["module_class"]:
            # any module: the chosen nn.Module subclass becomes a KernelBench-format task
            try:
                task_source = task_from_module(
                    values["source"], values["module_class"], values["init_args"], values["input_specs"]
                )
            except SpecError as exc:
                errors.append(str(exc))
            if not values["name"]:
                values["name"] = values["module_class"][:200]
        if not errors:
            try:
                job = services.create_job(request.user, values["name"], task_source, values)
            except services.InvalidJob as exc:
                errors = exc.errors
            else:
                return redirect("jobs:detail", job_id=job.pk)
    return render(
        request,
        "jobs/new_job.html",
        {
            "errors": errors,
            "values": values,
            "choices": OPTION_CHOICES,
            "max_bytes": MAX_SOURCE_BYTES,
            "max_exported_bytes": MAX_EXPORTED_BYTES,
            "endpoint": endpoint_configured(),
        },
        status=400 if errors else 200,
    )


def endpoint_configured() -> bool:
    from django.conf import settings

    return bool(getattr(settings, "OPENAI_BASE_URL", ""))


def default_policy() -> str:
    return "openai" if endpoint_configured() else "builtin"


@require_POST
def check_source(request):
    """The server half of the live check: parse with `ast` (never import); a .pt2 upload is
    read as a zip and its JSON graph (never loaded)."""
    upload = request.FILES.get("file")
    if upload is not None and is_exported_upload(upload):
        return JsonResponse(check_exported(upload))
    source = request.POST.get("source", "")
    result = check_task_source(source)
    try:
        classes = [c.to_dict() for c in find_module_classes(source)] if len(source) <= MAX_SOURCE_BYTES else []
    except (SyntaxError, ValueError):
        classes = []
    body = {"ok": result.ok, "errors": result.errors, "name": result.name, "classes": classes, "kernelbench": result.ok}
    module_class = request.POST.get("module_class", "")
    if module_class:  # the file as a module: does the chosen class with these arguments and inputs make a task?
        try:
            wrapped = task_from_module(
                source, module_class, request.POST.get("init_args", ""), request.POST.get("input_specs", "")
            )
        except SpecError as exc:
            body.update(ok=False, errors=[str(exc)])
        else:
            check = check_task_source(wrapped)
            body.update(ok=check.ok, errors=check.errors)
    return JsonResponse(body)


def check_exported(upload) -> dict:
    """The live check's answer for a .pt2: its recorded inputs, or what is wrong with it."""
    body = {
        "ok": False,
        "errors": [],
        "name": upload.name.rsplit(".", 1)[0],
        "classes": [],
        "kernelbench": False,
        "exported": None,
    }
    if upload.size > MAX_EXPORTED_BYTES:
        body["errors"] = [f"The .pt2 file is {upload.size} bytes; the limit is {MAX_EXPORTED_BYTES} bytes."]
        return body
    try:
        info = read_exported(upload.read())
    except SpecError as exc:
        body["errors"] = [str(exc)]
        return body
    body.update(ok=True, exported={"bytes": upload.size, "inputs": info.inputs, "torch_version": info.torch_version})
    return body


# -- the job page (live + trajectory viewer) -------------------------------------------------
def fmt_elapsed(job: Job) -> str:
    if not job.started_at:
        return ""
    from django.utils import timezone

    s = max(0, round(((job.finished_at or timezone.now()) - job.started_at).total_seconds()))
    h, m, sec = s // 3600, s % 3600 // 60, s % 60
    return (f"{h}h " if h else "") + (f"{m}m " if h or m else "") + f"{sec}s"


def _head_context(request, job: Job) -> dict:
    """What jobs/_job_head.html needs: the job page renders it, and /jobs/<id>/head/ again."""
    return {
        "job": job,
        "head_key": head_key(job),
        "terminal": job.state in Job.TERMINAL,
        "elapsed": fmt_elapsed(job),
        "reason": failure_reason(job),
        "n_turns": job.turns.count(),
        "totals": totals(job),
        "share": share_token(request),
        "share_qs": share_qs(request),
        "can_change": can_change(request.user, job),
        "share_url": request.build_absolute_uri(reverse("jobs:share", args=[job.share_token]))
        if job.share_token
        else "",
        "artifacts": list(job.artifacts.all()),
    }


FULL_TURNS = 10  # the newest turns rendered in full; older ones load when scrolled to or linked


@job_view()
def job_detail(request, job: Job):
    summaries = turn_summaries(job)
    older = summaries[:-FULL_TURNS]
    turns = turns_after(job, since=older[-1].index) if older else turns_after(job)
    stubs = render_to_string("jobs/_turn_stubs.html", {"turns": older}) if older else ""
    qs = share_qs(request)
    ws_path = f"/ws/jobs/{job.pk}/" + qs
    config = {
        "job_id": job.pk,
        "ws_path": ws_path,
        "updates_url": reverse("jobs:updates", args=[job.pk]),
        "head_url": reverse("jobs:head", args=[job.pk]),
        "share": share_token(request),
        "last_index": turns[-1].index if turns else -1,
        "live": live_state(job),
        "charts": charts.job_charts(job, summaries),
    }
    context = {
        **_head_context(request, job),
        "turns": summaries,
        "stubs_html": stubs,
        "turns_html": turns_html(turns),
        "config": config,
    }
    return render(request, "jobs/job_detail.html", context)


@job_view()
def job_updates(request, job: Job):
    """What a live page missed since turn `since` (webapp.jobs.live.update): asked on every
    (re)connect, on a state change, and when a pushed turn does not follow the page's last one.
    Viewers asking the same question at the same moment get one computation: the answer is
    cached per (job, since, job.updated_at), and every change viewers can see moves updated_at."""
    try:
        since = int(request.GET.get("since", -1))
    except ValueError:
        since = -1
    key = f"kw:updates:{job.pk}:{since}:{job.updated_at.timestamp():.6f}"
    body = cache.get(key)
    if body is None:
        body = live.update(job, since)
        cache.set(key, body, 30)
    return JsonResponse(body)


@job_view()
def job_head_html(request, job: Job):
    """The header, actions and best card again (per viewer: the actions depend on who asks, so
    this is not cached); the live page asks when the job's state or best changed."""
    return HttpResponse(render_to_string("jobs/_job_head.html", _head_context(request, job), request=request))


@job_view()
def turn_detail_html(request, job: Job, index: int):
    """One turn's full HTML (for a turn shown folded on the job page)."""
    turn = job.turns.filter(index=index).first()
    if turn is None:
        raise Http404("no such turn")
    return HttpResponse(turn_html(turn))


# -- actions ---------------------------------------------------------------------------------
@require_POST
@job_view(change=True)
def cancel(request, job: Job):
    services.cancel_job(job)
    return redirect("jobs:detail", job_id=job.pk)


@require_POST
@job_view(change=True)
def retry(request, job: Job):
    try:
        new = services.retry_job(job, owner=request.user)
    except services.InvalidJob as exc:
        messages.error(request, "; ".join(exc.errors))
        return redirect("jobs:detail", job_id=job.pk)
    return redirect("jobs:detail", job_id=new.pk)


@require_POST
@job_view(change=True)
def visibility(request, job: Job):
    try:
        services.set_visibility(job, request.POST.get("visibility", ""))
    except services.InvalidJob as exc:
        messages.error(request, "; ".join(exc.errors))
    return redirect("jobs:detail", job_id=job.pk)


@require_POST
@job_view(change=True)
def share_create(request, job: Job):
    services.create_share_link(job)
    return redirect("jobs:detail", job_id=job.pk)


@require_POST
@job_view(change=True)
def share_revoke(request, job: Job):
    services.revoke_share_link(job)
    return redirect("jobs:detail", job_id=job.pk)


def share_open(request, token: str):
    job = Job.objects.filter(share_token=token).first()
    if job is None:
        return share_revoked(request)
    return redirect(reverse("jobs:detail", args=[job.pk]) + f"?share={token}")


def share_revoked(request):
    """A share link that no longer opens anything (revoked, or never made): a page that says so,
    404 like any job the visitor may not see (a revoked token leaves no trace to tell it apart)."""
    return render(request, "jobs/share_revoked.html", status=404)


# -- import ----------------------------------------------------------------------------------
@login_required
@require_http_methods(["GET", "POST"])
def import_view(request):
    error = ""
    if request.method == "POST":
        upload = request.FILES.get("file")
        if upload is None:
            error = "Choose a trajectory JSON file."
        elif upload.size > MAX_IMPORT_BYTES:
            error = f"The file is {upload.size} bytes; the limit is {MAX_IMPORT_BYTES} bytes."
        else:
            try:
                data = json.loads(upload.read().decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                error = f"The file is not JSON: {exc}"
            except TOO_DEEP:
                error = "The file is nested too deeply to read."
            else:
                try:
                    job = import_trajectory(request.user, data, name=request.POST.get("name", ""))
                except ImportRefused as exc:
                    error = str(exc)
                else:
                    return redirect("jobs:detail", job_id=job.pk)
    return render(request, "jobs/import.html", {"error": error}, status=400 if error else 200)


def plotly_js(request):
    """Fallback for deployments whose static setup does not serve plotly (settings name the path)."""
    from plotly.offline import get_plotlyjs

    resp = HttpResponse(get_plotlyjs(), content_type="application/javascript")
    resp["Cache-Control"] = "public, max-age=86400"
    return resp
