"""Asynchronous batched evaluation over the API (webapp.jobs.evaluations does the work).

    POST /api/evaluations          {"task", "candidates": [{"files"}], "options", "webhook"} -> 202, ids
    GET  /api/evaluations?batch=B  the caller's evaluations of a batch
    GET  /api/evaluations/ID       one evaluation: state, reward and, when done, the EvalResult

For more than a single quick check use these rather than POST /api/evaluate, which keeps the
caller's connection open until its one result is in (up to KERNELWRIGHT_API_EVALUATE_TIMEOUT,
900 s; it waits as a coroutine, holding no web thread, and one of the caller's gpu places). A POST needs a
token (its quotas are per token); reads accept the browser session too. Only the owner (or
staff) sees an evaluation; anyone else gets 404.
"""

from __future__ import annotations

from typing import Any

from django.http import JsonResponse

from webapp.jobs import evaluations
from webapp.jobs.models import ApiToken, Evaluation
from webapp.jobs.views.api import _json_body, api_view, error


def evaluation_json(ev: Evaluation, with_result: bool = True) -> dict[str, Any]:
    data = {
        **evaluations.notification(ev),
        "task_hash": ev.task_hash,
        "options": ev.options,
        "created_at": ev.created_at.isoformat(),
        "started_at": ev.started_at.isoformat() if ev.started_at else None,
        "finished_at": ev.finished_at.isoformat() if ev.finished_at else None,
        "webhook": {"url": ev.webhook_url, "status": ev.webhook_status} if ev.webhook_url else None,
    }
    if with_result:
        data["result"] = ev.result
    return data


def request_token(request) -> ApiToken | None:
    """The ApiToken of the request's `Authorization: Token <key>` (api_view has checked it)."""
    key = request.headers.get("Authorization", "").partition(" ")[2].strip()
    return ApiToken.objects.filter(key_hash=ApiToken.hash_key(key)).first() if key else None


def refusal(exc: evaluations.Refused) -> JsonResponse:
    resp = error(exc.status, exc.message, **({"errors": exc.errors} if exc.errors else {}))
    if exc.retry_after is not None:
        resp["Retry-After"] = str(exc.retry_after)
    return resp


def _mine(request):
    user = request.api_user
    rows = Evaluation.objects.all() if user.is_staff else Evaluation.objects.filter(owner=user)
    evaluations.dispatch_quietly(user.pk)  # rows a dead worker left waiting go out now
    return rows


@api_view(("GET", "POST"))
def evaluations_view(request):
    if request.method == "GET":
        batch = request.GET.get("batch", "")
        if not batch:
            return error(400, "give ?batch=<id> (the id a POST returned)")
        rows = _mine(request).filter(batch=batch).order_by("index")
        return JsonResponse({"batch": batch, "evaluations": [evaluation_json(e, with_result=False) for e in rows]})
    token = request_token(request)
    if token is None:
        return error(401, "posting evaluations needs `Authorization: Token <key>`")
    body = _json_body(request)
    if isinstance(body, JsonResponse):
        return body
    try:
        sub = evaluations.parse(body)
        evaluations.check_rate(token, len(sub.candidates))
    except evaluations.Refused as exc:
        return refusal(exc)
    rows = evaluations.submit(request.api_user, token, sub)
    reply: dict[str, Any] = {
        "batch": rows[0].batch,
        "evaluations": [evaluation_json(e, with_result=False) for e in rows],
    }
    if sub.webhook:
        reply["webhook_secret"] = rows[0].webhook_secret  # shown once: verifies X-Kernelwright-Signature
    return JsonResponse(reply, status=202)


@api_view(("GET",))
def evaluation_detail(request, evaluation_id: int):
    ev = _mine(request).filter(pk=evaluation_id).first()
    return error(404, "no such evaluation") if ev is None else JsonResponse(evaluation_json(ev))
