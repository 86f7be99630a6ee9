"""The JSON API (plain Django views; schema in webapp.jobs.openapi).

Authentication: `Authorization: Token <key>` for everything; a browser session also works for
reads. Writes need a token (the API is CSRF-exempt, so a session must not be enough to write).
Reads accept `?share=<token>` like the pages. Permissions are the pages' (webapp.jobs.permissions).
"""

from __future__ import annotations

import functools
import json
from typing import Any

from django.conf import settings
from django.http import JsonResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt

from webapp.jobs import services
from webapp.jobs.models import ApiToken, Job, Turn
from webapp.jobs.module_wrapper import SpecError, task_from_module
from webapp.jobs.openapi import openapi_schema
from webapp.jobs.permissions import can_change, can_view, visible_jobs
from webapp.jobs.task_check import MAX_SOURCE_BYTES, check_task_source
from webapp.jobs.views import files as file_views
from webapp.jobs.views.access import share_token

SAFE = ("GET", "HEAD", "OPTIONS")
MAX_FILES_BYTES = 1024 * 1024
TURN_PAGE = 200


def error(status: int, message: str, **extra: Any) -> JsonResponse:
    return JsonResponse({"error": message, **extra}, status=status)


def token_user(request):
    """The user of a valid token; None when no token header; False for a bad token."""
    header = request.headers.get("Authorization", "")
    if not header:
        return None
    scheme, _, key = header.partition(" ")
    if scheme.lower() != "token" or not key.strip():
        return False
    token = ApiToken.objects.select_related("user").filter(key_hash=ApiToken.hash_key(key.strip())).first()
    if token is None or not token.user.is_active:
        return False
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=timezone.now())
    return token.user


def api_view(methods: tuple[str, ...], auth_required: bool = True):
    def wrap(view):
        @csrf_exempt
        @functools.wraps(view)
        def inner(request, *args, **kwargs):
            if request.method not in methods:
                return error(405, f"method {request.method} not allowed", allowed=list(methods))
            user = token_user(request)
            if user is False:
                return error(401, "invalid token")
            if user is None:
                user = request.user if request.method in SAFE else None
            request.api_user = user
            if auth_required and (user is None or not user.is_authenticated):
                return error(401, "authentication required: send `Authorization: Token <key>`")
            return view(request, *args, **kwargs)

        return inner

    return wrap


def _job_for(request, job_id: int, change: bool = False) -> Job | JsonResponse:
    """The job if this caller may read (or change) it. Reads need no account for public jobs and
    share links, like the pages; otherwise an anonymous caller gets 401, a signed-in one 404."""
    job = Job.objects.filter(pk=job_id).first()
    user = request.api_user
    allowed = job is not None and (can_change(user, job) if change else can_view(user, job, share_token(request)))
    if allowed:
        return job
    if user is None or not user.is_authenticated:
        return error(401, "authentication required: send `Authorization: Token <key>`")
    return error(404, "no such job")


def job_json(job: Job) -> dict[str, Any]:
    return {
        "id": job.pk,
        "name": job.name,
        "state": job.state,
        "reason": job.reason,
        "step": job.step,
        "options": job.options,
        "origin": job.origin,
        "visibility": job.visibility,
        "gallery": job.gallery,
        "task_hash": job.task_hash,
        "created_at": job.created_at.isoformat(),
        "started_at": job.started_at.isoformat() if job.started_at else None,
        "finished_at": job.finished_at.isoformat() if job.finished_at else None,
        "cancel_requested": job.cancel_requested,
        "best": best_json(job),
        "summary": job.summary,
        "turns": job.turns.count(),
    }


def best_json(job: Job) -> dict[str, Any]:
    """The job's result (Job.result(): what the pages and the README show): the bare numbers, and
    under `result` the confirmation and the paired intervals in numbers and in words."""
    result = job.result()
    return {
        "version": job.best_version,
        "reward": job.best_reward,
        "speedup_vs_eager": job.best_speedup_eager,
        "speedup_vs_compile": job.best_speedup_compile,
        "confirmed": job.best_confirmed,
        "result": result.to_dict() if result else None,
    }


def turn_json(turn: Turn, with_events: bool = True) -> dict[str, Any]:
    data = {
        "index": turn.index,
        "reward": turn.reward,
        "speedup_vs_eager": turn.speedup_eager,
        "speedup_vs_compile": turn.speedup_compile,
        "speed": turn.report().to_dict(),
        "has_error": turn.has_error,
        "improved": turn.improved,
        "prompt_tokens": turn.prompt_tokens,
        "completion_tokens": turn.completion_tokens,
        "cost_usd": turn.cost_usd,
        "created_at": turn.created_at.isoformat(),
    }
    if with_events:
        data["events"] = turn.events
        data["evaluation"] = turn.evaluation
    return data


def _json_body(request) -> dict[str, Any] | JsonResponse:
    try:
        body = json.loads(request.body or b"{}")
    except (json.JSONDecodeError, UnicodeDecodeError):
        return error(400, "the body is not JSON")
    if not isinstance(body, dict):
        return error(400, "the body must be a JSON object")
    return body


@api_view(("GET",), auth_required=False)
def openapi(request):
    return JsonResponse(openapi_schema(request.build_absolute_uri("/").rstrip("/")))


@api_view(("GET", "POST"))
def jobs(request):
    if request.method == "GET":
        items = visible_jobs(request.api_user)[:200]
        return JsonResponse({"jobs": [job_json(j) for j in items]})
    body = _json_body(request)
    if isinstance(body, JsonResponse):
        return body
    source, name = str(body.get("source", "")), str(body.get("name", ""))
    module = body.get("module")
    if module is not None:
        # any module: {"class": "SEBlock", "init": [64] or {"channels": 64}, "inputs": ["float32[8,64,28,28]"]}
        if not isinstance(module, dict) or not isinstance(module.get("class"), str):
            return error(400, "invalid job", errors=['module must be an object with "class", "init" and "inputs"'])
        inputs = module.get("inputs") or []
        try:
            source = task_from_module(source, module["class"], module.get("init"), inputs if isinstance(inputs, list) else str(inputs))
        except SpecError as exc:
            return error(400, "invalid job", errors=[str(exc)])
        name = name or module["class"]
    try:
        job = services.create_job(request.api_user, name, source, body.get("options") or {})
    except services.InvalidJob as exc:
        return error(400, "invalid job", errors=exc.errors)
    return JsonResponse(job_json(job), status=201)


@api_view(("GET",), auth_required=False)
def job_detail(request, job_id: int):
    job = _job_for(request, job_id)
    return job if isinstance(job, JsonResponse) else JsonResponse(job_json(job))


@api_view(("GET",), auth_required=False)
def turns(request, job_id: int):
    job = _job_for(request, job_id)
    if isinstance(job, JsonResponse):
        return job
    try:
        since = int(request.GET.get("since", -1))
    except ValueError:
        return error(400, "since must be an integer")
    rows = list(job.turns.filter(index__gt=since).order_by("index")[:TURN_PAGE])
    return JsonResponse(
        {
            "job": job.pk,
            "state": job.state,
            "since": since,
            "turns": [turn_json(t) for t in rows],
            "last_index": rows[-1].index if rows else since,
            "more": len(rows) == TURN_PAGE,
        }
    )


@api_view(("GET",), auth_required=False)
def turn_detail(request, job_id: int, index: int):
    job = _job_for(request, job_id)
    if isinstance(job, JsonResponse):
        return job
    turn = job.turns.filter(index=index).first()
    return error(404, "no such turn") if turn is None else JsonResponse(turn_json(turn))


@api_view(("GET",), auth_required=False)
def progress(request, job_id: int):
    job = _job_for(request, job_id)
    if isinstance(job, JsonResponse):
        return job
    last = job.turns.order_by("-index").values_list("index", flat=True).first()
    now = timezone.now()
    elapsed = None
    if job.started_at:
        elapsed = ((job.finished_at or now) - job.started_at).total_seconds()
    return JsonResponse(
        {
            "state": job.state,
            "step": job.step,
            "reason": job.reason,
            "last_turn": last,
            "turns": job.turns.count(),
            "elapsed_s": elapsed,
            "cancel_requested": job.cancel_requested,
            "best": best_json(job),
        }
    )


@api_view(("POST",))
def cancel(request, job_id: int):
    job = _job_for(request, job_id, change=True)
    if isinstance(job, JsonResponse):
        return job
    job = services.cancel_job(job)
    return JsonResponse(job_json(job))


@api_view(("GET",), auth_required=False)
def artifacts(request, job_id: int):
    job = _job_for(request, job_id)
    if isinstance(job, JsonResponse):
        return job
    return JsonResponse(
        {
            "best_version": job.best_version,
            "files": [{"path": a.path, "bytes": len(a.content.encode()), "version": a.version} for a in job.artifacts.all()],
            "evaluation": job.best_evaluation,
        }
    )


@api_view(("GET",), auth_required=False)
def artifacts_zip(request, job_id: int):
    job = _job_for(request, job_id)
    return job if isinstance(job, JsonResponse) else file_views.zip_response(job)


@api_view(("GET",), auth_required=False)
def artifact_file(request, job_id: int, path: str):
    job = _job_for(request, job_id)
    return job if isinstance(job, JsonResponse) else file_views.file_response(job, path)


@api_view(("GET",), auth_required=False)
def trajectory(request, job_id: int):
    job = _job_for(request, job_id)
    return job if isinstance(job, JsonResponse) else file_views.trajectory_response(job)


@api_view(("POST",))
def evaluate(request):
    """Task + candidate in, sandbox result (with reward) out; runs on the gpu queue."""
    body = _json_body(request)
    if isinstance(body, JsonResponse):
        return body
    task, files = body.get("task"), body.get("files")
    if not isinstance(task, str):
        return error(400, "`task` must be the reference module source")
    check = check_task_source(task, MAX_SOURCE_BYTES)
    if not check.ok:
        return error(400, "invalid task", errors=check.errors)
    if not isinstance(files, dict) or not files or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        return error(400, "`files` must be an object of relative path -> text")
    if sum(len(v.encode()) for v in files.values()) > MAX_FILES_BYTES:
        return error(400, f"the candidate files exceed {MAX_FILES_BYTES} bytes")
    if any(p.startswith("/") or ".." in p.split("/") for p in files):
        return error(400, "file paths must be relative and stay inside the workspace")
    try:
        opts = services.normalize_options(body.get("options") or {})
    except services.InvalidJob as exc:
        return error(400, "invalid options", errors=exc.errors)
    sandbox_opts = {k: opts[k] for k in ("backend", "torch_ops", "preset")}
    timeout = float(getattr(settings, "KERNELWRIGHT_API_EVALUATE_TIMEOUT", 900))
    from celery.exceptions import TimeoutError as CeleryTimeout

    result = services.celery_app().send_task(
        "kernelwright.gpu.evaluate", kwargs={"task_source": task, "files": files, "options": sandbox_opts, "job_id": None}
    )
    try:
        data = result.get(timeout=timeout)
    except CeleryTimeout:
        result.revoke()
        return error(504, f"the evaluation did not finish within {timeout:.0f} s")
    return JsonResponse(data)
