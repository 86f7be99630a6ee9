"""The task library: KernelBench-format tasks kept on the server (the repository's own
benchmarks/tasks and what `python -m benchmarks.synthesize --out var/task-library` kept), to
browse, search and start a job from.

Folders come from KERNELWRIGHT_TASK_LIBRARY (a list of paths); a task is named by its folder's
position and its file stem (/tasks/<folder>/<stem>/start/), and only names found by listing those folders are ever read, so no
request chooses a path.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from benchmarks.synth.similarity import ops_of
from sandbox.options import BACKENDS
from webapp.jobs import services

MAX_LISTED = 500


def folders() -> list[Path]:
    return [Path(p) for p in settings.KERNELWRIGHT_TASK_LIBRARY]


@dataclass
class LibraryTask:
    index: int  # the folder's position in folders()
    name: str  # the file's stem
    folder: str
    summary: str  # the docstring's first line
    ops: str  # the operators the forward computes (benchmarks.synth.similarity)
    source: str


def _read(index: int, path: Path) -> LibraryTask | None:
    try:
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source)
    except (OSError, UnicodeDecodeError, SyntaxError):
        return None
    doc = (ast.get_docstring(tree) or "").strip().splitlines()
    ops = ", ".join(f"{op}×{n}" if n > 1 else op for op, n in sorted(ops_of(source).items()))
    return LibraryTask(index, path.stem, path.parent.as_posix(), doc[0] if doc else "", ops, source)


def library() -> list[LibraryTask]:
    out: list[LibraryTask] = []
    for index, folder in enumerate(folders()):
        for path in sorted(folder.glob("*.py")) if folder.is_dir() else []:
            if not path.name.startswith("_") and (task := _read(index, path)) is not None:
                out.append(task)
    return out


def find(index: int, name: str) -> LibraryTask:
    task = next((t for t in library() if (t.index, t.name) == (index, name)), None)
    if task is None:
        raise Http404("no such task in the library")
    return task


@login_required
def task_library(request):
    query = request.GET.get("q", "").strip().lower()
    tasks = [t for t in library() if not query or query in f"{t.name} {t.summary} {t.ops}".lower()]
    return render(
        request,
        "jobs/tasks_library.html",
        {"tasks": tasks[:MAX_LISTED], "total": len(tasks), "query": query, "folders": folders(), "backends": BACKENDS},
    )


@login_required
@require_POST
def start_from_library(request, folder: int, stem: str):
    task = find(folder, stem)
    options = {"backend": request.POST.get("backend") or "auto", "max_turns": request.POST.get("max_turns") or 10}
    try:
        job = services.create_job(request.user, task.name, task.source, options)
    except services.InvalidJob as exc:
        messages.error(request, f"{task.name}: " + "; ".join(exc.errors))
        return redirect("jobs:task_library")
    return redirect("jobs:detail", job.pk)
